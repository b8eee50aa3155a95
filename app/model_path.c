/* model_path.c - -m argument resolution (see model_path.h). Every failure is one OMNI_ERR_MODEL message that says
 * what was looked at and what to do next (the `hf download` command, the snapshot to pass). */
#define _DEFAULT_SOURCE
#include "app/model_path.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kernels/json.h"

#define MP_PATH 4096 /* the longest path handled (Linux PATH_MAX) */

static int is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static int has_config(const char *dir) {
    char p[MP_PATH + 16];
    struct stat st;
    snprintf(p, sizeof p, "%s/config.json", dir);
    return stat(p, &st) == 0;
}

/* DIR/NAME into buf; 0 when it does not fit. */
static int join(char *buf, size_t cap, const char *dir, const char *name) {
    int n = snprintf(buf, cap, "%s/%s", dir, name);
    return n > 0 && (size_t)n < cap;
}

/* A path as messages show it: whole up to 160 bytes, else its start and end around "...". */
static const char *shown(const char *p, char *buf, size_t cap) {
    size_t n = strlen(p);
    if (n <= 160) return p;
    snprintf(buf, cap, "%.60s...%s", p, p + n - 60);
    return buf;
}

static omni_status too_long(const char *p) {
    char sb[200];
    return omni_fail(OMNI_ERR_MODEL, "model path too long: %s", shown(p, sb, sizeof sb));
}

/* Up to `cap` bytes of the entry names of DIR (directories only when dirs_only), comma-separated; the count. */
static int list_names(const char *dir, int dirs_only, char *buf, size_t cap) {
    buf[0] = 0;
    DIR *d = opendir(dir);
    if (!d) return 0;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        char p[MP_PATH + 256];
        if (de->d_name[0] == '.' || !join(p, sizeof p, dir, de->d_name)) continue;
        if (dirs_only && !is_dir(p)) continue;
        size_t used = strlen(buf);
        if (used + strlen(de->d_name) + 8 < cap) snprintf(buf + used, cap - used, "%s%s", n ? ", " : "", de->d_name);
        else if (used + 5 < cap && !strstr(buf, ", ...")) snprintf(buf + used, cap - used, ", ...");
        n++;
    }
    closedir(d);
    return n;
}

/* Entries of DIR whose name ends in ext. */
static int count_ext(const char *dir, const char *ext) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    int n = 0;
    size_t el = strlen(ext);
    struct dirent *de;
    while ((de = readdir(d))) {
        size_t len = strlen(de->d_name);
        if (len > el && !strcmp(de->d_name + len - el, ext)) n++;
    }
    closedir(d);
    return n;
}

/* The unfinished downloads of a cache folder (blobs/ *.incomplete, what `hf download` leaves when it is stopped). */
static int incomplete_blobs(const char *cache) {
    char p[MP_PATH + 16];
    return cache && join(p, sizeof p, cache, "blobs") ? count_ext(p, ".incomplete") : 0;
}

/* GGUF (llama.cpp's format) is what people often have at hand. */
static omni_status gguf_error(const char *p) {
    char sb[200];
    return omni_fail(OMNI_ERR_UNSUPPORTED, "%s: GGUF is not supported: omni runs Hugging Face checkpoints as they are "
                     "published (config.json, *.safetensors, tokenizer.json), e.g. `hf download "
                     "Qwen/Qwen3-VL-2B-Instruct`", shown(p, sb, sizeof sb));
}

/* What the messages about a cache download suggest: `hf download Org/Name [--revision REV]`. */
static void download_hint(const char *repo, const char *rev, char *buf, size_t cap) {
    if (!repo) snprintf(buf, cap, "download it again with `hf download Org/Name`");
    else snprintf(buf, cap, "run `hf download %s%s%s` again", repo, rev ? " --revision " : "", rev ? rev : "");
}

/* A Git LFS pointer in place of a checkpoint or tokenizer file (a `git clone` without git-lfs): small regular
 * *.safetensors / *.json files of DIR that start like one. */
