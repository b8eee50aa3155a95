/* demo_script.c - parser of the demo's script language (see demo_script.h). */
#define _POSIX_C_SOURCE 200809L
#include "app/ui/demo_script.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct {
    const char *name;
    demo_cmd_kind kind;
    int arg; /* 0 none, 1 one word, 2 rest of the line (may be empty), 3 rest of the line (required) */
} g_cmds[] = {
    {"size", SC_SIZE, 0},     {"model", SC_MODEL, 3},   {"kv-a", SC_KV_A, 1},     {"kv-b", SC_KV_B, 1},
    {"open", SC_OPEN, 3},     {"drop", SC_DROP, 3},     {"prompt", SC_PROMPT, 2}, {"type", SC_TYPE, 3},
    {"key", SC_KEY, 1},       {"click", SC_CLICK, 1},   {"wait", SC_WAIT, 0},     {"sleep", SC_SLEEP, 0},
    {"screenshot", SC_SCREENSHOT, 3}, {"print", SC_PRINT, 0}, {"expect", SC_EXPECT, 3}, {"close", SC_CLOSE, 0},
    {"compose", SC_COMPOSE, 3}, {"clipboard", SC_CLIPBOARD, 3}, {"state", SC_STATE, 0},
};

static const char *g_buttons[] = {"run", "stop", "clear", "open", "read", "audio", "play", "model", "kv-a", "kv-b",
                                  "help"};

/* "\n" -> newline, "\\" -> backslash, in place. */
static void unescape(char *s) {
    char *o = s;
    for (char *p = s; *p; p++) {
        if (p[0] == '\\' && p[1] == 'n') *o++ = '\n', p++;
        else if (p[0] == '\\' && p[1] == '\\') *o++ = '\\', p++;
        else *o++ = *p;
    }
    *o = 0;
}

static int to_int(const char *s, int lo, int hi, int *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return -1;
    *out = (int)v;
    return 0;
}

static omni_status parse_wait(demo_cmd *c, char *rest) {
    char *w[4];
    int n = 0;
    for (char *p = strtok(rest, " \t"); p; p = strtok(NULL, " \t")) {
        if (n == 3) return omni_fail(OMNI_ERR_USAGE, "wait: too many arguments");
        w[n++] = p;
    }
    static const char *names[] = {"model", "media", "done", "tokens", "idle"};
    int k = -1;
    for (int i = 0; n > 0 && i < 5; i++)
        if (!strcmp(w[0], names[i])) k = i;
    if (k < 0) return omni_fail(OMNI_ERR_USAGE, "wait: expected model, media, done, tokens N or idle");
    c->wait = (demo_wait_kind)k;
    int i = 1;
    if (k == WAIT_TOKENS && (n < 2 || to_int(w[i++], 1, 1 << 24, &c->a)))
        return omni_fail(OMNI_ERR_USAGE, "wait tokens: expected a token count");
    c->seconds = 120;
    if (i < n) {
        char *end;
        errno = 0;
        c->seconds = strtod(w[i++], &end);
        if (errno || *end || !(c->seconds > 0 && c->seconds <= 86400))
            return omni_fail(OMNI_ERR_USAGE, "wait: the time limit must be seconds in (0, 86400]");
    }
    if (i < n) return omni_fail(OMNI_ERR_USAGE, "wait: too many arguments");
    return OMNI_OK;
}

