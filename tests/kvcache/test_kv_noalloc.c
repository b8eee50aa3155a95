/* test_kv_noalloc.c - kv_forward / kv_commit never allocate in steady state (prefill chunks and decode steps,
 * several sequences, quantizing and raw formats). malloc/calloc/realloc/aligned_alloc of the test and the static
 * kvcache/kernels libraries are wrapped at link time (-Wl,--wrap) and counted while the steps run. */
#include <stdio.h>
#include <stdlib.h>

#include "check.h"
#include "kv_test_util.h"

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t m);
void *__real_realloc(void *p, size_t n);
void *__real_aligned_alloc(size_t a, size_t n);
static int counting, n_alloc;
void *__wrap_malloc(size_t n) { n_alloc += counting; return __real_malloc(n); }
void *__wrap_calloc(size_t n, size_t m) { n_alloc += counting; return __real_calloc(n, m); }
void *__wrap_realloc(void *p, size_t n) { n_alloc += counting; return __real_realloc(p, n); }
void *__wrap_aligned_alloc(size_t a, size_t n) { n_alloc += counting; return __real_aligned_alloc(a, n); }

int main(void) {
    const char *modes[] = {"int2", "f32", "kivi4"};
    kv_data d = kvd_make(2, 4, 2, 64, 400, 3);
    float *out = malloc(sizeof(float) * 400 * 4 * 64);
    for (int m = 0; m < 3; m++) {
        counting = 1, n_alloc = 0;
        kv_cache *c = kvt_cache(modes[m], 32, m == 0 ? 4 : 0, 2, 2, 64, 1000, 2, 256);
        counting = 0;
        CHECK(c != NULL && n_alloc > 0, "%s: kv_init must allocate (%d) - the counter works", modes[m], n_alloc);
        int ids[2], n[2] = {1, 1};
        kv_seq_add(c, &ids[0]);
        kv_seq_add(c, &ids[1]);
        counting = 1, n_alloc = 0;
        for (int step = 0; step < 60; step++) {
            n[0] = step % 10 == 0 ? 37 : 1; /* prefill-sized chunks now and then */
            n[1] = step % 7 == 3 ? 0 : 2;
            for (int l = 0; l < 2; l++)
                CHECK(kv_forward(c, l, 2, ids, n, d.q, d.k, d.v, out, 4, 0.125f) == OMNI_OK, "%s", omni_last_error());
            CHECK(kv_commit(c, 2, ids, n) == OMNI_OK, "%s", omni_last_error());
            if (step == 30) kv_seq_clear(c, ids[1]);
        }
        counting = 0;
        printf("%-6s: %d allocations in 60 steps (lengths %lld, %lld)\n", modes[m], n_alloc,
               (long long)kv_seq_len(c, ids[0]), (long long)kv_seq_len(c, ids[1]));
        CHECK(n_alloc == 0, "%s: %d allocations in steady state", modes[m], n_alloc);
        kv_free(c);
    }
    free(out);
    kvd_free(&d);
    return check_exit();
}
