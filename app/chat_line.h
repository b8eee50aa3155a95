/* chat_line.h - input of the `omni chat` REPL: one line is one message (read whole, bounded, never split), and
 * what a line means (a message, /image FILE, /audio FILE, /clear, /help, /quit). Pure functions, fuzzed. */
#ifndef OMNI_APP_CHAT_LINE_H
#define OMNI_APP_CHAT_LINE_H

#include <stddef.h>
#include <stdio.h>

#define CHAT_MAX_LINE ((size_t)1 << 20) /* longest message in bytes */

typedef enum {
    CHAT_READ_OK,
    CHAT_READ_EOF,
    CHAT_READ_TOO_LONG,
    CHAT_READ_INTERRUPTED,
    CHAT_READ_ERROR,
    CHAT_READ_BINARY, /* the line holds a NUL byte: binary data, dropped whole (a C string would cut it there) */
    CHAT_READ_ENDLESS, /* no end of line within CHAT_MAX_DRAIN buffers (/dev/zero): stop reading */
} chat_read;

#define CHAT_MAX_DRAIN 16 /* a too-long line is read to its end up to this many times the buffer */

/* Read one line (up to and without its '\n') into buf[cap] (NUL-terminated; cap - 1 bytes at most). A longer
 * line is read to its end and dropped: CHAT_READ_TOO_LONG (*len = its length); so is a line with a NUL byte:
 * CHAT_READ_BINARY (*len = the NUL's offset). A line that has not ended after CHAT_MAX_DRAIN * cap bytes is
 * CHAT_READ_ENDLESS (input such as /dev/zero would otherwise be read for ever). A signal (Ctrl+C) while
 * waiting: CHAT_READ_INTERRUPTED. End of input with nothing read: CHAT_READ_EOF. */
chat_read chat_read_line(FILE *f, char *buf, size_t cap, size_t *len);

typedef enum { CHAT_EMPTY, CHAT_MESSAGE, CHAT_IMAGE, CHAT_AUDIO, CHAT_CLEAR, CHAT_HELP, CHAT_QUIT, CHAT_BAD } chat_kind;

typedef struct {
    chat_kind kind;
    const char *arg; /* MESSAGE: the text; IMAGE/AUDIO: the path; BAD: what is wrong (static text) */
} chat_cmd;

/* What `line` means. Trailing "\r", spaces and tabs are cut (in place); /image and /audio take the rest of the
 * line after the spaces as the path; "/image" alone is CHAT_BAD, so are words after /quit, /exit, /clear or /help
 * and a lone "/word" of letters that is no command ("/Quit", "/exti"); "/imagery is a word" (more words) and
 * "/usr/bin" are messages. */
chat_cmd chat_parse_line(char *line);

#endif
