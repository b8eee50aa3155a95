/* fuzz_chat_line.c - the chat REPL's input (app/chat_line.c): reading lines of any length with a small buffer
 * (too-long lines and lines with a NUL byte dropped whole, endless input stopped) and parsing each into a message
 * or a command. */
#include "fuzz_util.h"

#include "app/chat_line.h"

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) {
    char *s = fuzz_str(d, n);
    chat_cmd c = chat_parse_line(s);
    FUZZ_ASSERT(c.kind >= CHAT_EMPTY && c.kind <= CHAT_BAD && c.arg != NULL);
    if (c.kind == CHAT_IMAGE || c.kind == CHAT_AUDIO) FUZZ_ASSERT(c.arg[0] && c.arg[0] != ' ');
    free(s);
    if (n == 0) return 0;
    FILE *f = fmemopen((void *)d, n, "r");
    if (!f) return 0;
    char line[64];
    size_t len, lines = 0;
    chat_read r;
    while ((r = chat_read_line(f, line, sizeof line, &len)) == CHAT_READ_OK || r == CHAT_READ_TOO_LONG ||
           r == CHAT_READ_BINARY) {
        if (r == CHAT_READ_TOO_LONG) FUZZ_ASSERT(len >= sizeof line - 1);
        if (r == CHAT_READ_OK) FUZZ_ASSERT(strlen(line) == len); /* a line read whole holds no NUL */
        if (r == CHAT_READ_OK) chat_parse_line(line);
        if (++lines > n + 1) abort(); /* every call consumes input */
    }
    FUZZ_ASSERT(r == CHAT_READ_EOF || r == CHAT_READ_ENDLESS); /* (a memory stream has no errors or signals) */
    fclose(f);
    return 0;
}
