/* test_media_count.c - the audio token counts the CLI, chat and the server check against the context before any
 * encoder runs (media_count_audios / media_count_pcms) must equal the tokens the batched encode then produces
 * (media_encode_audios / media_encode_pcms: the clips of one prompt padded to the longest, so a short clip can take
 * one token more than alone). Random multi-clip combinations on the omni-a fixture: decoded clips of random lengths
 * (many not a multiple of the 160-sample hop), and the same clips as WAV files at 16 and 8 kHz (the count then
 * comes from the headers). The counts used to be of each clip alone: one token short per short clip. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "app/media.h"
#include "check.h"
#include "llm/model.h"

#define MODEL OMNI_FIXTURES "/audio/omni-a"
#define MAX_CLIPS 4

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(void) {
    g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(g_rng >> 33);
}

/* A 16 kHz clip of n samples: a tone with a little noise. */
static void make_clip(audio_pcm *p, int64_t n) {
    memset(p, 0, sizeof *p);
    p->samples = malloc(sizeof(float) * (size_t)n);
    p->n = n;
    p->orig_rate = 16000, p->orig_channels = 1, p->orig_frames = n, p->duration_s = n / 16000.0;
    float f = 200.0f + (float)(rnd() % 2000);
    for (int64_t i = 0; i < n; i++)
        p->samples[i] = 0.3f * sinf(6.2831853f * f * (float)i / 16000.0f) + 0.01f * ((float)(rnd() % 1000) / 500.0f - 1.0f);
}

/* 16-bit mono PCM WAV of `pcm` resampled to `rate` by dropping samples (rate = 16000 / step). */
static void write_wav(const char *path, const audio_pcm *pcm, int step) {
    int64_t n = pcm->n / step;
    unsigned rate = 16000 / step, bytes = (unsigned)n * 2;
    uint8_t h[44] = {0};
    memcpy(h, "RIFF", 4), memcpy(h + 8, "WAVEfmt ", 8), memcpy(h + 36, "data", 4);
    const unsigned v[][2] = {{4, 36 + bytes}, {16, 16}, {24, rate}, {28, rate * 2}, {40, bytes}};
    for (size_t k = 0; k < sizeof v / sizeof v[0]; k++)
        for (int b = 0; b < 4; b++) h[v[k][0] + b] = (uint8_t)(v[k][1] >> (8 * b));
    h[20] = 1, h[22] = 1, h[32] = 2, h[34] = 16;
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL, "open %s", path);
    if (!f) return;
    fwrite(h, 1, sizeof h, f);
    for (int64_t i = 0; i < n; i++) {
        int16_t s = (int16_t)lrintf(pcm->samples[i * step] * 32767.0f);
        fwrite(&s, 2, 1, f);
    }
    fclose(f);
}

/* One combination: counts (decoded clips, then files) against the encoders' token counts. Returns how many clips
 * the batch gives more tokens than alone. */
static int one_case(media_encoder *enc, int round, const char *dir) {
    int n = 2 + (int)(rnd() % (MAX_CLIPS - 1)), more = 0;
    audio_pcm pcm[MAX_CLIPS];
    const audio_pcm *pp[MAX_CLIPS];
    const char *names[MAX_CLIPS] = {"a", "b", "c", "d"};
    media_item items[MAX_CLIPS] = {{0}};
    media_item *po[MAX_CLIPS];
    int cnt[MAX_CLIPS], alone[MAX_CLIPS];
    static const int64_t fixed[2] = {52800, 6437}; /* round 0: 40 frames alone, 41 (one token more) beside 3.3 s */
    if (round == 0) n = 2;
    for (int i = 0; i < n; i++) {
        int64_t len = rnd() % 3 == 0 ? 240 + rnd() % 3000 : 400 + rnd() % 40000; /* 15 ms .. 2.5 s */
        if (round == 0) len = fixed[i];
        make_clip(&pcm[i], len);
        pp[i] = &pcm[i], po[i] = &items[i];
    }
    CHECK(media_count_pcms(enc, pp, n, cnt) == OMNI_OK, "round %d: media_count_pcms: %s", round, omni_last_error());
    CHECK(media_encode_pcms(enc, pp, names, n, po) == OMNI_OK, "round %d: media_encode_pcms: %s", round,
          omni_last_error());
    for (int i = 0; i < n; i++) {
        CHECK(media_count_pcm(enc, pp[i], &alone[i]) == OMNI_OK, "media_count_pcm");
        CHECK(cnt[i] == items[i].n_tokens, "round %d clip %d of %d (%lld samples): counted %d, encoded %d", round, i,
              n, (long long)pcm[i].n, cnt[i], items[i].n_tokens);
        more += cnt[i] > alone[i];
        media_item_clear(&items[i]);
    }
    for (int step = 1; step <= 2; step++) { /* 16 kHz and 8 kHz files: counted from the headers */
        char path[MAX_CLIPS][4200];
        const char *paths[MAX_CLIPS];
        for (int i = 0; i < n; i++) {
            snprintf(path[i], sizeof path[i], "%s/clip%d.wav", dir, i);
            write_wav(path[i], &pcm[i], step);
            paths[i] = path[i];
        }
        CHECK(media_count_audios(enc, paths, n, cnt) == OMNI_OK, "round %d: media_count_audios: %s", round,
              omni_last_error());
        CHECK(media_encode_audios(enc, paths, n, items) == OMNI_OK, "round %d: media_encode_audios (%d Hz): %s",
              round, 16000 / step, omni_last_error());
        for (int i = 0; i < n; i++) {
            CHECK(cnt[i] == items[i].n_tokens, "round %d, %d Hz files, clip %d of %d: counted %d, encoded %d", round,
                  16000 / step, i, n, cnt[i], items[i].n_tokens);
            media_item_clear(&items[i]);
        }
    }
    for (int i = 0; i < n; i++) audio_pcm_free(&pcm[i]);
    return more;
}

int main(void) {
    llm_model *m = NULL;
    media_encoder *enc = NULL;
    omni_log_set_level(0);
    CHECK(llm_model_load(MODEL, &m) == OMNI_OK, "load %s: %s", MODEL, omni_last_error());
    if (!m) return check_exit();
    CHECK(media_encoder_init(m, MODEL, NULL, &enc) == OMNI_OK, "media_encoder_init");
    char dir[] = "/tmp/omni_media_count_XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    int more = 0, rounds = 16;
    for (int r = 0; r < rounds; r++) more += one_case(enc, r, dir);
    /* the batch must have mattered, or the test could not tell the counts apart */
    CHECK(more > 0, "no clip took more tokens in its batch than alone in %d rounds", rounds);
    fprintf(stderr, "%d rounds: %d clips took one token more in their batch than alone\n", rounds, more);
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd)) {}
    media_encoder_free(enc);
    llm_model_free(m);
    return check_exit();
}
