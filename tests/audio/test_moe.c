/* test_moe.c - llm_moe_forward vs a naive per-token fp64 implementation (router softmax, top-k with lower index
 * first on ties, renormalisation, per-expert SwiGLU, weighted sum) on random data: f32 and bf16 weights,
 * T = 1..65, top-k 1..E, norm_topk_prob on/off; plus exact tie handling (equal router rows) and the routing trace (chosen experts, margins).  */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kernels/ops.h"
#include "llm/moe.h"
#include "util.h"

static uint64_t rng = 88172645463325252ull;
static float frand(void) { /* xorshift64 -> [-1, 1) */
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((rng >> 11) * (1.0 / 9007199254740992.0) * 2.0 - 1.0);
}

typedef struct {
    int E, k, H, I, norm;
    omni_dtype dt;
    void *router, *gate, *up, *down; /* contiguous [E,H] / [E][I,H] / [E][I,H] / [E][H,I] */
    omni_tensor trouter, *tgate, *tup, *tdown;
    llm_moe m;
} moe_case;

static void *make_w(int64_t n, omni_dtype dt, float scale) {
    void *p = malloc(n * omni_dtype_size(dt));
    for (int64_t i = 0; i < n; i++) {
        float v = scale * frand();
        if (dt == OMNI_F32) ((float *)p)[i] = v;
        else ((uint16_t *)p)[i] = omni_f32_to_bf16(v);
    }
    return p;
}

static void case_init(moe_case *c, int E, int k, int H, int I, int norm, omni_dtype dt) {
    memset(c, 0, sizeof *c);
    c->E = E, c->k = k, c->H = H, c->I = I, c->norm = norm, c->dt = dt;
    size_t es = omni_dtype_size(dt);
    c->router = make_w((int64_t)E * H, dt, 1.0f);
    c->gate = make_w((int64_t)E * I * H, dt, 0.3f);
    c->up = make_w((int64_t)E * I * H, dt, 0.3f);
    c->down = make_w((int64_t)E * H * I, dt, 0.3f);
    c->trouter = omni_tensor_make(c->router, dt, 2, (int64_t[]){E, H});
    c->tgate = malloc(sizeof(omni_tensor) * E);
    c->tup = malloc(sizeof(omni_tensor) * E);
    c->tdown = malloc(sizeof(omni_tensor) * E);
    for (int e = 0; e < E; e++) {
        c->tgate[e] = omni_tensor_make((char *)c->gate + (size_t)e * I * H * es, dt, 2, (int64_t[]){I, H});
        c->tup[e] = omni_tensor_make((char *)c->up + (size_t)e * I * H * es, dt, 2, (int64_t[]){I, H});
        c->tdown[e] = omni_tensor_make((char *)c->down + (size_t)e * H * I * es, dt, 2, (int64_t[]){H, I});
    }
    c->m = (llm_moe){.router = c->trouter, .gate = c->tgate, .up = c->tup, .down = c->tdown, .n_experts = E,
                     .top_k = k, .inter = I, .hidden = H, .norm_topk_prob = norm};
}

static void case_free(moe_case *c) {
    free(c->router), free(c->gate), free(c->up), free(c->down), free(c->tgate), free(c->tup), free(c->tdown);
}

static double wget(const moe_case *c, const void *base, int64_t i) { return omni_get_f32(base, c->dt, i); }