static omni_status check_lfs(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return OMNI_OK;
    omni_status s = OMNI_OK;
    struct dirent *de;
    while (!s && (de = readdir(d))) {
        char p[MP_PATH + 300], head[24] = {0}, sb[200];
        size_t len = strlen(de->d_name);
        struct stat st;
        if (!((len > 12 && !strcmp(de->d_name + len - 12, ".safetensors")) ||
              (len > 5 && !strcmp(de->d_name + len - 5, ".json"))) ||
            !join(p, sizeof p, dir, de->d_name) || stat(p, &st) || !S_ISREG(st.st_mode) || st.st_size > 1024)
            continue;
        FILE *f = fopen(p, "rb");
        if (f && fread(head, 1, sizeof head - 1, f) && !strncmp(head, "version https://git-lfs", 23))
            s = omni_fail(OMNI_ERR_MODEL, "%s is a Git LFS pointer, not the file (the repository was cloned without "
                          "git-lfs): run `git lfs pull` there, or get the model with `hf download Org/Name`",
                          shown(p, sb, sizeof sb));
        if (f) fclose(f);
    }
    closedir(d);
    return s;
}

/* Why a file of DIR is missing: an interrupted `hf download` leaves *.incomplete files in the cache's blobs/ or in
 * a --local-dir's .cache/huggingface/download/. */
static const char *why_missing(const char *dir, const char *cache) {
    char p[MP_PATH + 64];
    if (cache) return incomplete_blobs(cache) ? "an unfinished download: blobs/ has *.incomplete files"
                                              : "a pruned cache or an interrupted download";
    if (join(p, sizeof p, dir, ".cache/huggingface/download") && count_ext(p, ".incomplete"))
        return "an unfinished `hf download --local-dir`: .cache/huggingface/download/ has *.incomplete files";
    return "an incomplete copy or download";
}

/* Every shard model.safetensors.index.json (at `index`) lists is in DIR. */
static omni_status check_shards(const char *dir, const char *index, const char *cache, const char *hint) {
    char sb[200];
    cJSON *idx = NULL;
    omni_status s = omni_json_load(index, OMNI_ERR_MODEL, &idx);
    const cJSON *map = s ? NULL : cJSON_GetObjectItemCaseSensitive(idx, "weight_map"), *it;
    cJSON_ArrayForEach(it, map) {
        char shard[MP_PATH + 300];
        struct stat st;
        if (!cJSON_IsString(it) || strchr(it->valuestring, '/') || !join(shard, sizeof shard, dir, it->valuestring))
            continue; /* the loader names a malformed index */
        if (stat(shard, &st) != 0) {
            s = omni_fail(OMNI_ERR_MODEL, "%s lacks %s, a shard its model.safetensors.index.json lists (%s): %s",
                          shown(dir, sb, sizeof sb), it->valuestring, why_missing(dir, cache), hint);
            break;
        }
    }
    cJSON_Delete(idx);
    return s;
}

/* The files omni reads from a model folder are there: config.json, every shard of model.safetensors.index.json, no
 * link to a missing blob (a pruned cache, an interrupted download), no Git LFS pointer. cache: the models--Org--Name
 * folder DIR is a snapshot of (NULL for a plain folder); repo, rev: for the `hf download` hint. */
