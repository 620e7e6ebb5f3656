/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_audit.c -- the audit trail: each change is one JSON line in the file with time,
 * source, caller name, checksum, what changed and the outcome; the ring returns the recent
 * entries newest first and forgets the oldest; a rotated file is created again; a file
 * that cannot be written is reported and the entry still reaches the ring; long lists are
 * cut with a count; concurrent recorders never interleave lines; SHA-256 matches the
 * FIPS 180-2 test vectors and sha256sum(1).
 */
#include "t.h"

#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/audit.h"

static int64_t fake_wall(void *ud) {
    return *(int64_t *)ud;
}

static char dir[] = "/tmp/sluice_test_audit_XXXXXX";

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (f == NULL) return strdup("");
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    size_t got = fread(b, 1, (size_t)n, f);
    b[got] = 0;
    fclose(f);
    return b;
}

/* The file's lines as a JSON array of objects (each line must parse on its own). */
static json_t *lines(const char *path) {
    char *s = slurp(path);
    json_t *arr = json_array();
    for (char *p = s, *e; *p; p = e + 1) {
        e = strchr(p, '\n');
        if (!e) {
            T_FAIL("unterminated line");
            break;
        }
        json_error_t err;
        json_t *j = json_loadb(p, (size_t)(e - p), 0, &err);
        if (!j) T_FAIL("not JSON (%s): %.*s", err.text, (int)(e - p), p);
        else json_array_append_new(arr, j);
    }
    free(s);
    return arr;
}

static const char *str(json_t *o, const char *k) {
    return json_string_value(json_object_get(o, k));
}

