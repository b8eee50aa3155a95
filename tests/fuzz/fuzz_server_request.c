/* fuzz_server_request.c - the body of an OpenAI request (app/server/request.c): JSON, messages and content
 * parts, base64 media, sampling fields, stop strings, limits. Byte 0: bit 0 = /v1/completions, bit 1 = local
 * files allowed. A request that parses respects the limits it was parsed with. */
#include "fuzz_util.h"

#include "app/server/request.h"

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) {
    if (n < 1) return 0;
    srv_parse_limits lim = srv_parse_default_limits();
    lim.allow_files = (d[0] >> 1) & 1;
    lim.max_tokens = 512;
    lim.max_media = 4;
    srv_request r;
    srv_error e;
    memset(&r, 0, sizeof r);
    omni_status st = srv_request_parse((const char *)d + 1, n - 1, d[0] & 1 ? SRV_EP_COMPLETIONS : SRV_EP_CHAT, &lim,
                                       &r, &e);
    if (st == OMNI_OK) {
        FUZZ_ASSERT(r.prompt && r.max_tokens >= 1 && r.max_tokens <= lim.max_tokens && r.n_stop <= SRV_MAX_STOP);
        FUZZ_ASSERT(r.n_media == r.n_images + r.n_audios && r.n_media <= lim.max_media);
        FUZZ_ASSERT(r.temperature >= 0 && r.temperature <= 2 && r.top_p > 0 && r.top_p <= 1);
        for (int i = 0; i < r.n_media; i++) FUZZ_ASSERT(r.media[i].data || (r.media[i].path && lim.allow_files));
    } else {
        FUZZ_ASSERT(e.status >= 400 && e.status < 600 && e.type != NULL);
    }
    srv_request_free(&r);
    uint8_t *b = NULL;
    size_t bn = 0;
    if (srv_base64_decode((const char *)d, n, &b, &bn) == 0) free(b);
    return 0;
}