static omni_status check_files(const char *dir, const char *cache, const char *repo, const char *rev) {
    char p[MP_PATH + 300], hint[512], sb[200];
    /* config.json must be there; the others are checked when present (tokenize needs no weights) */
    const char *want[] = {"config.json", "tokenizer.json", "model.safetensors.index.json", "model.safetensors"};
    download_hint(repo, rev, hint, sizeof hint);
    struct stat st;
    for (int i = 0; i < 4; i++) {
        if (!join(p, sizeof p, dir, want[i])) return too_long(dir);
        if (lstat(p, &st) != 0) {
            if (i == 0 && cache)
                return omni_fail(OMNI_ERR_MODEL, "%s has no config.json: the download did not finish (%s)",
                                 shown(dir, sb, sizeof sb), hint);
            if (i == 0 && count_ext(dir, ".gguf")) return gguf_error(dir);
            if (i == 0)
                return omni_fail(OMNI_ERR_MODEL, "%s has no config.json: not a model folder (give the folder with "
                                 "config.json, *.safetensors and tokenizer.json, a models--Org--Name cache folder or "
                                 "Org/Name)", shown(dir, sb, sizeof sb));
            continue;
        }
        if (S_ISLNK(st.st_mode) && stat(p, &st) != 0)
            return omni_fail(OMNI_ERR_MODEL, "%s is a link to a missing file (%s): %s", shown(p, sb, sizeof sb),
                             why_missing(dir, cache), hint);
        omni_status s = i == 2 ? check_shards(dir, p, cache, hint) : OMNI_OK;
        if (s) return s;
    }
    return check_lfs(dir);
}

/* A ref or revision name: no empty, absolute, hidden or ".." component. */
static int sane_name(const char *s) {
    if (!s[0] || s[0] == '/' || strstr(s, "..") || strstr(s, "//")) return 0;
    for (const char *c = s; *c; c++)
        if ((unsigned char)*c < 0x21 || *c == '\\') return 0;
    return 1;
}

/* The snapshot of a models--Org--Name cache folder: revision `rev` (a name under refs/, e.g. v1.0 or pr/1, or a
 * commit hash), or without rev the one refs/main names, else the only one. repo (Org/Name, may be NULL) is for the
 * messages. */
static omni_status cache_snapshot(const char *cache, const char *repo, const char *rev, char *out, size_t cap) {
    char p[MP_PATH + 300], ref[256] = {0}, sub[600], sb[200], hint[512], names[512];
    const char *name = rev ? rev : "main";
    download_hint(repo, rev, hint, sizeof hint);
    if (!sane_name(name)) return omni_fail(OMNI_ERR_USAGE, "bad revision name '%s'", name);
    snprintf(sub, sizeof sub, "refs/%s", name);
    struct stat st;
    if (join(p, sizeof p, cache, sub) && stat(p, &st) == 0) {
        omni_read_params rp = omni_read_default_params();
        rp.max_bytes = 4096;
        rp.regular_only = 1; /* refs/main as a FIFO must not hang the lookup */
        rp.reject_nul = 1;
        char *txt = NULL;
        omni_status s = omni_read_file_ex(p, &rp, OMNI_ERR_MODEL, &txt, NULL);
        if (s) return s;
        snprintf(ref, sizeof ref, "%s", txt);
        ref[strcspn(ref, "\r\n \t")] = 0;
        free(txt);
        if (!sane_name(ref) || strchr(ref, '/'))
            return omni_fail(OMNI_ERR_MODEL, "%s/refs/%s does not hold a commit hash (%s)", shown(cache, sb, sizeof sb),
                             name, hint);
        snprintf(sub, sizeof sub, "snapshots/%s", ref);
        if (!join(out, cap, cache, sub)) return too_long(cache);
        if (!is_dir(out))
            return omni_fail(OMNI_ERR_MODEL, "%s: refs/%s names snapshot %s, which is not there (an interrupted "
                             "download or a pruned cache): %s", shown(cache, sb, sizeof sb), name, ref, hint);
        return check_files(out, cache, repo, rev);
    }
    char snaps[MP_PATH + 16];
    if (!join(snaps, sizeof snaps, cache, "snapshots")) return too_long(cache);
    if (rev) { /* a commit hash */
        snprintf(sub, sizeof sub, "snapshots/%s", rev);
        if (join(out, cap, cache, sub) && is_dir(out)) return check_files(out, cache, repo, rev);
        char refs[MP_PATH + 16];
        join(refs, sizeof refs, cache, "refs");
        char rnames[256];
        list_names(refs, 0, rnames, sizeof rnames);
        list_names(snaps, 1, names, sizeof names);
        return omni_fail(OMNI_ERR_MODEL, "%s: no revision '%s' (neither refs/%s nor snapshots/%s; refs: %s; "
                         "snapshots: %s): %s", shown(cache, sb, sizeof sb), rev, rev, rev, rnames[0] ? rnames : "none",
                         names[0] ? names : "none", hint);
    }
    int n = list_names(snaps, 1, names, sizeof names);
    if (n == 0)
        return omni_fail(OMNI_ERR_MODEL, "%s has no refs/main and no snapshot: the download did not finish (%s)",
                         shown(cache, sb, sizeof sb), hint);
    if (n > 1)
        return omni_fail(OMNI_ERR_MODEL, "%s has no refs/main and %d snapshots (%s): pass one, -m %s/snapshots/HASH"
                         "%s%s%s", shown(cache, sb, sizeof sb), n, names, shown(cache, sb, sizeof sb),
                         repo ? " or -m " : "", repo ? repo : "", repo ? "@HASH" : "");
    snprintf(sub, sizeof sub, "snapshots/%s", names);
    if (!join(out, cap, cache, sub)) return too_long(cache);
    return check_files(out, cache, repo, rev);
}

