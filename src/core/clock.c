/*
 * clock.c -- the system clock and the manual clock that tests (and `serve --test-clock`)
 * move by hand. A manual clock's monotonic reading starts at 1 s and only moves forward.
 */
#include "clock.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

struct sluice_clock {
    int manual;
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

sluice_clock *sluice_clock_create_system(void) {
    sluice_clock *c = calloc(1, sizeof(*c));
    return c;
}

sluice_clock *sluice_clock_create_manual(int64_t wall_ns) {
    sluice_clock *c = calloc(1, sizeof(*c));
    if (c == NULL) return NULL;
    c->manual = 1;
    atomic_store(&c->mono_ns, SLUICE_NS_PER_S);
    atomic_store(&c->wall_ns, wall_ns);
    return c;
}

void sluice_clock_destroy(sluice_clock *clock) { free(clock); }

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

int sluice_clock_advance(sluice_clock *clock, int64_t delta_ns) {
    if (clock == NULL || !clock->manual || delta_ns < 0) return SLUICE_EINVAL;
    atomic_fetch_add(&clock->mono_ns, delta_ns);
    atomic_fetch_add(&clock->wall_ns, delta_ns);
    return SLUICE_OK;
}

/* Setting the wall clock moves the monotonic one by the same amount when going forward;
 * going backward only the wall clock moves (monotonic time never goes back). */
int sluice_clock_set_wall(sluice_clock *clock, int64_t wall_ns) {
    if (clock == NULL || !clock->manual) return SLUICE_EINVAL;
    int64_t old = atomic_exchange(&clock->wall_ns, wall_ns);
    if (wall_ns > old) atomic_fetch_add(&clock->mono_ns, wall_ns - old);
    return SLUICE_OK;
}
