/* fuzz_model_path.c - the -m argument's resolution (app/model_path.c) over Hugging Face cache layouts built from
 * the input: hub/models--Org--Name/ with refs/main (a file with any content, a directory or a FIFO, or absent)
 * and snapshots/ with directories named by the input (one with a config.json or not), looked up as "Org/Name"
 * through $HF_HUB_CACHE, as the models--Org--Name path itself, or as an arbitrary -m value.
 * Input: byte 0 = flags (bit 0 refs/main is a file, bit 1 it is a directory, bit 2 a FIFO, bit 3 the first
 * snapshot has a config.json, bit 4 -m is the cache dir's path), then "REFS\n#\nSNAPSHOT NAMES (one a line)\n#\nARG"
 * (ARG, when present, is the -m value). A resolved model is a directory; one found in the cache lies inside its
 * snapshots/ folder (refs/main cannot lead elsewhere), and it is the snapshot refs/main names when that exists.
 * The layout is rebuilt only when its part of the input (flags, REFS, NAMES) differs from the previous input's: the
 * file system work dominates, and mutations of ARG alone need none. */
#include "fuzz_util.h"

#include <limits.h>
#include <sys/stat.h>

#include "app/model_path.h"

/* The next part of [*d, end) up to "\n#\n" (or the end). */
static const uint8_t *part(const uint8_t **d, const uint8_t *end, size_t *len) {
    const uint8_t *s = *d, *p = s;
    while (p + 3 <= end && !(p[0] == '\n' && p[1] == '#' && p[2] == '\n')) p++;
    if (p + 3 > end) p = end;
    *len = (size_t)(p - s);
    *d = p < end ? p + 3 : end;
    return s;
}

static int is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* The layout of the previous input: flags, then REFS "\n#\n" NAMES (malloc'ed). */
static uint8_t *g_layout;
static size_t g_layout_len;

static int same_layout(const uint8_t *d, size_t len) {
    if (g_layout && g_layout_len == len && !memcmp(g_layout, d, len)) return 1;
    free(g_layout);
    g_layout = malloc(len);
    if (!g_layout) abort();
    memcpy(g_layout, d, len);
    g_layout_len = len;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) {
    if (n < 1) return 0;
    omni_log_set_level(0);
    char root[600], hub[700], cache[800], snaps[900], p[2048], first[2100] = "", named[2100] = "";
    snprintf(root, sizeof root, "%s/m", fuzz_dir());
    snprintf(hub, sizeof hub, "%s/hub", root);
    snprintf(cache, sizeof cache, "%s/models--Org--Name", hub);
    snprintf(snaps, sizeof snaps, "%s/snapshots", cache);
    setenv("HF_HUB_CACHE", hub, 1);
    unsetenv("HF_HOME");
    const uint8_t *at = d + 1, *end = d + n;
    size_t rl, sl, al;
    const uint8_t *refs = part(&at, end, &rl), *names = part(&at, end, &sl), *arg = part(&at, end, &al);
    int rebuild = !same_layout(d, (size_t)(names + sl - d));
    if (rebuild) {
        nftw(root, fuzz_rm_one, 16, FTW_DEPTH | FTW_PHYS);
        snprintf(p, sizeof p, "%s/refs", cache);
        if (mkdir(root, 0700) || mkdir(hub, 0700) || mkdir(cache, 0700) || mkdir(p, 0700) || mkdir(snaps, 0700))
            abort();
    }
    snprintf(p, sizeof p, "%s/refs/main", cache);
    if (rebuild && (d[0] & 1)) fuzz_write(cache, "refs/main", refs, rl);
    else if (rebuild && (d[0] & 2)) mkdir(p, 0700);
    else if (rebuild && (d[0] & 4)) mkfifo(p, 0600);
    /* snapshots: up to 6 names, '/' and NUL dropped, 64 bytes at most */
    for (int k = 0; rebuild && k < 6 && sl > 0; k++) {
        char nm[65];
        size_t o = 0, i = 0;
        for (; i < sl && names[i] != '\n'; i++)
            if (names[i] != '/' && names[i] && o < 64) nm[o++] = (char)names[i];
        nm[o] = 0;
        names += i < sl ? i + 1 : i, sl -= i < sl ? i + 1 : i;
        if (!o || !strcmp(nm, ".") || !strcmp(nm, "..")) continue;
        snprintf(p, sizeof p, "%s/%s", snaps, nm);
        if (mkdir(p, 0700)) continue;
        if (!first[0]) {
            snprintf(first, sizeof first, "%s", p);
            if (d[0] & 8) fuzz_write(p, "config.json", (const uint8_t *)"{}", 2);
        }
    }
    /* the snapshot refs/main names (as cache_snapshot reads it: up to the first blank) */
    if ((d[0] & 1) && rl > 0 && rl < 100 && !memchr(refs, 0, rl)) {
        char ref[128];
        snprintf(ref, sizeof ref, "%.*s", (int)rl, (const char *)refs);
        ref[strcspn(ref, "\r\n \t")] = 0;
        snprintf(p, sizeof p, "%s/%s", snaps, ref);
        if (ref[0] && ref[0] != '.' && !strchr(ref, '/') && is_dir(p)) snprintf(named, sizeof named, "%s", p);
    }
    char *a = al ? fuzz_str(arg, al) : strdup(d[0] & 16 ? cache : "Org/Name");
    char out[4096];
    if (omni_resolve_model(a, out, sizeof out) == OMNI_OK) {
        FUZZ_ASSERT(is_dir(out));
        char real_out[PATH_MAX], real_snaps[PATH_MAX];
        int in_cache = !al && strncmp(out, cache, strlen(cache)) == 0; /* "Org/Name" or the cache dir, found */
        if (in_cache && strcmp(out, cache) && realpath(out, real_out) && realpath(snaps, real_snaps)) {
            size_t k = strlen(real_snaps);
            FUZZ_ASSERT(!strncmp(real_out, real_snaps, k) && real_out[k] == '/');
            if (named[0]) FUZZ_ASSERT(!strcmp(out, named));
        }
    } else {
        FUZZ_ASSERT(omni_last_error()[0]);
    }
    free(a);
    return 0;
}
