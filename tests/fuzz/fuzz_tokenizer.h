/* fuzz_tokenizer.h - the real tokenizer some fuzz targets need (tokenizer_encode, server_request): from
 * $OMNI_FUZZ_TOKENIZER, else data/tokenizer.json beside the binary (a pack for another host), else the source tree's
 * tests/fixtures/tok-small/tokenizer.json. Aborts when none loads (the target cannot run). */
#ifndef OMNI_FUZZ_TOKENIZER_H
#define OMNI_FUZZ_TOKENIZER_H

#include <libgen.h>

#include "fuzz_util.h"
#include "llm/tokenizer.h"

static inline llm_tokenizer *fuzz_tokenizer(const char *argv0, const char *target) {
    char beside[4096], exe[4096];
    const char *env = getenv("OMNI_FUZZ_TOKENIZER");
    snprintf(exe, sizeof exe, "%s", argv0);
    snprintf(beside, sizeof beside, "%s/data/tokenizer.json", dirname(exe));
    const char *paths[] = {env, beside, OMNI_FIXTURES "/tok-small/tokenizer.json"};
    llm_tokenizer *t = NULL;
    for (int i = 0; i < 3 && !t; i++)
        if (paths[i] && access(paths[i], R_OK) == 0 && llm_tokenizer_load(paths[i], &t) != OMNI_OK) t = NULL;
    if (!t) {
        fprintf(stderr, "%s: no tokenizer.json (set OMNI_FUZZ_TOKENIZER)\n", target);
        abort();
    }
    return t;
}

#endif
