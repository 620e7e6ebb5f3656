/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_token_shares.c -- the token table's bound and shares (issue 27): a policy holds at
 * most its share, another policy's share stays whole, a dropped or expired id goes back
 * to its policy, and a full table refuses (counted) instead of handing out an id of 0.
 */
#include "engine/internal.h"
#include "t.h"

#define SEC SLUICE_NS_PER_S

static void a_share_is_a_bound_and_the_other_stays_whole(void) {
    int err;
    sl_token_table *t = sl_token_table_create(1000, &err);
    T_CHECK(t != NULL);
    T_EQ_U(sl_token_table_capacity(t), 1000);
    uint64_t a[600], b[500];
    size_t na = 0;
    for (int i = 0; i < 600; i++) {
        a[i] = sl__token_reserve(t, 111, 500, 100 * SEC, 0);
        na += a[i] != 0;
    }
    T_EQ_U(na, 500); /* its share, not one more */
    uint64_t held = 0, refused = 0;
    sl_token_table_stats(t, &held, &refused);
    T_EQ_U(held, 500);
    T_EQ_U(refused, 100);
    for (int i = 0; i < 500; i++) { /* the other policy's share is all there */
        b[i] = sl__token_reserve(t, 222, 500, 100 * SEC, 0);
        T_CHECK(b[i] != 0);
        T_CHECK(sl__token_commit(t, b[i], SL_TOK_RELEASE, 100 * SEC));
    }
    T_EQ_U(sl__token_reserve(t, 333, 500, 100 * SEC, 0), 0); /* the table is full */
    /* single use still holds for the committed ids; a taken id frees its place */
    T_CHECK(sl__token_take(t, b[0], SL_TOK_RELEASE, SEC));
    T_CHECK(!sl__token_take(t, b[0], SL_TOK_RELEASE, SEC));
    T_CHECK(sl__token_reserve(t, 222, 500, 100 * SEC, SEC) != 0);
    /* a reserved (not committed) id cannot be taken; dropped, it goes back to its policy */
    T_CHECK(!sl__token_take(t, a[0], SL_TOK_RELEASE, SEC));
    sl__token_drop(t, a[0]);
    T_CHECK(sl__token_reserve(t, 111, 500, 100 * SEC, SEC) != 0);
    T_EQ_U(sl__token_reserve(t, 111, 500, 100 * SEC, SEC), 0);
    sl_token_table_destroy(t);
}

/* Ids nobody gives back count against their policy only until they expire. */
static void expired_ids_go_back(void) {
    int err;
    sl_token_table *t = sl_token_table_create(64, &err);
    for (int i = 0; i < 64; i++) T_CHECK(sl__token_reserve(t, 7, 64, 10 * SEC, 0) != 0);
    T_EQ_U(sl__token_reserve(t, 7, 64, 20 * SEC, 5 * SEC), 0);
    for (int i = 0; i < 64; i++) T_CHECK(sl__token_reserve(t, 7, 64, 30 * SEC, 11 * SEC) != 0);
    uint64_t held = 0;
    sl_token_table_stats(t, &held, NULL);
    T_EQ_U(held, 64);
    sl_token_table_destroy(t);
}

int main(void) {
    T_RUN(a_share_is_a_bound_and_the_other_stays_whole);
    T_RUN(expired_ids_go_back);
    return T_DONE();
}
