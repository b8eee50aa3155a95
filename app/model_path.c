/* model_path.c - -m argument resolution (see model_path.h). */
#define _DEFAULT_SOURCE
#include "app/model_path.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static int has_config(const char *dir) {
    char p[4096];
    struct stat st;
    snprintf(p, sizeof p, "%s/config.json", dir);
    return stat(p, &st) == 0;
}

/* Snapshot directory of a models--Org--Name cache dir. */
static omni_status cache_snapshot(const char *cache_dir, char *out, size_t cap) {
    char p[4096], ref[128] = {0};
    snprintf(p, sizeof p, "%s/refs/main", cache_dir);
    omni_read_params rp = omni_read_default_params();
    rp.max_bytes = 4096;
    rp.regular_only = 1; /* refs/main as a FIFO must not hang the lookup */
    rp.reject_nul = 1;
    char *txt = NULL;
    if (omni_read_file_ex(p, &rp, OMNI_ERR_MODEL, &txt, NULL) == OMNI_OK) {
        snprintf(ref, sizeof ref, "%s", txt);
        ref[strcspn(ref, "\r\n \t")] = 0;
        free(txt);
    }
    if (ref[0] && strlen(cache_dir) + strlen(ref) + 12 < cap) {
        snprintf(out, cap, "%s/snapshots/%s", cache_dir, ref);
        if (is_dir(out)) return OMNI_OK;
    }
    snprintf(p, sizeof p, "%s/snapshots", cache_dir);
    DIR *d = opendir(p);
    if (!d) return omni_fail(OMNI_ERR_MODEL, "%s: no snapshots/ folder (incomplete download?)", cache_dir);
    time_t best = 0;
    struct dirent *de;
    out[0] = 0;
    while ((de = readdir(d))) { /* newest snapshot if refs/main is missing */
        if (de->d_name[0] == '.') continue;
        char s[4096 + 256];
        struct stat st;
        snprintf(s, sizeof s, "%s/%s", p, de->d_name);
        if (stat(s, &st) == 0 && S_ISDIR(st.st_mode) && st.st_mtime >= best) {
            best = st.st_mtime;
            snprintf(out, cap, "%s", s);
        }
    }
    closedir(d);
    if (!out[0]) return omni_fail(OMNI_ERR_MODEL, "%s: no snapshot found", cache_dir);
    return OMNI_OK;
}

static int try_hub(const char *hub, const char *org_name, char *out, size_t cap) {
    if (!hub || !hub[0]) return 0;
    char name[1024], p[4096];
    snprintf(name, sizeof name, "models--%s", org_name);
    for (char *c = name + 8; *c; c++)
        if (*c == '/') { /* Org/Name -> Org--Name */
            memmove(c + 2, c + 1, strlen(c + 1) + 1);
            c[0] = c[1] = '-';
            break;
        }
    snprintf(p, sizeof p, "%s/%s", hub, name);
    if (!is_dir(p)) return 0;
    return cache_snapshot(p, out, cap) == OMNI_OK;
}

omni_status omni_embedded_model(const char *name, char *out, size_t cap) {
    const char *env = getenv("OMNI_MODELS");
    if (env && env[0]) {
        snprintf(out, cap, "%s/%s", env, name);
        if (has_config(out)) return OMNI_OK;
        return omni_fail(OMNI_ERR_MODEL, "embedded model not found: $OMNI_MODELS/%s (%s) has no config.json", name,
                         out);
    }
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = 0;
        char *slash = strrchr(exe, '/');
        if (slash) *slash = 0;
        const char *rel[] = {"/../assets/models/", "/assets/models/"};
        for (int i = 0; i < 2; i++) {
            snprintf(out, cap, "%s%s%s", exe, rel[i], name);
            if (has_config(out)) return OMNI_OK;
        }
    }
#ifdef OMNI_SOURCE_DIR
    snprintf(out, cap, "%s/assets/models/%s", OMNI_SOURCE_DIR, name);
    if (has_config(out)) return OMNI_OK;
#endif
    return omni_fail(OMNI_ERR_MODEL,
                     "no -m given and the embedded model assets/models/%s was not found beside the program or in "
                     "its source tree (set OMNI_MODELS=DIR or pass -m MODEL)", name);
}

omni_status omni_resolve_model(const char *arg, char *out, size_t cap) {
    if (!arg || !arg[0]) return omni_fail(OMNI_ERR_USAGE, "no model given (-m DIR or -m Org/Name)");
    if (is_dir(arg)) {
        const char *base = strrchr(arg, '/');
        base = base ? base + 1 : arg;
        if (!has_config(arg) && !strncmp(base, "models--", 8)) return cache_snapshot(arg, out, cap);
        snprintf(out, cap, "%s", arg);
        return OMNI_OK;
    }
    const char *slash = strchr(arg, '/');
    if (slash && slash != arg && !strchr(slash + 1, '/') && arg[0] != '.') {
        char buf[4096];
        const char *home = getenv("HOME"), *hf_home = getenv("HF_HOME");
        if (try_hub(getenv("HF_HUB_CACHE"), arg, out, cap)) return OMNI_OK;
        if (hf_home) {
            snprintf(buf, sizeof buf, "%s/hub", hf_home);
            if (try_hub(buf, arg, out, cap)) return OMNI_OK;
        }
        if (home) {
            snprintf(buf, sizeof buf, "%s/.cache/huggingface/hub", home);
            if (try_hub(buf, arg, out, cap)) return OMNI_OK;
        }
        return omni_fail(OMNI_ERR_MODEL,
                         "model '%s' not found: not a directory and not in the Hugging Face cache "
                         "($HF_HUB_CACHE, $HF_HOME/hub, ~/.cache/huggingface/hub); get it with `hf download %s`",
                         arg, arg);
    }
    struct stat st;
    if (stat(arg, &st) == 0)
        return omni_fail(OMNI_ERR_MODEL, "-m %s: not a directory (give the model's folder, the one with config.json)",
                         arg);
    return omni_fail(OMNI_ERR_MODEL, "model directory not found: %s", arg);
}
