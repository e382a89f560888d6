/* mylib::rms_norm(Tensor x, Tensor weight, float eps) -> Tensor: x / sqrt(mean(x^2) + eps) * weight over
 * the last dim, in one pass per row (the fused form of a transformers RMSNorm). */
#include <math.h>

#include "pt2c_custom_op.h"

int mylib_rms_norm(const pt2c_tensor *out, const pt2c_tensor *in, const pt2c_arg *args, void *scratch,
                   size_t scratch_bytes)
{
    const float *x = (const float *)in[0].data, *w = (const float *)in[1].data;
    float *y = (float *)out[0].data;
    const int64_t d = in[0].sizes[in[0].ndim - 1], rows = d ? in[0].numel / d : 0;
    const float eps = (float)args[0].f;
    int64_t r, j;
    (void)scratch;
    (void)scratch_bytes;
    if (in[0].dtype != PT2C_DTYPE_FLOAT32 || in[1].numel != d) return 1;
    for (r = 0; r < rows; r++) {
        const float *xr = x + r * d;
        float *yr = y + r * d;
        float ss = 0.0f, inv;
        for (j = 0; j < d; j++) ss += xr[j] * xr[j];
        inv = 1.0f / sqrtf(ss / (float)d + eps);
        for (j = 0; j < d; j++) yr[j] = xr[j] * inv * w[j];
    }
    return 0;
}
