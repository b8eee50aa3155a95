/* test_cli_fixtures.c - the acceptance of the foundation issue through the real program: for every text fixture
 * case, `omni logits` matches transformers (max|d|/max|ref| <= 1e-3, same argmax, same top-5 set),
 * `omni generate --temp 0 -n 16` prints transformers' greedy text, and `omni tokenize` prints the reference ids. */
#define _DEFAULT_SOURCE
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "cli_util.h"

static char g_tmp[4096];

/* Single-quote `s` for /bin/sh into buf. */
static const char *shq(const char *s, char *buf, size_t cap) {
    size_t o = 0;
    buf[o++] = '\'';
    for (; *s && o + 5 < cap; s++) {
        if (*s == '\'') { memcpy(buf + o, "'\\''", 4); o += 4; }
        else buf[o++] = *s;
    }
    buf[o++] = '\'';
    buf[o] = 0;
    return buf;
}

static void check_logits(const char *name, const char *out_path, const char *ref_path, const cJSON *c, int V) {
    size_t ng = 0, nr = 0;
    float *got = (float *)omni_read_file(out_path, &ng), *ref = (float *)omni_read_file(ref_path, &nr);
    CHECK(got && ref && ng == (size_t)V * 4 && nr == ng, "%s: logits file sizes %zu / %zu", name, ng, nr);
    if (got && ref && ng == nr && ng == (size_t)V * 4) {
        float maxd = 0, maxr = 0;
        int am = 0;
        for (int i = 0; i < V; i++) {
            maxd = fmaxf(maxd, fabsf(got[i] - ref[i]));
            maxr = fmaxf(maxr, fabsf(ref[i]));
            if (got[i] > got[am]) am = i;
        }
        CHECK(maxd / maxr <= 1e-3f, "%s: max|d|/max|ref| = %.3g", name, maxd / maxr);
        CHECK(am == (int)cJSON_GetObjectItem(c, "argmax")->valuedouble, "%s: argmax %d", name, am);
        const cJSON *e;
        int in_top = 0;
        cJSON_ArrayForEach(e, cJSON_GetObjectItem(c, "top5")) { /* each ref top-5 id beats all but <5 others */
            int id = (int)cJSON_GetArrayItem(e, 0)->valuedouble, above = 0;
            for (int i = 0; i < V; i++) above += got[i] > got[id] || (got[i] == got[id] && i < id);
            in_top += above < 5;
        }
        CHECK(in_top == 5, "%s: top-5 sets differ", name);
    }
    free(got);
    free(ref);
}

static void run_case(const char *dir, const cJSON *c, int V) {
    const char *name = cJSON_GetStringValue(cJSON_GetObjectItem(c, "name"));
    const char *prompt = cJSON_GetStringValue(cJSON_GetObjectItem(c, "prompt"));
    const char *system = cJSON_GetStringValue(cJSON_GetObjectItem(c, "system"));
    int raw = cJSON_IsTrue(cJSON_GetObjectItem(c, "raw"));
    char pf[4200], of[4200], opts[16384] = "", q[4096];
    snprintf(pf, sizeof pf, "%s/prompt.txt", g_tmp);
    snprintf(of, sizeof of, "%s/logits.f32", g_tmp);
    write_all(pf, prompt, strlen(prompt));
    snprintf(opts, sizeof opts, "-m %s -f %s%s", dir, pf, raw ? " --raw" : "");
    if (system) {
        strcat(opts, " --system ");
        strcat(opts, shq(system, q, sizeof q));
    }
    cli_result r = cli_run("logits %s -o %s --no-perf", opts, of);
    CHECK(r.code == 0, "%s: omni logits exit %d: %s", name, r.code, r.err);
    char ref[4400];
    snprintf(ref, sizeof ref, "%s/%s", dir, cJSON_GetStringValue(cJSON_GetObjectItem(c, "logits_file")));
    if (r.code == 0) check_logits(name, of, ref, c, V);
    cli_free(&r);
    r = cli_run("generate %s --temp 0 -n 16 --no-perf", opts);
    const char *want = cJSON_GetStringValue(cJSON_GetObjectItem(c, "generated_text_skip_special"));
    size_t wl = strlen(want);
    CHECK(r.code == 0 && !strncmp(r.out, want, wl) && !strcmp(r.out + wl, "\n"),
          "%s: omni generate printed '%s', want '%s' (exit %d)", name, r.out, want, r.code);
    cli_free(&r);
}

static void run_tokenize(const char *dir, const cJSON *c) {
    const char *text = cJSON_GetStringValue(cJSON_GetObjectItem(c, "text"));
    char pf[4200], buf[65536] = "";
    snprintf(pf, sizeof pf, "%s/text.txt", g_tmp);
    write_all(pf, text, strlen(text));
    cli_result r = cli_run("tokenize -m %s -f %s", dir, pf);
    const cJSON *e;
    size_t o = 0;
    cJSON_ArrayForEach(e, cJSON_GetObjectItem(c, "input_ids"))
        o += snprintf(buf + o, sizeof buf - o, o ? " %d" : "%d", (int)e->valuedouble);
    strcat(buf, "\n");
    CHECK(r.code == 0 && !strcmp(r.out, buf), "tokenize %s: got '%s' want '%s'", dir, r.out, buf);
    cli_free(&r);
}

int main(void) {
    char *t = make_tmpdir();
    snprintf(g_tmp, sizeof g_tmp, "%s", t);
    free(t);
    DIR *d = opendir(OMNI_FIXTURES "/text");
    struct dirent *de;
    int models = 0;
    while (d && (de = readdir(d))) {
        char dir[4096], path[4200];
        snprintf(dir, sizeof dir, "%s/text/%s", OMNI_FIXTURES, de->d_name);
        snprintf(path, sizeof path, "%s/expected.json", dir);
        char *txt = de->d_name[0] != '.' ? omni_read_file(path, NULL) : NULL;
        if (!txt) continue;
        cJSON *exp = cJSON_Parse(txt);
        free(txt);
        int V = (int)cJSON_GetObjectItem(cJSON_GetObjectItem(exp, "summary"), "vocab_size")->valuedouble;
        const cJSON *c;
        cJSON_ArrayForEach(c, cJSON_GetObjectItem(exp, "cases")) run_case(dir, c, V);
        run_tokenize(dir, cJSON_GetArrayItem(cJSON_GetObjectItem(exp, "cases"), 0));
        cJSON_Delete(exp);
        models++;
    }
    if (d) closedir(d);
    CHECK(models >= 4, "only %d fixture models", models);
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_tmp);
    if (system(cmd)) {}
    return check_exit();
}
