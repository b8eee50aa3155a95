/* cmd_compare.c - `omni generate ... --compare MODE`: the command-line twin of the side-by-side demo.
 *
 * One model, two caches: A in the --kv format (default of the command), B in MODE. Three requests run together
 * in one engine: A and B answer freely (A streamed to stdout as it comes, B printed after it; a header naming
 * each goes to stderr), and B' (cache B, teacher-forced on A's tokens) gives B's next-token distribution at every
 * position of A's answer. One line on stderr then compares them:
 *   compare: KV A bf16 1.23 MiB, B int2 0.25 MiB (0.203x); tokens identical up to 12 (A 16, B 16);
 *            B teacher-forced on A: mean KL 0.012345, top-1 agreement 93.75% over 16 positions
 * (one line). KL is KL(A || B) of the softmax distributions in double precision. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/commands.h"
#include "app/divergence.h"

#define RING 8 /* A's distributions waiting for B's at the same position (the two run in lock-step) */

typedef struct {
    int32_t *toks;
    int n, cap, stream, failed;
    int out_errno;    /* A's answer could not be written (a full disk, a closed pipe): every request is cancelled */
    llm_engine *engine;
    const int *ids;   /* the three requests, to cancel */
    char *text;       /* B's answer, printed after A's */
    size_t len, tcap;
    llm_request_stats st;
} answer;

typedef struct {
    int V, n, agree, lost;
    double kl;
    float *ring;      /* [RING][V] A's logits */
    int ring_pos[RING];
} divergence;

static int push_tok(answer *a, int32_t t) {
    if (a->n == a->cap) {
        int32_t *p = realloc(a->toks, sizeof(int32_t) * (size_t)(a->cap = a->cap ? 2 * a->cap : 64));
        if (!p) return -1;
        a->toks = p;
    }
    a->toks[a->n++] = t;
    return 0;
}

static int push_text(answer *a, const char *s, int len) {
    if (a->len + (size_t)len + 1 > a->tcap) {
        size_t c = a->tcap ? 2 * a->tcap : 4096;
        while (c < a->len + (size_t)len + 1) c *= 2;
        char *p = realloc(a->text, c);
        if (!p) return -1;
        a->text = p, a->tcap = c;
    }
    memcpy(a->text + a->len, s, (size_t)len);
    a->len += (size_t)len;
    a->text[a->len] = 0;
    return 0;
}

static void on_token(void *user, int id, int32_t tok, const char *piece, int len) {
    answer *a = user;
    (void)id;
    if (a->stream && len > 0) {
        errno = 0;
        if (!a->out_errno && (fwrite(piece, 1, (size_t)len, stdout) != (size_t)len || fflush(stdout) != 0)) {
            a->out_errno = errno ? errno : EIO; /* nobody reads the answers: stop computing them */
            for (int i = 0; i < 3; i++) llm_engine_cancel(a->engine, a->ids[i]);
        }
    } else if (len > 0 && push_text(a, piece, len)) {
        a->failed = 1;
    }
    if (tok >= 0 && push_tok(a, tok)) a->failed = 1;
}

static void on_done(void *user, int id, const llm_request_stats *st) {
    (void)id;
    ((answer *)user)->st = *st;
}

/* KL(A || B) and top-1 agreement of one position. */
static void compare_row(divergence *d, const float *a, const float *b) {
    divergence_row r = divergence_of(a, b, d->V);
    d->kl += r.kl;
    d->agree += r.top_a == r.top_b;
    d->n++;
}

typedef struct {
    divergence *d;
    int a_id;
} logit_ctx;

static void on_logits(void *user, int id, int pos, const float *lg, int V) {
    logit_ctx *c = user;
    divergence *d = c->d;
    int slot = pos % RING;
    if (id == c->a_id) {
        memcpy(d->ring + (size_t)slot * V, lg, sizeof(float) * V);
        d->ring_pos[slot] = pos;
    } else if (d->ring_pos[slot] == pos) {
        compare_row(d, d->ring + (size_t)slot * V, lg);
        d->ring_pos[slot] = -1;
    } else {
        d->lost++;
    }
}

/* Each request's answer, with A's logits going to the divergence. */
typedef struct {
    answer ans;
    logit_ctx *lc;
} a_user;

static void a_token(void *u, int id, int32_t t, const char *p, int n) { on_token(&((a_user *)u)->ans, id, t, p, n); }
static void a_logits(void *u, int id, int pos, const float *lg, int V) { on_logits(((a_user *)u)->lc, id, pos, lg, V); }
static void a_done(void *u, int id, const llm_request_stats *st) { on_done(&((a_user *)u)->ans, id, st); }
static void b2_logits(void *u, int id, int pos, const float *lg, int V) { on_logits(u, id, pos, lg, V); }

