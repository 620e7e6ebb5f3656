/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_redact.c -- sl_redact: every way a credential is written in a URL or a parameter
 * comes out as SL_REDACTED, and nothing else in the text changes.
 */
#include "core/redact.h"
#include "t.h"

static void check(const char *in, const char *want) {
    char buf[512];
    snprintf(buf, sizeof(buf), "%s", in);
    sl_redact(buf, sizeof(buf));
    T_EQ_S(buf, want);
}

static void urls_and_parameters(void) {
    check("bad redis address 'redis://app:PW@127.0.0.1:6379x' (expected host:port)",
          "bad redis address 'redis://app:***@127.0.0.1:6379x' (expected host:port)");
    check("redis://:PW@h:1 rediss://PW@h redis+unix://u:p@/tmp/s", "redis://:***@h:1 rediss://***@h redis+unix://u:***@/tmp/s");
    check("a p/w with @ and /: redis://u:p@ss/w@rd@h:1/0", "a p/w with @ and /: redis://u:***@h:1/0");
    check("seeds=app:PW@h:26379 x", "seeds=app:***@h:26379 x");
    check("redis://h:1/0?db=1&password=PW&timeout_ms=5 ?token=T", "redis://h:1/0?db=1&password=***&timeout_ms=5 ?token=***");
    check("{\"msg\":\"redis://u:PW@h\"}", "{\"msg\":\"redis://u:***@h\"}");
    /* nothing to redact */
    check("mail bob@example.com at 127.0.0.1:6379 redis://h:1", "mail bob@example.com at 127.0.0.1:6379 redis://h:1");
    check("", "");
    /* growth within a small buffer: cut, never past it */
    char small[16] = "redis://u:p@h";
    sl_redact(small, sizeof(small));
    T_EQ_S(small, "redis://u:***@h");
    char tiny[14] = "redis://u:p@h";
    sl_redact(tiny, sizeof(tiny));
    T_CHECK(strstr(tiny, "p@") == NULL && strlen(tiny) < sizeof(tiny));
}

/* A copy cut before the userinfo's '@' still hides the password. */
static void cut_copies(void) {
    char out[24];
    sl_redact_copy("redis://app:AVERYLONGPASSWORD@127.0.0.1:6379", out, sizeof(out));
    T_CHECK(strstr(out, "AVERY") == NULL);
    T_EQ_S(out, "redis://app:***");
    sl_redact_copy("redis://127.0.0.1:6379/0?x=1 and more", out, sizeof(out));
    T_EQ_S(out, "redis://127.0.0.1:6379/");
}

int main(void) {
    T_RUN(urls_and_parameters);
    T_RUN(cut_copies);
    return T_DONE();
}
