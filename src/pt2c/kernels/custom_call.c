/* custom_call.c: calling users' kernels for custom ops (custom_ops/, docs/custom-ops.md).
 *
 * With -DPT2C_CHECKED_CALLS (pt2c verify --sanitize, with AddressSanitizer) every kernel gets its
 * inputs, outputs and scratch in heap buffers of exactly their size, so a kernel that reads or
 * writes past a tensor is caught, not just one that leaves the whole workspace.  Without it the
 * kernel is called directly on the planned buffers and nothing here is compiled.  The model's
 * translation unit includes custom_ops/pt2c_custom_op.h (the types) before this file.
 */

#if defined(PT2C_CHECKED_CALLS)
#include <stdlib.h>

typedef int (*pt2c_custom_fn)(const pt2c_tensor *, const pt2c_tensor *, const pt2c_arg *, void *, size_t);

static size_t pt2c_custom_nbytes(const pt2c_tensor *t)
{
    static const size_t item[] = {4, 8, 8, 4, 2, 1, 1, 1};
    return t->data && t->dtype >= 0 && t->dtype < 8 ? (size_t)t->numel * item[t->dtype] : 0;
}

/* copies of n tensors in exact-size buffers (inputs: their contents) */
static int pt2c_custom_copy(pt2c_tensor *dst, const pt2c_tensor *src, int n, int fill)
{
    int k;
    for (k = 0; k < n; k++) {
        size_t nb = pt2c_custom_nbytes(&src[k]);
        dst[k] = src[k];
        if (!src[k].data) continue;
        dst[k].data = malloc(nb ? nb : 1);
        if (!dst[k].data) return -1;
        if (fill && nb) memcpy(dst[k].data, src[k].data, nb);
    }
    return 0;
}

static int pt2c_checked_call(pt2c_custom_fn fn, const pt2c_tensor *out, int n_out, const pt2c_tensor *in, int n_in,
                             const pt2c_arg *args, size_t scratch_bytes)
{
    pt2c_tensor *o = (pt2c_tensor *)calloc((size_t)n_out + 1, sizeof(pt2c_tensor));
    pt2c_tensor *i = (pt2c_tensor *)calloc((size_t)n_in + 1, sizeof(pt2c_tensor));
    void *scratch = scratch_bytes ? malloc(scratch_bytes) : NULL;
    int k, status = -1;
    if (o && i && (scratch || !scratch_bytes) && pt2c_custom_copy(o, out, n_out, 0) == 0
            && pt2c_custom_copy(i, in, n_in, 1) == 0) {
        status = fn(o, n_in ? i : NULL, args, scratch, scratch_bytes);
        for (k = 0; k < n_out && status == 0; k++)
            memcpy(out[k].data, o[k].data, pt2c_custom_nbytes(&out[k]));
    }
    for (k = 0; o && k < n_out; k++)
        if (out[k].data) free(o[k].data);
    for (k = 0; i && k < n_in; k++)
        if (in[k].data) free(i[k].data);
    free(o);
    free(i);
    free(scratch);
    return status;
}
#endif
