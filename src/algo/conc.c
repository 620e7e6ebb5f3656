/* SPDX-License-Identifier: Apache-2.0 */
/*
 * conc.c -- concurrency: at most `limit` slots in flight, each held by a lease that
 * expires, so a release that never comes cannot leak a slot.
 *
 * Leases are counted per time bucket, not one by one: bucket k holds the slots acquired
 * in [k*w, (k+1)*w) of the monotonic clock and expires all of them together at
 * E(k) = (k+1)*w + lease_ns. A lost release is therefore reclaimed more than lease_ns
 * and at most lease_ns + w after its acquisition: never early, so the limit on work
 * really in flight holds for requests that run up to lease_ns.
 *
 * Why w = ceil(lease_ns / (SL_CONC_BUCKETS - 1)) and not lease/SL_CONC_BUCKETS: the slots
 * alive at t were acquired in (t - lease - w, t], a span of lease + w, and a bucket may
 * only cover w of it; with w = lease/N that needs N + 1 counters. The state has N, so
 * w = lease/(N-1): a lost release is reclaimed within lease * (1 + 1/(N-1)) (+ < 1 ns of
 * rounding), i.e. between lease and 1.2 * lease for N = 6.
 *
 * A lease (sl_result.lease) is (absolute bucket number mod 2^40) << 24 | slots; the
 * limit is therefore capped at 2^24 - 1 slots. Releasing a lease twice is the caller's
 * bug (the server tracks its leases): the second release takes slots that belong to other
 * leases of the same bucket, although never below zero. A lease whose bucket expired is
 * refused and changes nothing. Units: nanoseconds, whole slots.
 */
#include <string.h>

#include "algo_impl.h"

#define N SL_CONC_BUCKETS
#define LEASE_SLOT_BITS 24
#define LEASE_SLOT_MASK ((UINT64_C(1) << LEASE_SLOT_BITS) - 1)
#define LEASE_BUCKET_MASK ((UINT64_C(1) << (64 - LEASE_SLOT_BITS)) - 1)
#define CONC_LIMIT_MAX LEASE_SLOT_MASK
/* A year: keeps every bucket-time computation far from int64 overflow. */
#define CONC_LEASE_MAX (INT64_C(366) * 86400 * SLUICE_NS_PER_S)

static int64_t bucket_width(const sl_limit *lim) {
    return (lim->lease_ns + (N - 1) - 1) / (N - 1);
}

