/* chat_line.c - reading and parsing the chat REPL's lines (see chat_line.h). */
#include "app/chat_line.h"

#include <errno.h>
#include <string.h>

chat_read chat_read_line(FILE *f, char *buf, size_t cap, size_t *len) {
    size_t n = 0, total = 0, nul = (size_t)-1;
    int c, any = 0;
    buf[0] = 0;
    for (;;) {
        errno = 0;
        c = getc(f);
        if (c == EOF) {
            if (ferror(f) && errno == EINTR) {
                clearerr(f);
                *len = total;
                return CHAT_READ_INTERRUPTED;
            }
            if (ferror(f)) return CHAT_READ_ERROR;
            if (!any) return CHAT_READ_EOF;
            break;
        }
        any = 1;
        if (c == '\n') break;
        if (c == 0 && nul == (size_t)-1) nul = total;
        if (n + 1 < cap) buf[n++] = (char)c;
        if (++total / CHAT_MAX_DRAIN >= cap) {
            buf[0] = 0;
            *len = total;
            return CHAT_READ_ENDLESS;
        }
    }
    buf[n] = 0;
    *len = total;
    if (total + 1 > cap) return CHAT_READ_TOO_LONG;
    if (nul != (size_t)-1) {
        buf[0] = 0;
        *len = nul;
        return CHAT_READ_BINARY;
    }
    return CHAT_READ_OK;
}

static int is_space(char c) { return c == ' ' || c == '\t' || c == '\r'; }

/* "/word" followed by the end or a space: the rest after the spaces in *rest. */
static int command(const char *line, const char *word, const char **rest) {
    size_t n = strlen(word);
    if (strncmp(line, word, n) || (line[n] && !is_space(line[n]))) return 0;
    const char *r = line + n;
    while (is_space(*r)) r++;
    *rest = r;
    return 1;
}

/* "/word" alone (letters only): a mistyped command ("/Quit", "/exti", "/img"), not a message; "/usr/bin" or
 * "/imagine a cat" stay messages. */
static int is_command_word(const char *s) {
    if (s[0] != '/' || !s[1]) return 0;
    for (const char *p = s + 1; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z'))) return 0;
    return 1;
}

chat_cmd chat_parse_line(char *line) {
    size_t n = strlen(line);
    while (n > 0 && is_space(line[n - 1])) line[--n] = 0;
    const char *s = line, *rest = NULL;
    while (is_space(*s)) s++;
    if (!*s) return (chat_cmd){CHAT_EMPTY, s};
    if (*s != '/') return (chat_cmd){CHAT_MESSAGE, line};
    static const struct {
        const char *word;
        chat_kind kind;
        const char *extra; /* the error for words after it */
    } bare[] = {{"/quit", CHAT_QUIT, "/quit takes no argument"}, {"/exit", CHAT_QUIT, "/exit takes no argument"},
                {"/clear", CHAT_CLEAR, "/clear takes no argument"}, {"/help", CHAT_HELP, "/help takes no argument"}};
    for (size_t i = 0; i < sizeof bare / sizeof bare[0]; i++)
        if (command(s, bare[i].word, &rest))
            return (chat_cmd){*rest ? CHAT_BAD : bare[i].kind, *rest ? bare[i].extra : rest};
    int img = command(s, "/image", &rest), aud = !img && command(s, "/audio", &rest);
    if (img || aud) {
        if (!*rest) return (chat_cmd){CHAT_BAD, img ? "missing file name (/image FILE)" : "missing file name (/audio FILE)"};
        return (chat_cmd){img ? CHAT_IMAGE : CHAT_AUDIO, rest};
    }
    if (is_command_word(s))
        return (chat_cmd){CHAT_BAD,
                          "unknown command (/help lists them; a message that starts with / needs more words)"};
    return (chat_cmd){CHAT_MESSAGE, line};
}
