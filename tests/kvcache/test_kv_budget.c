/* test_kv_budget.c - the budget API (kv_budget_of / kv_seq_budget, free page counts, max_seq_len) against what
 * the pool really holds.
 *
 * An independent model of the documented page rules (kvcache.h: block b of a sequence of length L has a quant
 * page when b < nq(L), a raw page when b >= nq(L) or b == 0 with sinks; a step L0 -> L1 holds the raw pages of L0
 * plus those of its new blocks until kv_commit) is checked against the real cache at every moment of growth
 * (token by token, random chunks, for every format / window / sink / max_chunk configuration): pages in flight
 * after kv_forward and after kv_commit, bytes, free counts. Then:
 *   - the budget's peak equals the model's maximum over every step (L0, L1) with L1 - L0 <= max_chunk, and the
 *     real cache reaches it on the model's worst step (tight), and never exceeds it on any schedule;
 *   - committed pages/bytes after N tokens equal kv_get_usage;
 *   - pure function == cache function; page bytes == the cache's;
 *   - a cache made for n sequences of N tokens (max_seq_len N) has pool_bytes <= n * budget bytes and grows all n
 *     to N along worst-case and random schedules without running out of pages;
 *   - the decode budget (one-token steps) equals the model's maximum, and kv_step_extra_of equals the model's
 *     largest excess of any step over the decode budget of its end length (searched over a longer range);
 *   - errors: N beyond max_seq_len (pure and cache), kv_forward beyond max_seq_len. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kv_test_util.h"

#define D 32
#define HQ 1
#define HKV 1
#define NL 2

typedef struct {
    const char *mode, *layer1; /* layer 1's mode (NULL = same) */
    int R, S, C;
} cfg_t;

/* ---- the model of the page rules */
typedef struct {
    int quant, R, S;
} model_t;

static int64_t m_nb(int64_t L) { return (L + 31) / 32; }
static int64_t m_nq(const model_t *m, int64_t L) { return m->quant && L >= m->R ? (L - m->R) / 32 : 0; }
static int m_has_raw(const model_t *m, int64_t b, int64_t L) {
    return b < m_nb(L) && (b >= m_nq(m, L) || (b == 0 && m->quant && m->S > 0));
}
/* Pages held while a step L0 -> L1 is in flight (L0 == L1: committed state). */
static void m_pages(const model_t *m, int64_t L0, int64_t L1, int64_t *raw, int64_t *q) {
    *raw = 0;
    for (int64_t b = 0; b < m_nb(L1); b++) *raw += b < m_nb(L0) ? m_has_raw(m, b, L0) : m_has_raw(m, b, L1);
    *q = m_nq(m, L1);
}
/* pk[n] = max over all steps 0 <= L0 <= L1 <= n, L1 - L0 <= C of the raw pages in flight (n = 0..N), with the
 * arg max of n = N in *a0, *a1; quant pages are nq(n) (monotone). */
static void m_peaks(const model_t *m, int64_t N, int64_t C, int64_t *pk, int64_t *a0, int64_t *a1) {
    int64_t best = 0;
    *a0 = *a1 = 0;
    for (int64_t L1 = 0; L1 <= N; L1++) {
        for (int64_t L0 = L1 - C < 0 ? 0 : L1 - C; L0 <= L1; L0++) {
            int64_t r, q;
            m_pages(m, L0, L1, &r, &q);
            if (r > best) best = r, *a0 = L0, *a1 = L1;
        }
        pk[L1] = best;
    }
}

/* Bytes held while a step L0 -> L1 is in flight, with pages of rb / qb bytes. */
static int64_t m_bytes(const model_t *m, int64_t L0, int64_t L1, int64_t rb, int64_t qb) {
    int64_t r, q;
    m_pages(m, L0, L1, &r, &q);
    return r * rb + q * qb;
}
static int m_flushes(const model_t *m, int64_t L) { return m_nq(m, L + 1) > m_nq(m, L); }

/* pm[n] = max bytes over the committed states L <= n and the one-token steps L -> L + 1 (L < n) that flush no
 * block; fm[n] = max(0, the most a flushing one-token step L < n holds beyond pm[n]) (n = 0..N). */