/* One non-empty line (cut in place). */
static omni_status parse_line(char *line, demo_cmd *c) {
    char *sp = line + strcspn(line, " \t");
    char *rest = *sp ? sp + 1 : sp;
    *sp = 0;
    rest += strspn(rest, " \t");
    int k = -1;
    for (size_t i = 0; i < sizeof g_cmds / sizeof g_cmds[0]; i++)
        if (!strcmp(line, g_cmds[i].name)) k = (int)i;
    if (k < 0) return omni_fail(OMNI_ERR_USAGE, "unknown command '%s'", line);
    c->kind = g_cmds[k].kind;
    int arg = g_cmds[k].arg;
    if (arg == 1 && (!*rest || rest[strcspn(rest, " \t")]))
        return omni_fail(OMNI_ERR_USAGE, "%s: expected one argument", line);
    if (arg == 3 && !*rest) return omni_fail(OMNI_ERR_USAGE, "%s: missing argument", line);
    if (arg == 0 && *rest && c->kind != SC_SIZE && c->kind != SC_WAIT && c->kind != SC_SLEEP)
        return omni_fail(OMNI_ERR_USAGE, "%s takes no argument", line);
    if (arg) {
        if (!(c->arg = strdup(rest))) return omni_fail(OMNI_ERR_NOMEM, "out of memory");
        if (c->kind == SC_PROMPT || c->kind == SC_TYPE || c->kind == SC_EXPECT || c->kind == SC_COMPOSE ||
            c->kind == SC_CLIPBOARD)
            unescape(c->arg);
    }
    if (c->kind == SC_SIZE) {
        char *w = strtok(rest, " \t"), *h = w ? strtok(NULL, " \t") : NULL;
        if (!h || strtok(NULL, " \t") || to_int(w, 64, 16384, &c->a) || to_int(h, 64, 16384, &c->b))
            return omni_fail(OMNI_ERR_USAGE, "size: expected W H in pixels (64..16384)");
    } else if (c->kind == SC_SLEEP) {
        if (to_int(rest, 0, 3600 * 1000, &c->a)) return omni_fail(OMNI_ERR_USAGE, "sleep: expected milliseconds");
    } else if (c->kind == SC_WAIT) {
        return parse_wait(c, rest);
    } else if (c->kind == SC_CLICK) {
        int ok = 0;
        for (size_t i = 0; i < sizeof g_buttons / sizeof g_buttons[0]; i++) ok |= !strcmp(c->arg, g_buttons[i]);
        if (!ok)
            return omni_fail(OMNI_ERR_USAGE, "click: no button '%s' (run, stop, clear, open, read, audio, play, "
                                             "model, kv-a, kv-b, help)", c->arg);
    }
    return OMNI_OK;
}

/* Sugar: run / stop / clear and preset NAME are clicks. Returns line or buf. */
static const char *sugar(const char *line, char *buf, size_t cap) {
    if (!strcmp(line, "run") || !strcmp(line, "stop") || !strcmp(line, "clear")) {
        snprintf(buf, cap, "click %.20s", line);
        return buf;
    }
    if (!strcmp(line, "preset read") || !strcmp(line, "preset audio")) {
        snprintf(buf, cap, "click %.20s", line + 7);
        return buf;
    }
    return line;
}

omni_status demo_script_parse(const char *text, const char *name, demo_script *out) {
    memset(out, 0, sizeof *out);
    snprintf(out->name, sizeof out->name, "%s", name);
    int cap = 0, lineno = 0;
    omni_status st = OMNI_OK;
    for (const char *p = text; !st && *p;) {
        const char *e = p + strcspn(p, "\n");
        lineno++;
        size_t len = (size_t)(e - p);
        char *line = malloc(len + 1);
        if (!line) return omni_fail(OMNI_ERR_NOMEM, "out of memory");
        memcpy(line, p, len);
        line[len] = 0;
        p = *e ? e + 1 : e;
        while (len && (line[len - 1] == '\r' || line[len - 1] == ' ' || line[len - 1] == '\t')) line[--len] = 0;
        char *s = line + strspn(line, " \t");
        if (!*s || *s == '#') {
            free(line);
            continue;
        }
        if (out->n == cap) {
            cap = cap ? 2 * cap : 16;
            demo_cmd *c = realloc(out->cmds, sizeof *c * (size_t)cap);
            if (!c) {
                free(line);
                st = omni_fail(OMNI_ERR_NOMEM, "out of memory");
                break;
            }
            out->cmds = c;
        }
        demo_cmd *c = &out->cmds[out->n];
        memset(c, 0, sizeof *c);
        c->line = lineno;
        char tmp[64];
        if (sugar(s, tmp, sizeof tmp) == tmp) s = tmp; /* parse_line cuts its input: tmp is a copy */
        st = parse_line(s, c);
        out->n++;
        if (st) {
            char msg[512];
            snprintf(msg, sizeof msg, "%s", omni_last_error());
            st = omni_fail(st, "script %s line %d: %s", name, lineno, msg);
        }
        free(line);
    }
    if (st) demo_script_free(out);
    return st;
}

omni_status demo_script_load(const char *path, demo_script *out) {
    memset(out, 0, sizeof *out);
    size_t len;
    char *text = omni_read_file(path, &len);
    if (!text) return omni_fail(OMNI_ERR_INPUT, "cannot read script %s: %s", path, strerror(errno));
    if (memchr(text, 0, len)) {
        free(text);
        return omni_fail(OMNI_ERR_INPUT, "script %s contains NUL bytes (binary file?)", path);
    }
    const char *b = strrchr(path, '/');
    omni_status st = demo_script_parse(text, b ? b + 1 : path, out);
    free(text);
    return st;
}

void demo_script_free(demo_script *s) {
    if (!s) return;
    for (int i = 0; i < s->n; i++) free(s->cmds[i].arg);
    free(s->cmds);
    memset(s, 0, sizeof *s);
}