static void test_sha256(void) {
    char h[65];
    /* FIPS 180-2 appendix B test vectors */
    T_EQ_I(sl_audit_sha256_hex("abc", 3, h), 0);
    T_EQ_S(h, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    T_EQ_I(sl_audit_sha256_hex("", 0, h), 0);
    T_EQ_S(h, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    const char *m = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    T_EQ_I(sl_audit_sha256_hex(m, strlen(m), h), 0);
    T_EQ_S(h, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    /* a file, against sha256sum(1) */
    char path[128];
    snprintf(path, sizeof(path), "%s/cfg.yaml", dir);
    FILE *f = fopen(path, "wb");
    for (int i = 0; i < 5000; i++) fprintf(f, "policies: # line %d\n", i);
    fclose(f);
    T_EQ_I(sl_audit_sha256_file(path, h), 0);
    char cmd[256], want[80] = "";
    snprintf(cmd, sizeof(cmd), "sha256sum %s", path);
    FILE *pf = popen(cmd, "r");
    if (pf) {
        if (fscanf(pf, "%64s", want) != 1) want[0] = 0;
        pclose(pf);
    }
    T_EQ_S(h, want);
    T_EQ_I(sl_audit_sha256_file("/nonexistent/x.yaml", h), -1);
    T_EQ_I(errno, ENOENT);
    unlink(path);
}

static void test_entries_in_file_and_ring(void) {
    char path[128];
    snprintf(path, sizeof(path), "%s/audit.jsonl", dir);
    int64_t now = INT64_C(1700000000) * 1000000000;
    sl_audit_config c = {path, 3, fake_wall, &now};
    sl_audit *a = NULL;
    T_EQ_I(sl_audit_create(&a, &c), 0);
    if (!a) return;

    sl_audit_event e;
    memset(&e, 0, sizeof(e));
    e.source = SL_AUDIT_STARTUP;
    e.path = "/etc/sluice/sluice.yaml";
    sl_audit_sha256_hex("v1", 2, e.sha256);
    e.generation = 1;
    const char *start_added[] = {"api-by-key", "login-by-ip"};
    e.added = start_added, e.nadded = 2;
    e.ok = 1;
    T_EQ_I(sl_audit_record(a, &e), 0);

    now += 60 * INT64_C(1000000000);
    memset(&e, 0, sizeof(e));
    e.source = SL_AUDIT_ADMIN_API;
    e.caller = "deploy-bot";
    e.path = "/etc/sluice/sluice.yaml";
    sl_audit_sha256_hex("v2", 2, e.sha256);
    e.generation = 2;
    const char *added[] = {"search-in-flight"}, *removed[] = {"login-by-ip"};
    sl_audit_change ch[] = {{"api-by-key", "limits: 10/s burst 20 -> 20/s burst 40; mode: shadow -> enforce"}};
    e.added = added, e.nadded = 1, e.removed = removed, e.nremoved = 1, e.changed = ch, e.nchanged = 1;
    e.ok = 1;
    T_EQ_I(sl_audit_record(a, &e), 0);

    now += 60 * INT64_C(1000000000);
    memset(&e, 0, sizeof(e));
    e.source = SL_AUDIT_SIGHUP;
    e.path = "/etc/sluice/sluice.yaml";
    sl_audit_sha256_hex("v3", 2, e.sha256);
    e.ok = 0;
    e.error = "sluice.yaml:12:5: unknown algorithm \"gcra2\"\n(old config kept)";
    T_EQ_I(sl_audit_record(a, &e), 0);

    e.source = SL_AUDIT_FILE_CHANGE;
    e.error = "second refusal";
    T_EQ_I(sl_audit_record(a, &e), 0);
    T_EQ_U(sl_audit_total(a), 4);

    json_t *arr = lines(path);
    T_EQ_U(json_array_size(arr), 4);
    json_t *l0 = json_array_get(arr, 0), *l1 = json_array_get(arr, 1), *l2 = json_array_get(arr, 2),
           *l3 = json_array_get(arr, 3);
    if (l0 && l1 && l2 && l3) {
        T_EQ_S(str(l0, "ts"), "2023-11-14T22:13:20.000000Z");
        T_EQ_S(str(l0, "source"), "startup");
        T_CHECK(json_is_null(json_object_get(l0, "caller")));
        T_EQ_S(str(l0, "outcome"), "ok");
        T_EQ_I(json_integer_value(json_object_get(l0, "generation")), 1);
        T_EQ_U(json_array_size(json_object_get(l0, "added")), 2);
        T_EQ_S(json_string_value(json_array_get(json_object_get(l0, "added"), 1)), "login-by-ip");
        char h[65];
        sl_audit_sha256_hex("v1", 2, h);
        T_EQ_S(str(l0, "sha256"), h);

        T_EQ_S(str(l1, "ts"), "2023-11-14T22:14:20.000000Z");
        T_EQ_S(str(l1, "source"), "admin-api");
        T_EQ_S(str(l1, "caller"), "deploy-bot");
        T_EQ_S(json_string_value(json_array_get(json_object_get(l1, "removed"), 0)), "login-by-ip");
        json_t *c0 = json_array_get(json_object_get(l1, "changed"), 0);
        T_EQ_S(str(c0, "policy"), "api-by-key");
        T_EQ_S(str(c0, "how"), "limits: 10/s burst 20 -> 20/s burst 40; mode: shadow -> enforce");

        T_EQ_S(str(l2, "source"), "sighup");
        T_EQ_S(str(l2, "outcome"), "refused");
        T_EQ_S(str(l2, "error"), "sluice.yaml:12:5: unknown algorithm \"gcra2\"\n(old config kept)");
        T_CHECK(json_object_get(l2, "generation") == NULL);
        T_EQ_S(str(l3, "source"), "file-change");
    }
    json_decref(arr);

    /* the ring: 3 kept, newest first; max limits further */
    size_t len;
    char *r = sl_audit_render(a, 100, &len);
    json_t *j = r ? json_loadb(r, len, 0, NULL) : NULL;
    T_CHECK(j != NULL);
    if (j) {
        T_EQ_I(json_integer_value(json_object_get(j, "total")), 4);
        json_t *en = json_object_get(j, "entries");
        T_EQ_U(json_array_size(en), 3);
        T_EQ_S(str(json_array_get(en, 0), "error"), "second refusal");
        T_EQ_S(str(json_array_get(en, 2), "caller"), "deploy-bot");
    }
    json_decref(j);
    free(r);
    r = sl_audit_render(a, 1, &len);
    j = r ? json_loadb(r, len, 0, NULL) : NULL;
    T_CHECK(j && json_array_size(json_object_get(j, "entries")) == 1);
    json_decref(j);
    free(r);
    sl_audit_destroy(a);
    unlink(path);
}

/* logrotate moves the file away: the next entry creates it again. */
static void test_rotated_file_created_again(void) {
    char path[128], moved[140];
    snprintf(path, sizeof(path), "%s/rot.jsonl", dir);
    snprintf(moved, sizeof(moved), "%s.1", path);
    sl_audit_config c = {path, 8, NULL, NULL};
    sl_audit *a = NULL;
    T_EQ_I(sl_audit_create(&a, &c), 0);
    if (!a) return;
    sl_audit_event e;
    memset(&e, 0, sizeof(e));
    e.ok = 1;
    e.source = SL_AUDIT_SIGHUP;
    T_EQ_I(sl_audit_record(a, &e), 0);
    T_EQ_I(rename(path, moved), 0);
    e.source = SL_AUDIT_ADMIN_API;
    T_EQ_I(sl_audit_record(a, &e), 0);
    json_t *old = lines(moved), *cur = lines(path);
    T_EQ_U(json_array_size(old), 1);
    T_EQ_U(json_array_size(cur), 1);
    T_EQ_S(str(json_array_get(cur, 0), "source"), "admin-api");
    struct stat st;
    mode_t um = umask(0);
    umask(um);
    T_CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == (0640 & ~um));
    json_decref(old);
    json_decref(cur);
    sl_audit_destroy(a);
    unlink(path);
    unlink(moved);
}

static void test_unwritable_file_reported(void) {
    char path[160];
    snprintf(path, sizeof(path), "%s/no/such/dir/audit.jsonl", dir);
    sl_audit_config c = {path, 8, NULL, NULL};
    sl_audit *a = NULL;
    T_EQ_I(sl_audit_create(&a, &c), 0);
    if (!a) return;
    sl_audit_event e;
    memset(&e, 0, sizeof(e));
    e.ok = 1;
    T_EQ_I(sl_audit_record(a, &e), -ENOENT);
    T_EQ_U(sl_audit_write_errors(a), 1);
    size_t len;
    char *r = sl_audit_render(a, 10, &len);
    json_t *j = r ? json_loadb(r, len, 0, NULL) : NULL;
    json_t *e0 = j ? json_array_get(json_object_get(j, "entries"), 0) : NULL;
    T_CHECK(e0 && json_is_false(json_object_get(e0, "persisted")));
    json_decref(j);
    free(r);
    sl_audit_destroy(a);
}

/* Memory only (no path); long lists and texts are cut with a count; bad UTF-8 repaired. */
static void test_limits_and_escaping(void) {
    sl_audit_config c = {NULL, 4, NULL, NULL};
    sl_audit *a = NULL;
    T_EQ_I(sl_audit_create(&a, &c), 0);
    if (!a) return;
    enum { N = 300 };
    static char names[N][16];
    const char *ptrs[N];
    for (int i = 0; i < N; i++) {
        snprintf(names[i], sizeof(names[i]), "p%d", i);
        ptrs[i] = names[i];
    }
    char long_err[2000];
    memset(long_err, 'e', sizeof(long_err) - 1);
    long_err[sizeof(long_err) - 1] = 0;
    sl_audit_event e;
    memset(&e, 0, sizeof(e));
    e.added = ptrs, e.nadded = N;
    e.caller = "ops \xFF\xFE team";
    e.ok = 0;
    e.error = long_err;
    T_EQ_I(sl_audit_record(a, &e), 0);
    size_t len;
    char *r = sl_audit_render(a, 10, &len);
    json_t *j = r ? json_loadb(r, len, 0, NULL) : NULL;
    json_t *e0 = j ? json_array_get(json_object_get(j, "entries"), 0) : NULL;
    T_CHECK(e0 != NULL);
    if (e0) {
        T_EQ_U(json_array_size(json_object_get(e0, "added")), 256);
        T_EQ_I(json_integer_value(json_object_get(e0, "added_omitted")), N - 256);
        T_EQ_S(str(e0, "caller"), "ops \xEF\xBF\xBD\xEF\xBF\xBD team");
        const char *er = str(e0, "error");
        T_CHECK(er && strlen(er) == 512 + 3 && strcmp(er + 512, "...") == 0);
    }
    json_decref(j);
    free(r);
    T_EQ_I(sl_audit_record(a, NULL), -EINVAL);
    sl_audit_destroy(a);
    sl_audit *b = NULL;
    sl_audit_config bad = {NULL, 5000, NULL, NULL};
    T_EQ_I(sl_audit_create(&b, &bad), -EINVAL);
}

static sl_audit *shared;

static void *recorder(void *arg) {
    const char *who = arg;
    const char *added[] = {"a", "b", "c"};
    for (int i = 0; i < 50; i++) {
        sl_audit_event e;
        memset(&e, 0, sizeof(e));
        e.source = SL_AUDIT_ADMIN_API;
        e.caller = who;
        e.added = added, e.nadded = 3;
        e.ok = 1;
        e.generation = (uint64_t)i;
        sl_audit_record(shared, &e);
    }
    return NULL;
}

static void test_concurrent_recorders(void) {
    char path[128];
    snprintf(path, sizeof(path), "%s/conc.jsonl", dir);
    sl_audit_config c = {path, 16, NULL, NULL};
    T_EQ_I(sl_audit_create(&shared, &c), 0);
    if (!shared) return;
    pthread_t t[2];
    pthread_create(&t[0], NULL, recorder, "alice");
    pthread_create(&t[1], NULL, recorder, "bob");
    pthread_join(t[0], NULL);
    pthread_join(t[1], NULL);
    json_t *arr = lines(path);
    T_EQ_U(json_array_size(arr), 100);
    json_decref(arr);
    T_EQ_U(sl_audit_total(shared), 100);
    sl_audit_destroy(shared);
    unlink(path);
}

int main(void) {
    if (mkdtemp(dir) == NULL) return 1;
    T_RUN(test_sha256);
    T_RUN(test_entries_in_file_and_ring);
    T_RUN(test_rotated_file_created_again);
    T_RUN(test_unwritable_file_reported);
    T_RUN(test_limits_and_escaping);
    T_RUN(test_concurrent_recorders);
    rmdir(dir);
    return T_DONE();
}