static void m_promise(const model_t *m, int64_t N, int64_t rb, int64_t qb, int64_t *pm, int64_t *fm) {
    int64_t fl = -1; /* the most bytes of a flushing step so far */
    for (int64_t n = 0; n <= N; n++) {
        int64_t v = m_bytes(m, n, n, rb, qb);
        if (n > 0 && !m_flushes(m, n - 1) && m_bytes(m, n - 1, n, rb, qb) > v) v = m_bytes(m, n - 1, n, rb, qb);
        if (n > 0 && m_flushes(m, n - 1) && m_bytes(m, n - 1, n, rb, qb) > fl) fl = m_bytes(m, n - 1, n, rb, qb);
        pm[n] = n > 0 && pm[n - 1] > v ? pm[n - 1] : v;
        fm[n] = fl - pm[n] > 0 ? fl - pm[n] : 0;
    }
}

/* dec[n] = max over L < n of the raw pages in flight of a one-token step L -> L + 1 (n = 0..N). */
static void m_decode(const model_t *m, int64_t N, int64_t *dec) {
    dec[0] = 0;
    for (int64_t n = 1; n <= N; n++) {
        int64_t r, q;
        m_pages(m, n - 1, n, &r, &q);
        dec[n] = r > dec[n - 1] ? r : dec[n - 1];
    }
}

static kv_params cfg_params(const cfg_t *c, kv_format *lf, int64_t max_tokens, int max_seqs, int64_t max_seq_len) {
    kv_params p = kv_default_params();
    kv_parse_mode(c->mode, &p.fmt);
    p.fmt.window = c->R, p.fmt.n_sink = c->S;
    lf[0] = lf[1] = p.fmt;
    if (c->layer1) {
        kv_parse_mode(c->layer1, &lf[1]);
        lf[1].window = c->R, lf[1].n_sink = c->S;
        p.layer_fmt = lf;
    }
    p.n_layers = NL, p.n_kv_heads = HKV, p.head_dim = D;
    p.max_tokens = max_tokens, p.max_seqs = max_seqs, p.max_seq_len = max_seq_len, p.max_chunk = c->C;
    return p;
}

static int is_quant_mode(const char *mode) { return mode[0] == 'i' || mode[0] == 'k'; }

/* One step of n tokens for sequences ids[0..ns) (n[i] each), from position pos[i] of data d; checks the pages in
 * flight (after layer 0's kv_forward) and after kv_commit against the model (single-sequence caches only).
 * Returns the status of the step. */
static omni_status step(kv_cache *c, const model_t *m, int ns, const int *ids, const int *n, const int64_t *pos,
                        const kv_data *d, float *out, int64_t *peak_raw, int64_t *peak_q, int check_model) {
    static float q[4096 * HQ * D], k[4096 * HKV * D], v[4096 * HKV * D];
    omni_status st = OMNI_OK;
    for (int l = 0; l < NL && !st; l++) {
        int64_t row = 0;
        for (int i = 0; i < ns; i++)
            for (int j = 0; j < n[i]; j++, row++) {
                memcpy(q + row * HQ * D, kvd_q(d, l, pos[i] + j), HQ * D * 4);
                memcpy(k + row * HKV * D, kvd_k(d, l, pos[i] + j), HKV * D * 4);
                memcpy(v + row * HKV * D, kvd_v(d, l, pos[i] + j), HKV * D * 4);
            }
        st = kv_forward(c, l, ns, ids, n, q, k, v, out, HQ, 0.17f);
        if (st || l) continue;
        kv_usage u;
        kv_get_usage(c, &u);
        if (u.raw_pages > *peak_raw) *peak_raw = u.raw_pages;
        if (u.quant_pages > *peak_q) *peak_q = u.quant_pages;
        if (check_model) {
            int64_t r, qq;
            m_pages(m, pos[0], pos[0] + n[0], &r, &qq);
            CHECK(u.raw_pages == r && u.quant_pages == qq, "in flight %lld -> %lld: pages %lld+%lld, model %lld+%lld",
                  (long long)pos[0], (long long)(pos[0] + n[0]), (long long)u.raw_pages, (long long)u.quant_pages,
                  (long long)r, (long long)qq);
        }
    }
    if (st) return st;
    return kv_commit(c, ns, ids, n);
}

