/* fuzz_safetensors.c - the checkpoint reader (kernels/safetensors.c) on arbitrary files: the header length, the
 * JSON header, dtypes, shapes, offsets, overlaps, and model.safetensors.index.json with its shard names.
 * Input: byte 0 selects the layout - even: the rest is model.safetensors; odd: the rest is
 * "INDEX_JSON\n#\nSHARD_BYTES", written as model.safetensors.index.json and a.safetensors. Every tensor of an
 * opened checkpoint is looked up and its bytes read (they must lie inside the mapping: ASan would see it). */
#include "fuzz_util.h"

#include "kernels/safetensors.h"

volatile unsigned g_sink; /* the bytes read, so the reads are not optimized away */

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) {
    if (n < 1) return 0;
    const char *dir = fuzz_dir();
    fuzz_unlink(dir, "model.safetensors");
    fuzz_unlink(dir, "model.safetensors.index.json");
    fuzz_unlink(dir, "a.safetensors");
    if (d[0] & 1) {
        const uint8_t *sep = NULL;
        for (size_t i = 1; i + 3 <= n && !sep; i++)
            if (d[i] == '\n' && d[i + 1] == '#' && d[i + 2] == '\n') sep = d + i;
        size_t ni = sep ? (size_t)(sep - d) - 1 : n - 1;
        fuzz_write(dir, "model.safetensors.index.json", d + 1, ni);
        if (sep) fuzz_write(dir, "a.safetensors", sep + 3, n - (size_t)(sep + 3 - d));
    } else {
        fuzz_write(dir, "model.safetensors", d + 1, n - 1);
    }
    omni_ckpt *c = NULL;
    if (omni_ckpt_open(dir, &c) == OMNI_OK) {
        for (int i = 0; i < omni_ckpt_count(c); i++) {
            const omni_tensor *t = omni_ckpt_find(c, omni_ckpt_name(c, i));
            FUZZ_ASSERT(t != NULL);
            size_t bytes = (size_t)omni_tensor_numel(t) * omni_dtype_size(t->dtype);
            const uint8_t *p = t->data;
            if (bytes) g_sink += p[0] + p[bytes - 1];
            omni_tensor out;
            omni_ckpt_get(c, omni_ckpt_name(c, i), 0, NULL, &out);
        }
        omni_ckpt_free(c);
    }
    return 0;
}