static int64_t floor_div(int64_t a, int64_t b) {
    int64_t q = a / b;
    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

/* When the slots of counts[i] expire. */
static int64_t bucket_expiry(const sl_limit *lim, const sl_conc_state *s, int i) {
    return s->base_ns + (int64_t)(i + 1) * bucket_width(lim) + lim->lease_ns;
}

/* The state as seen at `now`: the window slid so that its newest bucket holds `now`,
 * and expired buckets zeroed; returns the slots the expired buckets held (leases never
 * released: an adaptive limit counts each as a drop). A bucket slid out of the window is
 * expired too: its expiry (k+1)w + lease <= (b-N+1)w + (N-1)w = bw <= now. Within a process the monotonic clock never goes back, so
 * a state is never ahead of now by more than the one bucket a rebase's rounding adds
 * (acquisitions then go to its newest bucket and live up to w longer). A state further
 * ahead (a damaged snapshot) is from the future: it is pulled back to that bound, counts
 * kept, so its slots expire within lease + 2w of now instead of whenever it says. */
static uint32_t normalise(const sl_limit *lim, const void *state, sluice_time now, sl_conc_state *s) {
    int64_t w = bucket_width(lim);
    int64_t b = floor_div(now.mono_ns, w);
    uint64_t dropped = 0;
    if (state == NULL) {
        memset(s, 0, sizeof(*s));
        s->base_ns = (b - (N - 1)) * w;
        return 0;
    }
    memcpy(s, state, sizeof(*s));
    int64_t base_b = floor_div(s->base_ns, w);
    if (base_b <= b - (2 * N - 1)) { /* every bucket is older than the window */
        for (int i = 0; i < N; i++) dropped += s->counts[i];
        memset(s->counts, 0, sizeof(s->counts));
        base_b = b - (N - 1);
    } else if (base_b > b - (N - 1) + 1) { /* from the future: bounded, see above */
        base_b = b - (N - 1) + 1;
    } else if (b - (N - 1) > base_b) {
        int64_t shift = b - (N - 1) - base_b;
        for (int64_t i = 0; i < shift; i++) dropped += s->counts[i];
        memmove(s->counts, s->counts + shift, (size_t)(N - shift) * sizeof(s->counts[0]));
        memset(s->counts + (N - shift), 0, (size_t)shift * sizeof(s->counts[0]));
        base_b += shift;
    }
    s->base_ns = base_b * w;
    for (int i = 0; i < N; i++)
        if (now.mono_ns >= bucket_expiry(lim, s, i)) {
            dropped += s->counts[i];
            s->counts[i] = 0;
        }
    return dropped > UINT32_MAX ? UINT32_MAX : (uint32_t)dropped;
}

static uint64_t in_flight(const sl_conc_state *s) {
    uint64_t sum = 0;
    for (int i = 0; i < N; i++) sum += s->counts[i];
    return sum;
}

/* Time until the last live slot expires (0 when none is held). */
static int64_t until_empty(const sl_limit *lim, const sl_conc_state *s, sluice_time now) {
    for (int i = N - 1; i >= 0; i--)
        if (s->counts[i] != 0) return bucket_expiry(lim, s, i) - now.mono_ns;
    return 0;
}

static void report(const sl_limit *lim, const sl_conc_state *s, sluice_time now, sl_result *r) {
    uint64_t used = in_flight(s);
    r->limit = lim->limit;
    r->remaining = used >= lim->limit ? 0 : lim->limit - used;
    r->reset_after_ns = until_empty(lim, s, now);
    r->retry_after_ns = 0;
    r->delay_ns = 0;
    r->lease = 0;
}

static void add_slots(uint32_t *count, uint64_t n) {
    uint64_t v = (uint64_t)*count + n;
    *count = v > UINT32_MAX ? UINT32_MAX : (uint32_t)v;
}

int sl_conc_init(sl_limit *out, const sluice_limit_spec *spec, char *errbuf, size_t errbuf_len) {
    if (spec->limit == 0)
        return sl_algo_error(errbuf, errbuf_len, SLUICE_EINVAL, "concurrency: max must be at least 1");
    if (spec->limit > CONC_LIMIT_MAX)
        return sl_algo_error(errbuf, errbuf_len, SLUICE_ERANGE, "concurrency: max %llu is above %llu",
                             (unsigned long long)spec->limit, (unsigned long long)CONC_LIMIT_MAX);
    if (spec->lease_ns <= 0)
        return sl_algo_error(errbuf, errbuf_len, SLUICE_EINVAL, "concurrency: lease must be positive");
    if (spec->lease_ns > CONC_LEASE_MAX)
        return sl_algo_error(errbuf, errbuf_len, SLUICE_ERANGE, "concurrency: lease is above 366 days");
    out->algo = SLUICE_CONCURRENCY;
    out->limit = out->capacity = spec->limit;
    out->lease_ns = spec->lease_ns;
    out->state_size = sizeof(sl_conc_state);
    return SLUICE_OK;
}

/* ---- shared with the adaptive algorithm (capacity.c) ---- */

uint32_t sl__conc_norm(const sl_limit *lim, const void *state, sluice_time now, sl_conc_state *s) {
    return normalise(lim, state, now, s);
}

uint64_t sl__conc_in_flight(const sl_conc_state *s) { return in_flight(s); }

int64_t sl__conc_until_empty(const sl_limit *lim, const sl_conc_state *s, sluice_time now) {
    return until_empty(lim, s, now);
}

uint64_t sl__conc_lease(const sl_limit *lim, const sl_conc_state *s, uint64_t cost) {
    int64_t bucket = floor_div(s->base_ns, bucket_width(lim)) + (N - 1);
    return ((uint64_t)bucket & LEASE_BUCKET_MASK) << LEASE_SLOT_BITS | (cost & LEASE_SLOT_MASK);
}

int64_t sl__conc_retry(const sl_limit *lim, const sl_conc_state *s, sluice_time now, uint64_t need) {
    uint64_t freed = 0;
    if (need == 0) return 0;
    for (int i = 0; i < N; i++) {
        freed += s->counts[i];
        if (freed >= need) return bucket_expiry(lim, s, i) - now.mono_ns;
    }
    return SLUICE_NEVER;
}

/* Limits with priority classes keep the class in the lease (capacity.c). */
bool sl__conc_classes(const sl_limit *lim) {
    return lim->algo == SLUICE_ADAPTIVE_CONCURRENCY || (lim->cap.tail & SL_TAIL_SHED) != 0;
}

bool sl_conc_decide(const sl_limit *lim, const void *state, void *next, sluice_time now,
                    uint64_t cost, sl_result *r) {
    sl_conc_state s;
    normalise(lim, state, now, &s);
    uint64_t used = in_flight(&s);
    bool fits = cost <= lim->limit && used <= lim->limit - cost;
    if (fits && cost > 0) add_slots(&s.counts[N - 1], cost);
    report(lim, &s, now, r);
    r->allowed = fits;
    if (fits && cost > 0) {
        int64_t bucket = floor_div(s.base_ns, bucket_width(lim)) + (N - 1);
        r->lease = ((uint64_t)bucket & LEASE_BUCKET_MASK) << LEASE_SLOT_BITS | cost;
    } else if (!fits && cost > lim->limit) {
        r->retry_after_ns = SLUICE_NEVER;
    } else if (!fits) {
        /* Oldest buckets expire first: the request fits once enough of them have. */
        uint64_t need = used + cost - lim->limit, freed = 0;
        for (int i = 0; i < N; i++) {
            freed += s.counts[i];
            if (freed >= need) {
                r->retry_after_ns = bucket_expiry(lim, &s, i) - now.mono_ns;
                break;
            }
        }
    }
    memcpy(next, &s, sizeof(s));
    return fits && cost > 0;
}

/* Takes `n` slots off, newest bucket first (a refund of slots just taken), never
 * below zero. Returns how many were taken. */
static uint64_t take_slots(sl_conc_state *s, int from, uint64_t n) {
    uint64_t taken = 0;
    for (int i = from; i >= 0 && taken < n; i--) {
        uint64_t t = s->counts[i] < n - taken ? s->counts[i] : n - taken;
        s->counts[i] -= (uint32_t)t;
        taken += t;
    }
    return taken;
}

void sl_conc_settle(const sl_limit *lim, const void *state, void *next, sluice_time now,
                    int64_t delta, sl_result *r) {
    sl_conc_state s;
    normalise(lim, state, now, &s);
    if (delta > 0) add_slots(&s.counts[N - 1], (uint64_t)delta);
    else if (delta < 0) take_slots(&s, N - 1, delta == INT64_MIN ? (uint64_t)INT64_MAX + 1 : (uint64_t)-delta);
    report(lim, &s, now, r);
    r->allowed = true;
    memcpy(next, &s, sizeof(s));
}

/* With classes (a shed tail) the class rides in the lease and its count goes down with
 * the slots; the tail itself is kept by the caller's copy (sl_cap_release). */
/* Why: a lease issued under priority classes carries its class above its slots (bits
 * 21-23). Released after a reload removed the classes, those bits would read as millions
 * of slots and free every lease of its bucket. A slot field above the limit cannot be one
 * lease's slots, so its class bits are dropped. */
uint64_t sl__conc_lease_plain(const sl_limit *lim, uint64_t lease) {
    uint64_t slots = lease & LEASE_SLOT_MASK;
    if (sl__conc_classes(lim) || slots <= lim->limit) return lease;
    return (lease & ~LEASE_SLOT_MASK) | (slots & SL_LEASE_CLASS_SLOTS);
}

bool sl_conc_release(const sl_limit *lim, const void *state, void *next, sluice_time now,
                     uint64_t lease) {
    lease = sl__conc_lease_plain(lim, lease);
    uint64_t slots = lease & LEASE_SLOT_MASK, bucket = lease >> LEASE_SLOT_BITS;
    if (sl__conc_classes(lim)) slots &= SL_LEASE_CLASS_SLOTS;
    if (state == NULL || slots == 0) return false;
    sl_conc_state s;
    normalise(lim, state, now, &s);
    int64_t base_b = floor_div(s.base_ns, bucket_width(lim));
    for (int i = 0; i < N; i++) {
        if ((((uint64_t)(base_b + i)) & LEASE_BUCKET_MASK) != bucket) continue;
        if (s.counts[i] == 0) break; /* expired (or already released) */
        s.counts[i] -= (uint32_t)(slots < s.counts[i] ? slots : s.counts[i]);
        memcpy(next, &s, sizeof(s));
        return true;
    }
    if (next != state) memcpy(next, state, sizeof(s));
    return false;
}

int64_t sl_conc_fresh_at(const sl_limit *lim, const void *state, sluice_time now) {
    if (state == NULL) return now.mono_ns;
    sl_conc_state s;
    normalise(lim, state, now, &s);
    return now.mono_ns + until_empty(lim, &s, now);
}

/* Buckets stay aligned to multiples of w (leases name them by number), so the shifted
 * base is rounded up: restored slots may live up to w longer, never shorter. */
void sl_conc_rebase(const sl_limit *lim, void *state, int64_t delta_ns) {
    sl_conc_state *s = state;
    int64_t w = bucket_width(lim), base;
    if (__builtin_add_overflow(s->base_ns, delta_ns, &base)) base = delta_ns < 0 ? INT64_MIN / 2 : INT64_MAX / 2;
    /* A hostile snapshot may carry any base: keep it where -base and the rounding up
     * cannot overflow (such an entry is long expired or far in the future either way). */
    if (base < INT64_MIN / 2) base = INT64_MIN / 2;
    if (base > INT64_MAX / 2) base = INT64_MAX / 2;
    s->base_ns = -floor_div(-base, w) * w;
}

/* The counts are slots really in flight, so a new limit keeps them as they are (not
 * scaled: scaling would admit more requests than the new limit while the old ones run).
 * A new lease length moves each bucket to the new bucket whose expiry is the first at or
 * after its old one, clamped to the window: a shorter lease shortens the remaining life
 * of old slots to at most the new lease, a longer one never shortens it. Leases issued
 * before a change of lease length no longer name a bucket (their releases are refused)
 * and their slots are reclaimed by expiry. */
void sl_conc_carry(const sl_limit *old, const void *state, const sl_limit *lim, void *next,
                   sluice_time now) {
    sl_conc_state s, o;
    normalise(lim, NULL, now, &s);
    if (state != NULL) {
        normalise(old, state, now, &o);
        if (old->lease_ns == lim->lease_ns) {
            s = o;
        } else {
            int64_t w = bucket_width(lim);
            for (int i = 0; i < N; i++) {
                if (o.counts[i] == 0) continue;
                int64_t e = bucket_expiry(old, &o, i);
                /* smallest j with base + (j+1)*w + lease >= e */
                int64_t j = -floor_div(-(e - lim->lease_ns - s.base_ns), w) - 1;
                j = j < 0 ? 0 : j > N - 1 ? N - 1 : j;
                add_slots(&s.counts[j], o.counts[i]);
            }
        }
    }
    memcpy(next, &s, sizeof(s));
}