/* Checks the committed state of a single-sequence cache at length L against the model and the budget. */
static void check_committed(kv_cache *c, const model_t *m, int64_t L, const char *what) {
    kv_usage u;
    kv_budget b;
    kv_get_usage(c, &u);
    CHECK(kv_seq_budget(c, L, &b) == OMNI_OK, "%s", omni_last_error());
    int64_t r, q;
    m_pages(m, L, L, &r, &q);
    CHECK(u.raw_pages == r && u.quant_pages == q, "%s: committed %lld: pages %lld+%lld, model %lld+%lld", what,
          (long long)L, (long long)u.raw_pages, (long long)u.quant_pages, (long long)r, (long long)q);
    CHECK(b.committed_raw_pages == r && b.committed_quant_pages == q && b.committed_bytes == u.total_bytes,
          "%s: committed budget at %lld: %lld+%lld pages %lld bytes, pool %lld+%lld pages %lld bytes", what,
          (long long)L, (long long)b.committed_raw_pages, (long long)b.committed_quant_pages,
          (long long)b.committed_bytes, (long long)u.raw_pages, (long long)u.quant_pages, (long long)u.total_bytes);
    CHECK(u.raw_pages_free >= 0 && u.quant_pages_free >= 0 &&
              (u.raw_pages + u.raw_pages_free) * u.raw_page_bytes + (u.quant_pages + u.quant_pages_free) * u.quant_page_bytes ==
                  u.pool_bytes,
          "%s: free counts do not add up to the pool", what);
}

static int64_t g_checked;

/* Grow one sequence to N along the chunk schedule `sched` (NULL = random chunks in 1..C); checks every moment. */
static void grow(const cfg_t *cf, const model_t *m, int64_t N, const int *sched, int nsched, uint64_t seed,
                 const char *what) {
    kv_format lf[2];
    kv_params p = cfg_params(cf, lf, N, 1, 0);
    kv_cache *c = NULL;
    if (kv_init(&p, &c)) {
        CHECK(0, "%s: init: %s", what, omni_last_error());
        return;
    }
    kv_budget b;
    CHECK(kv_seq_budget(c, N, &b) == OMNI_OK, "%s", omni_last_error());
    kv_data d = kvd_make(NL, HQ, HKV, D, N, seed);
    float *out = malloc((size_t)(cf->C + 1) * HQ * D * 4);
    rng_t r = {seed};
    int id;
    kv_seq_add(c, &id);
    int64_t L = 0, praw = 0, pq = 0;
    for (int s = 0; L < N; s++) {
        int n = sched ? (s < nsched ? sched[s] : 1) : 1 + (int)(rng_next(&r) % (uint64_t)cf->C);
        if (n > N - L) n = (int)(N - L);
        if (n > cf->C) n = cf->C;
        omni_status st = step(c, m, 1, &id, &n, &L, &d, out, &praw, &pq, 1);
        CHECK(st == OMNI_OK, "%s: step %lld + %d: %s", what, (long long)L, n, omni_last_error());
        if (st) break;
        L += n;
        check_committed(c, m, L, what);
        g_checked++;
    }
    CHECK(praw <= b.raw_pages && pq <= b.quant_pages, "%s: held %lld+%lld pages, budget %lld+%lld", what,
          (long long)praw, (long long)pq, (long long)b.raw_pages, (long long)b.quant_pages);
    free(out);
    kvd_free(&d);
    kv_free(c);
}

