/* fuzz_demo_script.c - the script language of `omni demo --script FILE` (app/ui/demo_script.c) on arbitrary text
 * (NUL bytes end it, as demo_script_load refuses files that hold one). A script that parses holds only known
 * commands, each with the argument its kind needs, inside the documented ranges. */
#include "fuzz_util.h"

#include "app/ui/demo_script.h"

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) {
    omni_log_set_level(0);
    char *text = fuzz_str(d, n);
    demo_script s;
    if (demo_script_parse(text, "fuzz.demo", &s) == OMNI_OK) {
        for (int i = 0; i < s.n; i++) {
            const demo_cmd *c = &s.cmds[i];
            FUZZ_ASSERT(c->kind >= SC_SIZE && c->kind <= SC_STATE && c->line >= 1);
            FUZZ_ASSERT(i == 0 || c->line > s.cmds[i - 1].line);
            if (c->kind == SC_SIZE) FUZZ_ASSERT(c->a >= 64 && c->a <= 16384 && c->b >= 64 && c->b <= 16384);
            if (c->kind == SC_SLEEP) FUZZ_ASSERT(c->a >= 0 && c->a <= 3600 * 1000);
            if (c->kind == SC_WAIT) FUZZ_ASSERT(c->wait <= WAIT_IDLE && c->seconds > 0 && c->seconds <= 86400);
            if (c->kind == SC_WAIT && c->wait == WAIT_TOKENS) FUZZ_ASSERT(c->a >= 1);
            if (c->kind == SC_MODEL || c->kind == SC_OPEN || c->kind == SC_DROP || c->kind == SC_TYPE ||
                c->kind == SC_KEY || c->kind == SC_CLICK || c->kind == SC_SCREENSHOT || c->kind == SC_EXPECT ||
                c->kind == SC_KV_A || c->kind == SC_KV_B)
                FUZZ_ASSERT(c->arg != NULL);
        }
        demo_script_free(&s);
    } else {
        FUZZ_ASSERT(omni_last_error()[0] && s.n == 0 && s.cmds == NULL);
    }
    free(text);
    return 0;
}