static void print_line(omni_session *s, int cache_b, const answer *A, const answer *B, const divergence *d) {
    llm_cache_stats ca, cb;
    llm_engine_cache_stats(s->engine, s->cache, &ca);
    llm_engine_cache_stats(s->engine, cache_b, &cb);
    int same = 0;
    while (same < A->n && same < B->n && A->toks[same] == B->toks[same]) same++;
    double mib = 1048576.0;
    fprintf(stderr, "compare: KV A %s %.2f MiB, B %s %.2f MiB (%.3fx); tokens identical up to %d (A %d, B %d); "
            "B teacher-forced on A: mean KL %.6f, top-1 agreement %.2f%% over %d positions\n", ca.format,
            A->st.kv_bytes / mib, cb.format, B->st.kv_bytes / mib,
            A->st.kv_bytes > 0 ? (double)B->st.kv_bytes / A->st.kv_bytes : 0.0, same, A->n, B->n,
            d->n ? d->kl / d->n : 0.0, d->n ? 100.0 * d->agree / d->n : 0.0, d->n);
}

omni_status cmd_generate_compare(const omni_args *a, volatile int *intr) {
    omni_session s;
    media_prompt p;
    media_item items[2 * OMNI_MAX_MEDIA] = {{0}};
    divergence d;
    memset(&d, 0, sizeof d);
    a_user A;
    memset(&A, 0, sizeof A);
    answer B;
    memset(&B, 0, sizeof B);
    logit_ctx lc = {&d, 0};
    int cache_b = -1, conv_b = 0, ids[3];
    kv_format fb;
    omni_status st = kv_parse_mode(a->compare, &fb); /* a bad mode is refused before any work */
    if (st) return st;
    st = omni_open_prompt(&s, a, a->n_predict, 3, intr, &p, items);
    if (!st) st = session_add_cache(&s, a->compare, s.ctx, 2, &cache_b);
    if (!st) st = llm_engine_conv_new(s.engine, cache_b, s.ctx, &conv_b);
    if (!st && !(d.ring = malloc(sizeof(float) * RING * (size_t)s.cfg->vocab)))
        st = omni_fail(OMNI_ERR_NOMEM, "out of memory");
    if (!st) {
        d.V = s.cfg->vocab;
        for (int i = 0; i < RING; i++) d.ring_pos[i] = -1;
        A.ans.stream = 1, A.lc = &lc, A.ans.engine = s.engine, A.ans.ids = ids;
        llm_request r[3];
        r[0] = llm_request_default_params(); /* A: the --kv cache, streamed */
        media_prompt_request(&p, &r[0]);
        r[0].sampling = session_sampling(&s);
        r[0].max_tokens = a->n_predict, r[0].cache = s.cache, r[0].conv = s.conv, r[0].logits = LLM_LOGITS_LAST;
        r[0].cb = (llm_callbacks){a_token, a_logits, a_done, &A};
        r[1] = r[0]; /* B': cache B fed A's tokens */
        r[1].cache = cache_b, r[1].conv = 0, r[1].teacher = -1, r[1].max_tokens = -1, r[1].n_ctx = s.ctx;
        r[1].cb = (llm_callbacks){NULL, b2_logits, NULL, &lc};
        r[2] = r[0]; /* B: cache B, answering freely */
        r[2].cache = cache_b, r[2].conv = conv_b, r[2].logits = LLM_LOGITS_NONE;
        r[2].cb = (llm_callbacks){on_token, NULL, on_done, &B};
        fprintf(stderr, "==> A: %s <==\n", a->kv);
        st = llm_engine_submit_n(s.engine, r, 3, ids);
    }
    if (!st) {
        lc.a_id = ids[0];
        session_run(&s, ids, 3);
        session_add_stats(&s, &A.ans.st);
        if (A.ans.out_errno)
            st = omni_fail(OMNI_ERR_RUNTIME, "cannot write the answer to standard output: %s", strerror(A.ans.out_errno));
        for (const llm_request_stats *x = &A.ans.st; x && !st; x = x == &A.ans.st ? &B.st : NULL)
            if (x->status) st = omni_fail(x->status, "%s", x->error);
        if (!st && (A.ans.failed || B.failed)) st = omni_fail(OMNI_ERR_NOMEM, "out of memory");
        if (!st && d.lost) st = omni_fail(OMNI_ERR_RUNTIME, "internal: %d positions lost A's distribution", d.lost);
    }
    if (!st) {
        fputc('\n', stdout);
        fflush(stdout);
        fprintf(stderr, "==> B: %s <==\n", a->compare);
        if (B.len) fwrite(B.text, 1, B.len, stdout);
        fputc('\n', stdout);
        fflush(stdout);
        print_line(&s, cache_b, &A.ans, &B, &d);
        session_print_perf(&s);
        char line[512];
        llm_engine_cache_line(s.engine, cache_b, line, sizeof line);
        if (!a->no_perf) fprintf(stderr, "%s\n", line);
    }
    free(d.ring);
    free(A.ans.toks), free(A.ans.text), free(B.toks), free(B.text);
    media_prompt_free(&p);
    omni_free_items(items, a->n_images + a->n_audios);
    session_close(&s);
    return st;
}