static void test_config(const cfg_t *cf, uint64_t seed) {
    const model_t m = {is_quant_mode(cf->mode), cf->R, cf->S};
    const int64_t N = cf->R + 100;
    char what[96];
    snprintf(what, sizeof what, "%s%s%s R %d S %d C %d", cf->mode, cf->layer1 ? "+" : "", cf->layer1 ? cf->layer1 : "",
             cf->R, cf->S, cf->C);
    /* pure == cache; page sizes; the peak against the model's maximum over every step */
    kv_format lf[2];
    kv_params p = cfg_params(cf, lf, N, 1, 0);
    kv_budget bp, bc;
    kv_cache *c = NULL;
    CHECK(kv_budget_of(&p, N, &bp) == OMNI_OK && kv_init(&p, &c) == OMNI_OK, "%s: %s", what, omni_last_error());
    if (!c) return;
    CHECK(kv_seq_budget(c, N, &bc) == OMNI_OK && !memcmp(&bp, &bc, sizeof bp), "%s: pure and cache budgets differ",
          what);
    kv_usage u;
    kv_get_usage(c, &u);
    CHECK(bp.raw_page_bytes == u.raw_page_bytes && bp.quant_page_bytes == u.quant_page_bytes,
          "%s: page bytes %lld/%lld vs pool %lld/%lld", what, (long long)bp.raw_page_bytes,
          (long long)bp.quant_page_bytes, (long long)u.raw_page_bytes, (long long)u.quant_page_bytes);
    CHECK(bp.bytes == bp.raw_pages * bp.raw_page_bytes + bp.quant_pages * bp.quant_page_bytes, "%s: bytes", what);
    kv_free(c);
    int64_t *pk = malloc((size_t)(N + 1) * sizeof(int64_t)), a0, a1;
    m_peaks(&m, N, cf->C, pk, &a0, &a1);
    for (int64_t n = 0; n <= N; n++) { /* every length: budget == model maximum */
        kv_budget b;
        CHECK(kv_budget_of(&p, n, &b) == OMNI_OK, "%s", omni_last_error());
        CHECK(b.raw_pages == pk[n] && b.quant_pages == m_nq(&m, n), "%s N %lld: budget %lld+%lld pages, model max "
              "%lld+%lld", what, (long long)n, (long long)b.raw_pages, (long long)b.quant_pages, (long long)pk[n],
              (long long)m_nq(&m, n));
    }
    const int64_t mr = pk[N];
    free(pk);
    /* decode budget == the model's maximum of one-token steps; the step reserve == the model's maximum excess of
     * any step (L1 - L0 <= C) over the decode budget of N = L1, over a range longer than the function searches */
    {
        const int64_t NE = 2 * cf->R + 300;
        int64_t *dec = malloc((size_t)(NE + 1) * sizeof(int64_t)), extra = -1, worst = 0;
        m_decode(&m, NE, dec);
        for (int64_t n = 0; n <= N; n++) {
            kv_budget b;
            kv_budget_of(&p, n, &b);
            CHECK(b.decode_raw_pages == dec[n] && b.decode_bytes == dec[n] * b.raw_page_bytes + b.quant_pages *
                  b.quant_page_bytes, "%s N %lld: decode budget %lld raw pages, model %lld", what, (long long)n,
                  (long long)b.decode_raw_pages, (long long)dec[n]);
        }
        kv_params pe = cfg_params(cf, lf, NE, 1, 0);
        CHECK(kv_step_extra_of(&pe, &extra) == OMNI_OK, "%s", omni_last_error());
        for (int64_t L0 = 0; L0 < NE; L0++)
            for (int64_t L1 = L0 + 1; L1 <= NE && L1 - L0 <= cf->C; L1++) {
                int64_t r, q;
                m_pages(&m, L0, L1, &r, &q);
                worst = r - dec[L1] > worst ? r - dec[L1] : worst;
            }
        CHECK(extra == worst, "%s: step reserve %lld raw pages, model %lld", what, (long long)extra, (long long)worst);
        /* the joint promise (bytes at once, flushing steps excepted), the flush excess, and the byte reserves:
         * every length up to NE (past the R + 64 + 64 tokens that promise_bytes searches in full) */
        kv_budget b0;
        kv_budget_of(&pe, 0, &b0);
        const int64_t rb = b0.raw_page_bytes, qb = b0.quant_page_bytes;
        int64_t *pm = malloc((size_t)(NE + 1) * sizeof(int64_t)), *fm = malloc((size_t)(NE + 1) * sizeof(int64_t));
        m_promise(&m, NE, rb, qb, pm, fm);
        int saved = 0;
        for (int64_t n = 0; n <= NE; n++) {
            kv_budget b;
            kv_budget_of(&pe, n, &b);
            CHECK(b.promise_bytes == pm[n] && b.flush_bytes == fm[n] && b.promise_bytes <= b.decode_bytes &&
                  b.promise_bytes + b.flush_bytes <= b.decode_bytes,
                  "%s N %lld: promise %lld + flush %lld bytes, model %lld + %lld (decode_bytes %lld)", what,
                  (long long)n, (long long)b.promise_bytes, (long long)b.flush_bytes, (long long)pm[n],
                  (long long)fm[n], (long long)b.decode_bytes);
            saved += b.promise_bytes < b.decode_bytes;
        }
        int64_t chunk = -1, flush = -1, wc = 0, wf = 0;
        CHECK(kv_step_extra_bytes_of(&pe, &chunk, &flush) == OMNI_OK, "%s", omni_last_error());
        for (int64_t L0 = 0; L0 < NE; L0++)
            for (int64_t L1 = L0 + 1; L1 <= NE && L1 - L0 <= cf->C; L1++) {
                int64_t v = m_bytes(&m, L0, L1, rb, qb) - pm[L1];
                wc = v > wc ? v : wc;
                if (L1 == L0 + 1 && m_flushes(&m, L0)) wf = v > wf ? v : wf;
            }
        CHECK(chunk == wc && flush == wf, "%s: byte reserves chunk %lld flush %lld, model %lld %lld", what,
              (long long)chunk, (long long)flush, (long long)wc, (long long)wf);
        CHECK(!m.quant || flush == qb, "%s: a flush holds one quant page (%lld) over the promise, not %lld", what,
              (long long)qb, (long long)flush);
        CHECK(!m.quant || cf->R + 64 > NE || saved > 0, "%s: the promise never below decode_bytes", what);
        free(pm);
        free(fm);
        free(dec);
    }
    /* the real cache on the model's worst step reaches the budget */
    {
        int *sched = malloc((size_t)(N + 2) * sizeof(int)), ns = 0;
        for (int64_t L = 0; L < a0; L += cf->C) sched[ns++] = (int)(a0 - L < cf->C ? a0 - L : cf->C);
        if (a1 > a0) sched[ns++] = (int)(a1 - a0);
        kv_params p1 = cfg_params(cf, lf, N, 1, 0);
        kv_init(&p1, &c);
        kv_data d = kvd_make(NL, HQ, HKV, D, N, seed + 1);
        float *out = malloc((size_t)(cf->C + 1) * HQ * D * 4);
        int id;
        kv_seq_add(c, &id);
        int64_t L = 0, praw = 0, pq = 0;
        for (int s = 0; s < ns; L += sched[s], s++)
            CHECK(step(c, &m, 1, &id, &sched[s], &L, &d, out, &praw, &pq, 1) == OMNI_OK, "%s", omni_last_error());
        CHECK(praw == mr, "%s: worst step %lld -> %lld holds %lld raw pages, budget %lld", what, (long long)a0,
              (long long)a1, (long long)praw, (long long)mr);
        free(sched);
        free(out);
        kvd_free(&d);
        kv_free(c);
    }
    /* every moment of token-by-token growth and of random chunk schedules */
    int ones[1] = {1};
    grow(cf, &m, N, ones, 0, seed + 2, what);
    for (int t = 0; t < 3; t++) grow(cf, &m, N, NULL, 0, seed + 3 + t, what);
}