/* Naive fp64 MoE for one token (router probabilities rounded to f32 before top-k, like the f32 softmax). */
static void naive(const moe_case *c, const float *x, double *y) {
    int E = c->E, H = c->H, I = c->I;
    double *p = malloc(sizeof(double) * E), mx = -1e300, s = 0;
    for (int e = 0; e < E; e++) {
        double a = 0;
        for (int h = 0; h < H; h++) a += wget(c, c->router, (int64_t)e * H + h) * x[h];
        p[e] = a;
        if (a > mx) mx = a;
    }
    for (int e = 0; e < E; e++) s += (p[e] = exp(p[e] - mx));
    for (int e = 0; e < E; e++) p[e] /= s;
    int *sel = malloc(sizeof(int) * c->k);
    char *used = calloc(E, 1);
    double wsum = 0;
    for (int j = 0; j < c->k; j++) { /* largest, lower index first on ties */
        int b = -1;
        for (int e = 0; e < E; e++)
            if (!used[e] && (b < 0 || p[e] > p[b])) b = e;
        used[b] = 1;
        sel[j] = b;
        wsum += p[b];
    }
    memset(y, 0, sizeof(double) * H);
    double *hid = malloc(sizeof(double) * I);
    for (int j = 0; j < c->k; j++) {
        int e = sel[j];
        double w = c->norm ? p[e] / wsum : p[e];
        for (int i = 0; i < I; i++) {
            double g = 0, u = 0;
            for (int h = 0; h < H; h++) {
                g += wget(c, c->gate, ((int64_t)e * I + i) * H + h) * x[h];
                u += wget(c, c->up, ((int64_t)e * I + i) * H + h) * x[h];
            }
            hid[i] = g / (1 + exp(-g)) * u;
        }
        for (int h = 0; h < H; h++) {
            double o = 0;
            for (int i = 0; i < I; i++) o += wget(c, c->down, ((int64_t)e * H + h) * I + i) * hid[i];
            y[h] += w * o;
        }
    }
    free(p), free(sel), free(used), free(hid);
}

static void check_random(int E, int k, int H, int I, int norm, omni_dtype dt, int T) {
    moe_case c;
    case_init(&c, E, k, H, I, norm, dt);
    float *x = malloc(sizeof(float) * T * H), *y = malloc(sizeof(float) * T * H);
    for (int i = 0; i < T * H; i++) x[i] = frand();
    float *scratch = malloc(sizeof(float) * llm_moe_scratch_floats(&c.m, T));
    llm_moe_forward(&c.m, y, x, T, scratch);
    double *ref = malloc(sizeof(double) * H), maxd = 0, maxr = 0;
    for (int t = 0; t < T; t++) {
        naive(&c, x + (size_t)t * H, ref);
        for (int h = 0; h < H; h++) {
            double d = fabs(y[(size_t)t * H + h] - ref[h]);
            if (!(d <= maxd)) maxd = d;
            if (fabs(ref[h]) > maxr) maxr = fabs(ref[h]);
        }
    }
    CHECK(maxd <= 1e-5 * maxr + 1e-7, "E %d k %d H %d I %d norm %d %s T %d: max|d| %g (max|ref| %g)", E, k, H, I,
          norm, omni_dtype_name(dt), T, maxd, maxr);
    free(x), free(y), free(scratch), free(ref);
    case_free(&c);
}

/* All router rows equal -> uniform probabilities -> torch.topk picks experts 0..k-1; each gets weight 1/k
 * (normalised) or 1/E. Compare with running only those experts by hand. */
static void check_ties(void) {
    enum { E = 6, H = 16, I = 8, T = 5 };
    for (int k = 1; k <= 3; k++) {
        moe_case c;
        case_init(&c, E, k, H, I, 1, OMNI_F32);
        for (int e = 1; e < E; e++) memcpy((float *)c.router + e * H, c.router, sizeof(float) * H);
        float x[T * H], y[T * H], ref[T * H], g[I], u[I], o[H];
        for (int i = 0; i < T * H; i++) x[i] = frand();
        float *scratch = malloc(sizeof(float) * llm_moe_scratch_floats(&c.m, T));
        llm_moe_forward(&c.m, y, x, T, scratch);
        memset(ref, 0, sizeof ref);
        for (int t = 0; t < T; t++)
            for (int e = 0; e < k; e++) {
                op_linear(g, x + t * H, 1, &c.tgate[e], NULL);
                op_linear(u, x + t * H, 1, &c.tup[e], NULL);
                op_silu_mul(g, g, u, I);
                op_linear(o, g, 1, &c.tdown[e], NULL);
                for (int h = 0; h < H; h++) ref[t * H + h] += o[h] / k;
            }
        double d = max_abs_diff(y, ref, T * H);
        CHECK(d <= 1e-6 * max_abs(ref, T * H), "ties, k %d: max|d| %g (experts 0..k-1 expected)", k, d);
        free(scratch);
        case_free(&c);
    }
}

