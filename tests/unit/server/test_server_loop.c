/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_server_loop.c -- the server's timeout lists (what slowloris protection relies on:
 * a deadline fixed when a request starts, expiry in deadline order, re-arming moves a
 * connection, disarming removes it), checked against a brute-force model on random
 * operations; and CL.THROTTLE's rounding of durations to seconds (redis-cell's rule).
 */
#include "core/loop.h"
#include "server/server.h"
#include "t.h"

#define N 64

static void test_expiry_order_and_rearm(void) {
    sl_dlist d;
    sl_dlist_init(&d, 1, 100);
    sl_dnode n[3];
    for (int i = 0; i < 3; i++) sl_dnode_init(&n[i]);
    sl_dlist_arm(&d, &n[0], 0);
    sl_dlist_arm(&d, &n[1], 10);
    sl_dlist_arm(&d, &n[2], 20);
    T_CHECK(sl_dlist_expired(&d, 99) == NULL);
    T_CHECK(sl_dlist_expired(&d, 100) == &n[0]);
    sl_dlist_arm(&d, &n[0], 50); /* activity: moves to the tail with a new deadline */
    T_CHECK(sl_dlist_expired(&d, 110) == &n[1]);
    sl_dnode_disarm(&n[1]);
    T_CHECK(sl_dlist_expired(&d, 119) == NULL);
    T_CHECK(sl_dlist_expired(&d, 120) == &n[2]);
    sl_dnode_disarm(&n[2]);
    T_CHECK(sl_dlist_expired(&d, 149) == NULL);
    T_CHECK(sl_dlist_expired(&d, 150) == &n[0]);
    sl_dnode_disarm(&n[0]);
    sl_dnode_disarm(&n[0]); /* twice is harmless */
    T_CHECK(sl_dlist_expired(&d, INT64_MAX) == NULL);
}

/* Property: with random arm/disarm/expire on three lists of different durations, the
 * nodes each list expires are exactly those the model says are past their deadline. */
static void test_lists_against_model(void) {
    uint64_t seed = t_seed();
    sl_dlist l[3];
    int64_t dur[3] = {100, 250, 1000};
    for (int i = 0; i < 3; i++) sl_dlist_init(&l[i], i, dur[i]);
    static sl_dnode n[N];
    int which[N];
    int64_t deadline[N];
    for (int i = 0; i < N; i++) {
        sl_dnode_init(&n[i]);
        which[i] = -1;
    }
    int64_t now = 0;
    for (int step = 0; step < 20000; step++) {
        now += (int64_t)(t_rand(&seed) % 20);
        int i = (int)(t_rand(&seed) % N);
        switch (t_rand(&seed) % 3) {
        case 0: {
            int li = (int)(t_rand(&seed) % 3);
            sl_dlist_arm(&l[li], &n[i], now);
            which[i] = li;
            deadline[i] = now + dur[li];
            break;
        }
        case 1:
            sl_dnode_disarm(&n[i]);
            which[i] = -1;
            break;
        default:
            for (int li = 0; li < 3; li++) {
                sl_dnode *e;
                while ((e = sl_dlist_expired(&l[li], now)) != NULL) {
                    int k = (int)(e - n);
                    T_CHECK(which[k] == li && deadline[k] <= now);
                    sl_dnode_disarm(e);
                    which[k] = -1;
                }
            }
            for (int k = 0; k < N; k++)
                if (which[k] >= 0) T_CHECK(deadline[k] > now); /* nothing overdue left */
        }
        T_EQ_I(n[i].list, which[i]);
    }
}

static void test_cell_rounding(void) {
    T_EQ_I(sl_cell_round_s(0), 0);
    T_EQ_I(sl_cell_round_s(-5), 0);
    T_EQ_I(sl_cell_round_s(999999), 0);               /* under 1 ms: not rounded up */
    T_EQ_I(sl_cell_round_s(1000000), 1);              /* exactly 1 ms: rounded up */
    T_EQ_I(sl_cell_round_s(SLUICE_NS_PER_S), 1);
    T_EQ_I(sl_cell_round_s(SLUICE_NS_PER_S + 999999), 1);
    T_EQ_I(sl_cell_round_s(SLUICE_NS_PER_S + 1000000), 2);
    T_EQ_I(sl_cell_round_s(2 * SLUICE_NS_PER_S), 2);
}

int main(void) {
    T_RUN(test_expiry_order_and_rearm);
    T_RUN(test_lists_against_model);
    T_RUN(test_cell_rounding);
    return T_DONE();
}