/* n sequences of N tokens in a cache made for them: pool <= n * budget bytes, worst and random schedules fit. */
static void test_pool_sizing(const cfg_t *cf, int n, int64_t N, uint64_t seed) {
    const model_t m = {is_quant_mode(cf->mode), cf->R, cf->S};
    kv_format lf[2];
    kv_params p = cfg_params(cf, lf, n * N, n, N);
    kv_budget b;
    kv_cache *c = NULL;
    CHECK(kv_budget_of(&p, N, &b) == OMNI_OK && kv_init(&p, &c) == OMNI_OK, "%s", omni_last_error());
    if (!c) return;
    kv_usage u;
    kv_get_usage(c, &u);
    CHECK(u.pool_bytes <= n * b.bytes, "%s R %d: pool %lld bytes > %d x %lld", cf->mode, cf->R,
          (long long)u.pool_bytes, n, (long long)b.bytes);
    CHECK(u.raw_pages_free >= n * b.raw_pages || u.raw_pages_free * 32 >= n * N,
          "%s: raw pool %lld pages < %d x %lld", cf->mode, (long long)u.raw_pages_free, n, (long long)b.raw_pages);
    int64_t *pk = malloc((size_t)(N + 1) * sizeof(int64_t)), a0, a1;
    m_peaks(&m, N, cf->C, pk, &a0, &a1);
    free(pk);
    kv_data d = kvd_make(NL, HQ, HKV, D, N, seed);
    float *out = malloc((size_t)(cf->C + 1) * HQ * D * 4);
    int ids[16], nn[16];
    int64_t pos[16] = {0}, praw = 0, pq = 0;
    rng_t r = {seed};
    for (int i = 0; i < n; i++) kv_seq_add(c, &ids[i]);
    /* round 0: one sequence per step, each along the worst schedule (chunks to a0, the worst step, then chunks),
     * taking turns; round 1: all sequences in every step with random chunks (<= C / n each) */
    for (int round = 0; round < 2; round++) {
        for (int s = 0;; s++) {
            int any = 0;
            for (int i = 0; i < n; i++) {
                int64_t want = pos[i] < a0 ? a0 - pos[i] : pos[i] == a0 ? a1 - a0 : N - pos[i];
                if (round == 1) want = 1 + (int64_t)(rng_next(&r) % (uint64_t)(cf->C / n));
                int64_t cap = round == 1 ? cf->C / n : cf->C;
                want = want > N - pos[i] ? N - pos[i] : want > cap ? cap : want;
                nn[i] = (int)want;
                any |= want > 0;
                if (round == 0 && want > 0) {
                    omni_status st = step(c, &m, 1, &ids[i], &nn[i], &pos[i], &d, out, &praw, &pq, 0);
                    CHECK(st == OMNI_OK, "%s R %d: sequence %d at %lld + %d: %s", cf->mode, cf->R, i,
                          (long long)pos[i], nn[i], omni_last_error());
                    pos[i] += st ? N : nn[i];
                }
            }
            if (!any) break;
            if (round == 0) continue;
            omni_status st = step(c, &m, n, ids, nn, pos, &d, out, &praw, &pq, 0);
            CHECK(st == OMNI_OK, "%s R %d: %d sequences, step %d: %s", cf->mode, cf->R, n, s, omni_last_error());
            if (st) break;
            for (int i = 0; i < n; i++) pos[i] += nn[i];
        }
        for (int i = 0; i < n; i++) kv_seq_clear(c, ids[i]), pos[i] = 0;
        kv_get_usage(c, &u);
        CHECK(u.raw_pages == 0 && u.quant_pages == 0, "pages back after clear");
    }
    free(out);
    kvd_free(&d);
    kv_free(c);
}

