/* demo_script.h - the small command language that drives `omni demo --script FILE` (tests, the README picture).
 *
 * One command per line; blank lines and lines starting with '#' are ignored; a TEXT argument is the rest of the
 * line, where "\n" is a newline and "\\" a backslash. The window runs one command per frame; `wait` and `sleep`
 * hold the script while the window keeps drawing.
 *     size W H              resize the window to W x H pixels
 *     model DIR             load the model in DIR (as picking it in the model selector)
 *     kv-a MODE | kv-b MODE KV format of pane A / B for the next run (bf16, int2, int4, kivi2, ...)
 *     open FILE             open an image or audio file (as the Open button)
 *     drop FILE             drop a file on the window (an SDL drop event, as a file manager does)
 *     prompt TEXT           replace the text of the prompt box
 *     type TEXT             type into the prompt box (SDL text input events)
 *     compose TEXT          an input method's composition in progress (SDL text editing event; `type` commits)
 *     clipboard TEXT        put TEXT on the clipboard (as another program copying it; ctrl+v pastes it)
 *     key KEY               press a key, with modifiers: Return, Escape, ctrl+l, shift+Return, F1 ...
 *     click NAME            click a button: run, stop, clear, open, read, audio, play, model, kv-a, kv-b, help
 *     run | stop | clear    click that button
 *     preset read|audio     click "Read the text" / "Ask about the audio"
 *     wait WHAT [SECONDS]   until WHAT (default limit 120 s, then the script fails): model (loaded or refused),
 *                           media (every opened file decoded or refused), done (both answers ended), tokens N
 *                           (both panes have N tokens or ended), idle (no job queued or running)
 *     sleep MS              keep drawing for MS milliseconds
 *     screenshot FILE       save the window as a PNG
 *     print                 print both answers to stdout now (A, then B, as `omni generate --compare` does)
 *     expect TEXT           fail unless a message shown so far contains TEXT
 *     state                 print the window's state on stderr: "demo: state prompt=[...] ime=[...] model=[...]
 *                           ..." (tests read it; frames and the longest frame since the last `state`)
 *     close                 close the window (as the window manager's close button)
 * At the end of the script the window saves --screenshot (if given), prints both answers and closes. */
#ifndef OMNI_APP_UI_DEMO_SCRIPT_H
#define OMNI_APP_UI_DEMO_SCRIPT_H

#include "kernels/status.h"

typedef enum {
    SC_SIZE = 0, SC_MODEL, SC_KV_A, SC_KV_B, SC_OPEN, SC_DROP, SC_PROMPT, SC_TYPE, SC_KEY, SC_CLICK, SC_WAIT,
    SC_SLEEP, SC_SCREENSHOT, SC_PRINT, SC_EXPECT, SC_CLOSE, SC_COMPOSE, SC_CLIPBOARD, SC_STATE,
} demo_cmd_kind;

typedef enum { WAIT_MODEL = 0, WAIT_MEDIA, WAIT_DONE, WAIT_TOKENS, WAIT_IDLE } demo_wait_kind;

typedef struct {
    demo_cmd_kind kind;
    int line;        /* 1-based line in the file */
    char *arg;       /* text / path / key / button name (owned), or NULL */
    int a, b;        /* size W H; tokens N; sleep MS */
    demo_wait_kind wait;
    double seconds;  /* wait limit */
} demo_cmd;

typedef struct {
    demo_cmd *cmds;
    int n;
    char name[256];
} demo_script;

/* Parse a script text; errors name the line ("script x.demo line 3: unknown command 'foo'", OMNI_ERR_USAGE). */
omni_status demo_script_parse(const char *text, const char *name, demo_script *out);
/* Read and parse a file (OMNI_ERR_INPUT when it cannot be read). */
omni_status demo_script_load(const char *path, demo_script *out);
void demo_script_free(demo_script *s);

#endif
