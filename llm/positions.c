/* positions.c - MRoPE position ids (get_rope_index) for text, images and Omni audio; see positions.h. */
#include "llm/positions.h"

int llm_grid_tokens(const llm_grid *g, int merge) { return g->t * (g->h / merge) * (g->w / merge); }

void llm_positions_text(int start, int n, int rope_delta, int32_t *pos) {
    for (int i = 0; i < n; i++) pos[i] = pos[n + i] = pos[2 * n + i] = start + i + rope_delta;
}

/* Length of the run of `id` tokens starting at i. */
static int run_length(const int32_t *ids, int n, int i, int id) {
    int j = i;
    while (j < n && ids[j] == id) j++;
    return j - i;
}

/* Place one image at token i with first position s; returns the next free position. */
static int place_image(int32_t *pos, int n, int i, int s, const llm_grid *g, int m) {
    const int gh = g->h / m, gw = g->w / m;
    int k = i;
    for (int ti = 0; ti < g->t; ti++)
        for (int r = 0; r < gh; r++)
            for (int c = 0; c < gw; c++, k++) pos[k] = s + ti, pos[n + k] = s + r, pos[2 * n + k] = s + c;
    return s + (gh > gw ? gh : gw);
}

static omni_status check_grid(const llm_grid *g, int m, int idx) {
    if (g->t <= 0 || g->h <= 0 || g->w <= 0 || g->h % m || g->w % m)
        return omni_fail(OMNI_ERR_INPUT, "image %d: invalid grid %dx%dx%d for merge size %d", idx, g->t, g->h, g->w, m);
    return OMNI_OK;
}

omni_status llm_positions_build(const int32_t *ids, int n, const llm_pos_config *cfg, const llm_grid *grids,
                                int n_grids, const int *audio_lens, int n_audio, int32_t *pos, int *rope_delta) {
    const int m = cfg->spatial_merge_size > 0 ? cfg->spatial_merge_size : 2;
    int cur = 0, img = 0, aud = 0, maxp = -1;
    for (int i = 0; i < n;) {
        if (ids[i] == cfg->image_token_id) {
            if (img >= n_grids)
                return omni_fail(OMNI_ERR_INPUT, "prompt has more images (<|image_pad|> runs) than the %d given", n_grids);
            omni_status st = check_grid(&grids[img], m, img);
            if (st) return st;
            const int L = llm_grid_tokens(&grids[img], m), run = run_length(ids, n, i, cfg->image_token_id);
            if (run < L)
                return omni_fail(OMNI_ERR_INPUT, "image %d needs %d <|image_pad|> tokens, the prompt has %d", img, L, run);
            cur = place_image(pos, n, i, cur, &grids[img], m);
            i += L, img++;
            if (cur - 1 > maxp) maxp = cur - 1;
            continue;
        }
        if (cfg->video_token_id >= 0 && ids[i] == cfg->video_token_id)
            return omni_fail(OMNI_ERR_UNSUPPORTED, "video placeholders are not supported");
        if (cfg->audio_token_id >= 0 && ids[i] == cfg->audio_token_id &&
            (i == 0 || ids[i - 1] != cfg->audio_token_id) && audio_lens) {
            const int run = run_length(ids, n, i, cfg->audio_token_id);
            if (aud >= n_audio || run != audio_lens[aud])
                return omni_fail(OMNI_ERR_INPUT, "audio %d: the prompt has %d <|audio_pad|> tokens, expected %d", aud,
                                 run, aud < n_audio ? audio_lens[aud] : 0);
            aud++;
        }
        pos[i] = pos[n + i] = pos[2 * n + i] = cur;
        maxp = cur > maxp ? cur : maxp;
        cur++, i++;
    }
    if (img != n_grids)
        return omni_fail(OMNI_ERR_INPUT, "%d images given but the prompt has %d <|image_pad|> runs", n_grids, img);
    if (audio_lens && aud != n_audio)
        return omni_fail(OMNI_ERR_INPUT, "%d audio segments given but the prompt has %d", n_audio, aud);
    if (rope_delta) *rope_delta = maxp + 1 - n;
    return OMNI_OK;
}