static void test_errors(void) {
    const cfg_t cf = {"int2", NULL, 32, 0, 64};
    kv_format lf[2];
    kv_params p = cfg_params(&cf, lf, 1000, 2, 300);
    kv_budget b;
    CHECK(kv_budget_of(&p, 301, &b) == OMNI_ERR_USAGE && strstr(omni_last_error(), "never fit"),
          "N > max_seq_len accepted: %s", omni_last_error());
    CHECK(kv_budget_of(&p, -1, &b) == OMNI_ERR_USAGE, "N < 0 accepted");
    CHECK(kv_budget_of(&p, 300, &b) == OMNI_OK, "%s", omni_last_error());
    p.max_seq_len = -5;
    CHECK(kv_budget_of(&p, 10, &b) == OMNI_ERR_USAGE, "negative max_seq_len accepted");
    p.max_seq_len = 0; /* = max_tokens */
    CHECK(kv_budget_of(&p, 1000, &b) == OMNI_OK && kv_budget_of(&p, 1001, &b) == OMNI_ERR_USAGE, "cap = max_tokens");
    p.max_seq_len = 300;
    kv_cache *c = NULL;
    CHECK(kv_init(&p, &c) == OMNI_OK, "%s", omni_last_error());
    CHECK(kv_seq_budget(c, 301, &b) == OMNI_ERR_USAGE, "cache budget beyond max_seq_len accepted");
    const model_t m = {1, 32, 0};
    kv_data d = kvd_make(NL, HQ, HKV, D, 400, 9);
    float *out = malloc(65 * HQ * D * 4);
    int id, n = 60;
    int64_t L = 0, pr = 0, pq = 0;
    kv_seq_add(c, &id);
    for (int s = 0; s < 5; s++, L += n) CHECK(step(c, &m, 1, &id, &n, &L, &d, out, &pr, &pq, 0) == OMNI_OK, "fill");
    n = 1;
    CHECK(step(c, &m, 1, &id, &n, &L, &d, out, &pr, &pq, 0) == OMNI_ERR_NOMEM && kv_seq_len(c, id) == 300,
          "beyond max_seq_len: %s", omni_last_error());
    free(out);
    kvd_free(&d);
    kv_free(c);
}

