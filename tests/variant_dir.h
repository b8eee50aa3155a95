/* variant_dir.h - a committed fixture model under another config.json, without copying its weights.
 *
 * variant_dir(src, edit, user) makes a fresh directory under $TMPDIR (or /tmp) holding a symlink to every file of
 * the fixture directory src except config.json, plus config.json = src's config.json after edit(root, user).
 * Used for config-only cases (flags transformers reads or ignores) whose reference is an existing fixture's
 * logits. variant_dir_remove() deletes what variant_dir made. Test-only code (one header, no library). */
#ifndef OMNI_TEST_VARIANT_DIR_H
#define OMNI_TEST_VARIANT_DIR_H

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

typedef void (*variant_edit)(cJSON *root, const void *user);

static inline char *variant_read_text(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    char *buf = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) free(buf), buf = NULL;
    if (buf) buf[n] = 0;
    fclose(f);
    return buf;
}

/* The object at a dotted path ("text_config.rope_parameters"); NULL if any part is missing. */
static inline cJSON *variant_obj(cJSON *root, const char *path) {
    char key[256];
    snprintf(key, sizeof key, "%s", path);
    cJSON *o = root;
    for (char *k = strtok(key, "."); k && o; k = strtok(NULL, ".")) o = cJSON_GetObjectItemCaseSensitive(o, k);
    return o;
}

/* Returns the malloc'ed directory path, or NULL (with a message on stderr). */
static inline char *variant_dir(const char *src, variant_edit edit, const void *user) {
    const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    char *dir = malloc(strlen(tmp) + 32), path[4096], target[4096];
    sprintf(dir, "%s/omni-variant-XXXXXX", tmp);
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        free(dir);
        return NULL;
    }
    DIR *d = opendir(src);
    struct dirent *de;
    int ok = d != NULL;
    while (ok && (de = readdir(d))) {
        if (de->d_name[0] == '.' || !strcmp(de->d_name, "config.json")) continue;
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        snprintf(target, sizeof target, "%s/%s", src, de->d_name);
        ok = symlink(target, path) == 0;
    }
    if (d) closedir(d);
    snprintf(path, sizeof path, "%s/config.json", src);
    char *text = ok ? variant_read_text(path) : NULL;
    cJSON *root = text ? cJSON_Parse(text) : NULL;
    free(text);
    if (root) edit(root, user);
    char *out = root ? cJSON_Print(root) : NULL;
    cJSON_Delete(root);
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = out ? fopen(path, "w") : NULL;
    ok = f && fputs(out, f) >= 0;
    if (f) ok = fclose(f) == 0 && ok;
    free(out);
    if (!ok) fprintf(stderr, "variant_dir: cannot make a variant of %s in %s\n", src, dir);
    return dir; /* removed by the caller even on failure (the load then fails and says so) */
}

static inline void variant_dir_remove(char *dir) {
    if (!dir) return;
    DIR *d = opendir(dir);
    struct dirent *de;
    char path[4096];
    while (d && (de = readdir(d))) {
        if (de->d_name[0] == '.') continue;
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        unlink(path);
    }
    if (d) closedir(d);
    rmdir(dir);
    free(dir);
}

#endif
