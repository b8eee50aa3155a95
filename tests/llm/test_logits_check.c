/* test_logits_check.c - non-finite logits are detected (issue 15 item 12): op_count_nonfinite counts NaN/Inf and
 * finds the first; llm_logits_check turns them into OMNI_ERR_RUNTIME (exit 4) naming the position and token. */
#include <math.h>
#include <string.h>

#include "check.h"
#include "kernels/ops.h"
#include "llm/sampler.h"

int main(void) {
    enum { V = 1000, R = 3 };
    static float x[R * V];
    for (int i = 0; i < R * V; i++) x[i] = (float)(i % 17) - 8.f;
    int64_t first = 7;
    CHECK(op_count_nonfinite(x, R * V, &first) == 0 && first == -1, "finite: first %lld", (long long)first);
    CHECK(llm_logits_check(x, R, V) == OMNI_OK, "finite logits refused: %s", omni_last_error());
    x[V + 42] = NAN;
    x[2 * V + 5] = INFINITY;
    x[2 * V + 6] = -INFINITY;
    CHECK(op_count_nonfinite(x, R * V, &first) == 3 && first == V + 42, "count/first: %lld",
          (long long)first);
    omni_status st = llm_logits_check(x, R, V);
    CHECK(st == OMNI_ERR_RUNTIME && strstr(omni_last_error(), "3 non-finite logits") &&
              strstr(omni_last_error(), "position 1, token 42"), "message: %s", omni_last_error());
    CHECK(llm_logits_check(x, 1, V) == OMNI_OK, "row 0 alone is finite");
    CHECK(llm_logits_check(x + 2 * V, 1, V) == OMNI_ERR_RUNTIME && strstr(omni_last_error(), "2 non-finite"),
          "row 2: %s", omni_last_error());
    return check_exit();
}