/* Real model shapes: bytes per sequence and how many sequences of N fit in 100 GiB (printed for the record). */
static void print_table(void) {
    const char *modes[] = {"bf16", "int2", "int4", "kivi2"};
    const int64_t lens[] = {4096, 32768, 131072};
    printf("Qwen3-VL-8B shapes (36 layers, 8 KV heads, D 128, R 128, max_chunk 2048): bytes per sequence (peak), "
           "sequences per 100 GiB\n");
    for (int mi = 0; mi < 4; mi++)
        for (int li = 0; li < 3; li++) {
            kv_params p = kv_default_params();
            kv_parse_mode(modes[mi], &p.fmt);
            p.n_layers = 36, p.n_kv_heads = 8, p.head_dim = 128, p.max_tokens = lens[li];
            kv_budget b;
            CHECK(kv_budget_of(&p, lens[li], &b) == OMNI_OK, "%s", omni_last_error());
            int64_t ex = 0;
            kv_step_extra_of(&p, &ex);
            printf("  %-6s N %6lld: %8.1f MiB peak (%lld raw + %lld quant pages), %8.1f MiB committed, %5lld seqs; "
                   "%8.1f MiB decode + a %.1f MiB step reserve: %5lld seqs\n",
                   modes[mi], (long long)lens[li], b.bytes / 1048576.0, (long long)b.raw_pages,
                   (long long)b.quant_pages, b.committed_bytes / 1048576.0,
                   (long long)(((int64_t)100 << 30) / b.bytes), b.decode_bytes / 1048576.0,
                   ex * b.raw_page_bytes / 1048576.0,
                   (long long)((((int64_t)100 << 30) - ex * b.raw_page_bytes) / b.decode_bytes));
        }
}

int main(void) {
    static const cfg_t cfgs[] = {
        {"f32", NULL, 128, 0, 2048}, {"bf16", NULL, 0, 0, 40},     {"bf16", NULL, 32, 5, 64},
        {"int2", NULL, 0, 0, 2048},  {"int2", NULL, 0, 0, 33},     {"int2", NULL, 32, 0, 40},
        {"int2", NULL, 128, 0, 2048}, {"int2", NULL, 128, 0, 31},  {"int2", NULL, 256, 0, 512},
        {"int2", NULL, 0, 1, 2048},  {"int2", NULL, 32, 4, 45},    {"int2", NULL, 128, 31, 200},
        {"int2", NULL, 64, 32, 1},   {"int4", NULL, 32, 0, 100},   {"int4", NULL, 128, 16, 2048},
        {"kivi2", NULL, 0, 0, 64},   {"kivi2", NULL, 128, 0, 96},  {"kivi4", NULL, 64, 2, 2048},
        {"k4v2", NULL, 32, 0, 2048}, {"k2v4", NULL, 96, 3, 50},    {"kivi-k4v2", NULL, 0, 8, 77},
        {"int2", "bf16", 32, 0, 2048}, {"int2", "f32", 128, 7, 60}, {"kivi2", "int4", 64, 0, 33},
    };
    uint64_t seed = 100;
    for (size_t i = 0; i < sizeof cfgs / sizeof cfgs[0]; i++, seed += 10) test_config(&cfgs[i], seed);
    printf("%lld committed states checked against the model and the budget\n", (long long)g_checked);
    const cfg_t ps[] = {{"int2", NULL, 128, 0, 512}, {"int2", NULL, 32, 4, 256}, {"bf16", NULL, 128, 0, 256},
                        {"kivi4", "bf16", 0, 0, 384}, {"k4v2", NULL, 64, 0, 96}};
    for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++, seed += 10) test_pool_sizing(&ps[i], 4, 330, seed);
    test_errors();
    print_table();
    return check_exit();
}
