/* test_cli_compare.c - `omni generate --compare MODE`: on a text fixture, the two answers printed are exactly what
 * `omni generate` prints with each format alone (A streamed first, then B); one "compare:" line on stderr reports
 * both KV sizes (int2 smaller than bf16 with no window), the common prefix of the two answers, and the mean KL and
 * top-1 agreement of B teacher-forced on A (bf16 against bf16: KL 0, 100%, identical throughout); an unknown mode
 * is refused with one line and exit 1. */
#define _DEFAULT_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cli_util.h"

#define MODEL OMNI_FIXTURES "/text/qvl-h64-hd128-gqa2-tied"
#define OPTS "-p 'Tell me a story about a fox' -n 16 --temp 0 --kv-window 0 --no-perf"

typedef struct {
    double a_mib, b_mib, ratio, kl, agree;
    int same, na, nb, positions, ok;
} cmp_line;

static cmp_line parse(const char *err) {
    cmp_line c;
    memset(&c, 0, sizeof c);
    const char *l = strstr(err, "compare: KV A ");
    CHECK(l != NULL, "no compare line in: %s", err);
    if (!l) return c;
    char fa[32], fb[32];
    c.ok = sscanf(l, "compare: KV A %31s %lf MiB, B %31s %lf MiB (%lfx); tokens identical up to %d (A %d, B %d); "
                  "B teacher-forced on A: mean KL %lf, top-1 agreement %lf%% over %d positions", fa, &c.a_mib, fb,
                  &c.b_mib, &c.ratio, &c.same, &c.na, &c.nb, &c.kl, &c.agree, &c.positions) == 11;
    CHECK(c.ok, "compare line does not parse: %s", l);
    return c;
}

static char *alone(const char *mode) {
    cli_result r = cli_run("generate -m %s --kv %s " OPTS, MODEL, mode);
    CHECK(r.code == 0, "%s alone: exit %d %s", mode, r.code, r.err);
    free(r.err);
    return r.out;
}

int main(void) {
    char *a = alone("bf16"), *b = alone("int2"), want[8192];
    snprintf(want, sizeof want, "%s%s", a, b);
    cli_result r = cli_run("generate -m %s --kv bf16 --compare int2 " OPTS, MODEL);
    CHECK(r.code == 0 && !strcmp(r.out, want), "compare printed '%s', want '%s' (exit %d, %s)", r.out, want, r.code,
          r.err);
    CHECK(strstr(r.err, "==> A: bf16 <==") && strstr(r.err, "==> B: int2 <=="), "headers: %s", r.err);
    cmp_line c = parse(r.err);
    CHECK(c.ok && c.b_mib < c.a_mib && c.kl > 0 && c.agree >= 0 && c.agree <= 100 && c.positions == 16 && c.na == 16 &&
              c.nb == 16 && c.same >= 0 && c.same <= 16,
          "int2: %s", r.err);
    cli_free(&r);
    r = cli_run("generate -m %s --kv bf16 --compare bf16 " OPTS, MODEL);
    c = parse(r.err);
    CHECK(r.code == 0 && c.ok && c.kl == 0 && c.agree == 100 && c.same == 16 && c.a_mib == c.b_mib,
          "bf16 vs bf16 must agree exactly: %s", r.err);
    cli_free(&r);
    r = cli_run("generate -m %s --compare int3 " OPTS, MODEL);
    CHECK(r.code == 1 && cli_lines(r.err) == 1 && strstr(r.err, "int3"), "bad mode: %d %s", r.code, r.err);
    cli_free(&r);
    free(a);
    free(b);
    return check_exit();
}