/* A folder laid out as a Hugging Face cache entry: named models--... or holding snapshots/ and refs/. */
static int is_cache_dir(const char *dir) {
    char p[MP_PATH + 16];
    const char *base = strrchr(dir, '/');
    base = base ? base + 1 : dir;
    if (!strncmp(base, "models--", 8)) return 1;
    return join(p, sizeof p, dir, "snapshots") && is_dir(p) && join(p, sizeof p, dir, "refs") && is_dir(p);
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

/* Org/Name or Org/Name@REV (REV may hold a slash: pr/1), not starting with '.' or '/'. */
static int looks_like_repo(const char *a) {
    if (a[0] == '.' || a[0] == '/') return 0;
    const char *at = strchr(a, '@');
    size_t rl = at ? (size_t)(at - a) : strlen(a);
    const char *slash = memchr(a, '/', rl);
    if (!slash || slash == a || slash + 1 == a + rl || memchr(slash + 1, '/', (size_t)(a + rl - slash - 1))) return 0;
    return !at || at[1];
}

/* Org/Name[@REV] in the Hugging Face caches, in the order of model_path.h. */
static omni_status resolve_repo(const char *arg, char *out, size_t cap) {
    char repo[512], rev[256] = {0}, name[600], tried[1600] = {0}, sb[200];
    const char *at = strchr(arg, '@');
    size_t rl = at ? (size_t)(at - arg) : strlen(arg);
    if (rl >= sizeof repo) return omni_fail(OMNI_ERR_MODEL, "model '%s' not found", shown(arg, sb, sizeof sb));
    memcpy(repo, arg, rl);
    repo[rl] = 0;
    if (at) {
        if (strlen(at + 1) >= sizeof rev || !sane_name(at + 1))
            return omni_fail(OMNI_ERR_USAGE, "-m %s: bad revision after '@'", shown(arg, sb, sizeof sb));
        snprintf(rev, sizeof rev, "%s", at + 1);
    }
    snprintf(name, sizeof name, "models--%s", repo); /* Org/Name -> models--Org--Name */
    char *slash = strchr(name + 8, '/');
    memmove(slash + 2, slash + 1, strlen(slash + 1) + 1);
    slash[0] = slash[1] = '-';
    struct {
        const char *env, *sub, *label;
    } hubs[] = {{"HF_HUB_CACHE", "", "$HF_HUB_CACHE"},
                {"HF_HOME", "/hub", "$HF_HOME/hub"},
                {"XDG_CACHE_HOME", "/huggingface/hub", "$XDG_CACHE_HOME/huggingface/hub"}, /* hf's when no HF_HOME */
                {"HOME", "/.cache/huggingface/hub", "~/.cache/huggingface/hub"}};
    for (int i = 0; i < 4; i++) {
        const char *base = getenv(hubs[i].env);
        if (!base || !base[0] || (i == 2 && getenv("HF_HOME") && getenv("HF_HOME")[0])) continue;
        char hub[MP_PATH], dir[MP_PATH + 600];
        if (snprintf(hub, sizeof hub, "%s%s", base, hubs[i].sub) >= (int)sizeof hub) continue;
        if (join(dir, sizeof dir, hub, name) && is_dir(dir))
            return cache_snapshot(dir, repo, rev[0] ? rev : NULL, out, cap);
        size_t used = strlen(tried);
        snprintf(tried + used, sizeof tried - used, "%s%s (%s)", used ? ", " : "", shown(hub, sb, sizeof sb),
                 hubs[i].label);
    }
    return omni_fail(OMNI_ERR_MODEL, "model '%s' not found: no folder %s here and no %s in %s; get it with `hf "
                     "download %s%s%s`", repo, repo, name, tried[0] ? tried : "any Hugging Face cache ($HF_HUB_CACHE, "
                     "$HF_HOME and $HOME are unset)", repo, rev[0] ? " --revision " : "", rev);
}

/* Org/Name of a https://huggingface.co/Org/Name[/...] URL into buf, else "Org/Name". */
static void url_repo(const char *url, char *buf, size_t cap) {
    const char *p = strstr(url, "huggingface.co/");
    snprintf(buf, cap, "Org/Name");
    if (!p) return;
    p += 15;
    size_t org = strcspn(p, "/?#"), name = p[org] == '/' ? strcspn(p + org + 1, "/?#") : 0;
    if (org && name) snprintf(buf, cap, "%.*s", (int)(org + 1 + name), p);
}

omni_status omni_resolve_model(const char *arg, char *out, size_t cap) {
    if (!arg || !arg[0]) return omni_fail(OMNI_ERR_USAGE, "no model given (-m DIR or -m Org/Name)");
    char a[MP_PATH], sb[200];
    size_t len = strlen(arg);
    if (len >= sizeof a)
        return omni_fail(OMNI_ERR_MODEL, "-m %s: path too long (%zu bytes, at most %d)", shown(arg, sb, sizeof sb), len,
                         MP_PATH - 1);
    memcpy(a, arg, len + 1);
    while (len > 1 && a[len - 1] == '/') a[--len] = 0; /* models--Org--Name/ from tab completion */
    struct stat st;
    if (stat(a, &st) == 0 && S_ISDIR(st.st_mode)) {
        if (!has_config(a) && is_cache_dir(a)) return cache_snapshot(a, NULL, NULL, out, cap);
        if (len >= cap) return omni_fail(OMNI_ERR_MODEL, "-m %s: path too long", shown(a, sb, sizeof sb));
        memcpy(out, a, len + 1);
        return check_files(out, NULL, NULL, NULL);
    }
    int err = errno;
    if (strstr(a, "://")) { /* a URL pasted from the browser: name the download instead */
        char repo[512];
        url_repo(a, repo, sizeof repo);
        return omni_fail(OMNI_ERR_MODEL, "-m %s: omni downloads nothing; fetch the model once with `hf download "
                         "%s`, then pass -m %s", shown(a, sb, sizeof sb), repo, repo);
    }
    if (stat(a, &st) == 0 && len > 5 && !strcmp(a + len - 5, ".gguf")) return gguf_error(a);
    if (stat(a, &st) == 0)
        return omni_fail(OMNI_ERR_MODEL, "-m %s: not a directory (give the model's folder, the one with config.json)",
                         shown(a, sb, sizeof sb));
    if (looks_like_repo(a)) return resolve_repo(a, out, cap);
    if (lstat(a, &st) == 0 && S_ISLNK(st.st_mode))
        return omni_fail(OMNI_ERR_MODEL, "model directory not found: %s is a link to a missing target",
                         shown(a, sb, sizeof sb));
    return omni_fail(OMNI_ERR_MODEL, "model directory not found: %s (%s)", shown(a, sb, sizeof sb), strerror(err));
}
