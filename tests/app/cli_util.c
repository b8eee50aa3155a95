/* cli_util.c - see cli_util.h. */
#define _DEFAULT_SOURCE
#include "cli_util.h"

#include "kernels/status.h"

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

int write_all(const char *path, const void *data, size_t len) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    int ok = fwrite(data, 1, len, f) == len;
    return fclose(f) == 0 && ok ? 0 : -1;
}

static cli_result run_v(const char *prefix, const char *fmt, va_list ap) {
    char args[8192], cmd[9000];
    vsnprintf(args, sizeof args, fmt, ap);
    char outp[64], errp[64];
    snprintf(outp, sizeof outp, "/tmp/omni_cli_%d.out", (int)getpid());
    snprintf(errp, sizeof errp, "/tmp/omni_cli_%d.err", (int)getpid());
    snprintf(cmd, sizeof cmd, "%s %s </dev/null %s >%s 2>%s", prefix, OMNI_BIN, args, outp, errp); /* args may redirect stdin */
    int st = system(cmd);
    cli_result r;
    r.code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    r.out = omni_read_file(outp, NULL);
    r.err = omni_read_file(errp, NULL);
    if (!r.out) r.out = calloc(1, 1);
    if (!r.err) r.err = calloc(1, 1);
    unlink(outp);
    unlink(errp);
    return r;
}

cli_result cli_run(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    cli_result r = run_v("", fmt, ap);
    va_end(ap);
    return r;
}

cli_result cli_run_prefix(const char *prefix, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    cli_result r = run_v(prefix, fmt, ap);
    va_end(ap);
    return r;
}

void cli_free(cli_result *r) {
    free(r->out);
    free(r->err);
}

int cli_lines(const char *s) {
    int n = 0, cur = 0;
    for (; *s; s++) {
        if (*s == '\n') { n += cur > 0; cur = 0; }
        else cur++;
    }
    return n + (cur > 0);
}

char *make_tmpdir(void) {
    char *p = strdup("/tmp/omni_test_XXXXXX");
    return p && mkdtemp(p) ? p : NULL;
}

int copy_dir(const char *src, const char *dst) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s' && cp -r '%s'/. '%s'/", dst, src, dst);
    return system(cmd);
}

int rewrite_header(const char *path, void (*edit)(cJSON *hdr, void *ctx), void *ctx) {
    size_t len;
    unsigned char *b = (unsigned char *)omni_read_file(path, &len);
    if (!b || len < 8) { free(b); return -1; }
    uint64_t n = 0;
    for (int i = 0; i < 8; i++) n |= (uint64_t)b[i] << (8 * i);
    cJSON *h = cJSON_ParseWithLength((const char *)b + 8, (size_t)n);
    if (!h) { free(b); return -1; }
    edit(h, ctx);
    char *js = cJSON_PrintUnformatted(h);
    cJSON_Delete(h);
    size_t hn = strlen(js), dn = len - 8 - (size_t)n;
    unsigned char *o = malloc(8 + hn + dn);
    for (int i = 0; i < 8; i++) o[i] = (unsigned char)((uint64_t)hn >> (8 * i));
    memcpy(o + 8, js, hn);
    memcpy(o + 8 + hn, b + 8 + n, dn);
    int rc = write_all(path, o, 8 + hn + dn);
    free(js);
    free(o);
    free(b);
    return rc;
}

int compare_logits_files(const char *got_path, const char *ref_path, logits_cmp *out) {
    size_t ng = 0, nr = 0;
    float *got = (float *)omni_read_file(got_path, &ng), *ref = (float *)omni_read_file(ref_path, &nr);
    int rc = got && ref && ng == nr && ng >= 4 ? 0 : -1;
    if (!rc) {
        int V = (int)(ng / 4), ag = 0, ar = 0;
        float maxd = 0, maxr = 0;
        for (int i = 0; i < V; i++) {
            maxd = fmaxf(maxd, fabsf(got[i] - ref[i]));
            maxr = fmaxf(maxr, fabsf(ref[i]));
            ag = got[i] > got[ag] ? i : ag;
            ar = ref[i] > ref[ar] ? i : ar;
        }
        *out = (logits_cmp){V, maxd / maxr, ag, ar};
    }
    free(got);
    free(ref);
    return rc;
}