/* The routing trace (moe.h, trace_sel): the first cap tokens' top-k experts in order and the margin
 * log p_k - log p_(k+1), which equals the gap of the router logits (recomputed here in double); INFINITY when
 * every expert is chosen; 0 on exact ties. Tokens past cap are not recorded. */
static void check_trace(int E, int k, int T, int cap) {
    enum { H = 24, I = 8 };
    moe_case c;
    case_init(&c, E, k, H, I, 1, OMNI_F32);
    float *x = malloc(sizeof(float) * T * H), *y = malloc(sizeof(float) * T * H);
    for (int i = 0; i < T * H; i++) x[i] = frand();
    int32_t *sel = malloc(sizeof(int32_t) * (cap + 1) * k);
    float *margin = malloc(sizeof(float) * (cap + 1));
    for (int i = 0; i < (cap + 1) * k; i++) sel[i] = -7;
    margin[cap] = -7.f; /* canary past cap */
    c.m.trace_sel = sel, c.m.trace_margin = margin, c.m.trace_cap = cap;
    float *scratch = malloc(sizeof(float) * llm_moe_scratch_floats(&c.m, T));
    llm_moe_forward(&c.m, y, x, T, scratch);
    for (int t = 0; t < cap && t < T; t++) {
        double l[64];
        int ord[64];
        for (int e = 0; e < E; e++) {
            l[e] = 0;
            for (int h = 0; h < H; h++) l[e] += (double)((float *)c.router)[e * H + h] * x[t * H + h];
            int i = e; /* insertion into descending order */
            while (i > 0 && l[ord[i - 1]] < l[e]) ord[i] = ord[i - 1], i--;
            ord[i] = e;
        }
        for (int j = 0; j < k; j++)
            CHECK(sel[t * k + j] == ord[j], "trace E %d k %d token %d choice %d: %d, expected %d", E, k, t, j,
                  sel[t * k + j], ord[j]);
        const double want = k == E ? INFINITY : l[ord[k - 1]] - l[ord[k]];
        CHECK(k == E ? isinf(margin[t]) && margin[t] > 0 : fabs(margin[t] - want) <= 1e-4 * (1 + fabs(want)),
              "trace E %d k %d token %d: margin %g, expected %g", E, k, t, margin[t], want);
    }
    CHECK(margin[cap] == -7.f && sel[cap * k] == -7, "trace wrote past its cap of %d tokens", cap);
    /* exact ties: all router rows equal */
    for (int e = 1; e < E; e++) memcpy((float *)c.router + e * H, c.router, sizeof(float) * H);
    llm_moe_forward(&c.m, y, x, T, scratch);
    if (k < E) CHECK(margin[0] == 0.f, "tied experts: margin %g", margin[0]);
    free(x), free(y), free(sel), free(margin), free(scratch);
    case_free(&c);
}

int main(void) {
    const int Ts[] = {1, 2, 7, 33, 65};
    for (size_t i = 0; i < sizeof Ts / sizeof Ts[0]; i++) {
        check_random(8, 2, 64, 32, 1, OMNI_F32, Ts[i]);
        check_random(8, 4, 48, 24, 1, OMNI_BF16, Ts[i]);
        check_random(16, 8, 40, 16, 0, OMNI_BF16, Ts[i]);
        check_random(5, 5, 24, 8, 1, OMNI_F32, Ts[i]); /* every expert selected */
        check_random(8, 1, 32, 16, 0, OMNI_F32, Ts[i]);
    }
    check_ties();
    check_trace(8, 2, 7, 7);
    check_trace(16, 4, 33, 20); /* more tokens than the trace holds */
    check_trace(5, 5, 3, 3);    /* every expert chosen */
    check_trace(6, 1, 1, 4);
    return check_exit();
}
