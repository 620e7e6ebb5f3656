/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_path.c -- path normalisation (core/path.c), which every path match, path key and
 * per-operation cost relies on: a limit on /login also holds for //login, /./login,
 * /x/../login and /%6Cogin; a path already normal is used as it is (not copied).
 */
#include <string.h>

#include "core/path.h"
#include "t.h"

static const char *norm(const char *in, const char **res) {
    static char out[256], copy[256];
    size_t n = sl_path_norm(in, strlen(in), out, res);
    memcpy(copy, *res, n);
    copy[n] = '\0';
    return copy;
}

static void already_normal_is_not_copied(void) {
    const char *res;
    const char *in = "/v1/items/5";
    T_EQ_S(norm(in, &res), "/v1/items/5");
    T_CHECK(res == in);
    in = "/login?next=/x/../y";
    T_EQ_S(norm(in, &res), "/login");
    T_CHECK(res == in);
    in = "/a/b/";
    T_EQ_S(norm(in, &res), "/a/b/");
    T_CHECK(res == in);
    in = "/";
    T_EQ_S(norm(in, &res), "/");
}

static void rewritten_forms(void) {
    const char *res;
    T_EQ_S(norm("//login", &res), "/login");
    T_EQ_S(norm("/./login", &res), "/login");
    T_EQ_S(norm("/x/../login", &res), "/login");
    T_EQ_S(norm("/%6Cogin", &res), "/login");
    T_EQ_S(norm("/a/%2f", &res), "/a/%2F"); /* a reserved escape stays one, upper-cased */
    T_EQ_S(norm("/a/.", &res), "/a/");
    T_EQ_S(norm("/..", &res), "/");
    T_EQ_S(norm("/../../etc", &res), "/etc");
    T_EQ_S(norm("/.well-known/x", &res), "/.well-known/x");
    T_EQ_S(norm("/a//b/./c/%2E%2E/d?q", &res), "/a/b/d");
}

static void not_a_path(void) {
    const char *res;
    const char *in = "login";
    T_EQ_S(norm(in, &res), "login");
    T_CHECK(res == in);
    T_EQ_U(sl_path_norm(NULL, 0, NULL, &res), 0);
}

int main(void) {
    T_RUN(already_normal_is_not_copied);
    T_RUN(rewritten_forms);
    T_RUN(not_a_path);
    return T_DONE();
}
