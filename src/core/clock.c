/* SPDX-License-Identifier: Apache-2.0 */
/*
 * clock.c -- the system clock and the manual clock that tests (and `serve --test-clock`)
 * move by hand. A manual clock's monotonic reading starts at 1 s and only moves forward;
 * its wall reading stays within [SLUICE_CLOCK_WALL_MIN_NS, SLUICE_CLOCK_WALL_MAX_NS]
 * (1970..2200) and its monotonic one below SL_CLOCK_MONO_MAX, so no value handed to the
 * algorithms is near int64 overflow. Units: ns (and ms in the *_ms helpers).
 */
#include "clock.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

/* The manual clock's monotonic reading never exceeds this (255 years of ns): a wall jump
 * across the whole allowed range (230 years) still fits, and the algorithms, which add
 * durations of up to INT64_MAX / 8 with saturation, keep their headroom. */
#define SL_CLOCK_MONO_MAX (INT64_MAX - (INT64_C(1) << 60))

struct sluice_clock {
    int manual;
    pthread_mutex_t mu; /* manual clocks: serialises set/advance (readers take no lock) */
    _Atomic int64_t mono_ns;
    _Atomic int64_t wall_ns;
};

int64_t sl_clock_mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * SLUICE_NS_PER_S + ts.tv_nsec;
}

int64_t sl_clock_wall_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * SLUICE_NS_PER_S + ts.tv_nsec;
}

static int wall_ok(int64_t wall_ns) {
    return wall_ns >= SLUICE_CLOCK_WALL_MIN_NS && wall_ns <= SLUICE_CLOCK_WALL_MAX_NS;
}

sluice_clock *sluice_clock_create_system(void) {
    sluice_clock *c = calloc(1, sizeof(*c));
    return c;
}

sluice_clock *sluice_clock_create_manual(int64_t wall_ns) {
    if (!wall_ok(wall_ns)) return NULL;
    sluice_clock *c = calloc(1, sizeof(*c));
    if (c == NULL) return NULL;
    c->manual = 1;
    pthread_mutex_init(&c->mu, NULL);
    atomic_store(&c->mono_ns, SLUICE_NS_PER_S);
    atomic_store(&c->wall_ns, wall_ns);
    return c;
}

void sluice_clock_destroy(sluice_clock *clock) {
    if (clock != NULL && clock->manual) pthread_mutex_destroy(&clock->mu);
    free(clock);
}

sluice_time sluice_clock_now(const sluice_clock *clock) {
    sluice_time t;
    if (clock == NULL || !clock->manual) {
        t.mono_ns = sl_clock_mono_ns();
        t.wall_ns = sl_clock_wall_ns();
        return t;
    }
    /* A reader racing an advance may see the new mono with the old wall: harmless,
     * both only move by the same step. */
    sluice_clock *c = (sluice_clock *)clock;
    t.mono_ns = atomic_load(&c->mono_ns);
    t.wall_ns = atomic_load(&c->wall_ns);
    return t;
}

/* Moves the manual clock (mutex held): wall to `wall`, monotonic forward by `mono_step`.
 * Everything is checked before anything moves, so a refused call changes nothing. */
static int move(sluice_clock *c, int64_t wall, int64_t mono_step) {
    int64_t mono = atomic_load(&c->mono_ns);
    if (!wall_ok(wall) || mono_step < 0 || mono_step > SL_CLOCK_MONO_MAX - mono)
        return SLUICE_ERANGE;
    atomic_store(&c->mono_ns, mono + mono_step);
    atomic_store(&c->wall_ns, wall);
    return SLUICE_OK;
}

int sluice_clock_advance(sluice_clock *clock, int64_t delta_ns) {
    if (clock == NULL || !clock->manual || delta_ns < 0) return SLUICE_EINVAL;
    pthread_mutex_lock(&clock->mu);
    int64_t wall = atomic_load(&clock->wall_ns), to;
    int rc = __builtin_add_overflow(wall, delta_ns, &to) ? SLUICE_ERANGE : move(clock, to, delta_ns);
    pthread_mutex_unlock(&clock->mu);
    return rc;
}

/* Setting the wall clock moves the monotonic one by the same amount when going forward;
 * going backward only the wall clock moves (monotonic time never goes back), which is
 * what an NTP step or a VM restore does to a real host. */
int sluice_clock_set_wall(sluice_clock *clock, int64_t wall_ns) {
    if (clock == NULL || !clock->manual) return SLUICE_EINVAL;
    if (!wall_ok(wall_ns)) return SLUICE_ERANGE;
    pthread_mutex_lock(&clock->mu);
    int64_t old = atomic_load(&clock->wall_ns);
    int rc = move(clock, wall_ns, wall_ns > old ? wall_ns - old : 0);
    pthread_mutex_unlock(&clock->mu);
    return rc;
}

/* The _ms forms check the range before converting, so a client's integer (a RESP or
 * JSON argument) can be passed as it is: 9223372036855 ms is refused, never wrapped. */
int sluice_clock_set_wall_ms(sluice_clock *clock, int64_t wall_ms) {
    if (clock == NULL || !clock->manual) return SLUICE_EINVAL;
    if (wall_ms < SLUICE_CLOCK_WALL_MIN_NS / SLUICE_NS_PER_MS ||
        wall_ms > SLUICE_CLOCK_WALL_MAX_NS / SLUICE_NS_PER_MS)
        return SLUICE_ERANGE;
    return sluice_clock_set_wall(clock, wall_ms * SLUICE_NS_PER_MS);
}

int sluice_clock_advance_ms(sluice_clock *clock, int64_t delta_ms) {
    if (clock == NULL || !clock->manual || delta_ms < 0) return SLUICE_EINVAL;
    if (delta_ms > SLUICE_CLOCK_WALL_MAX_NS / SLUICE_NS_PER_MS) return SLUICE_ERANGE;
    return sluice_clock_advance(clock, delta_ms * SLUICE_NS_PER_MS);
}
