/* mylib::scaled_gelu(Tensor x, float scale) -> Tensor: gelu(x) * scale, elementwise. */
#include <math.h>

#include "pt2c_custom_op.h"

int mylib_scaled_gelu(const pt2c_tensor *out, const pt2c_tensor *in, const pt2c_arg *args, void *scratch,
                      size_t scratch_bytes)
{
    const float *x = (const float *)in[0].data;
    float *y = (float *)out[0].data;
    const float scale = (float)args[0].f;
    int64_t i;
    (void)scratch;
    (void)scratch_bytes;
    if (in[0].dtype != PT2C_DTYPE_FLOAT32) return 1;
    for (i = 0; i < in[0].numel; i++)
        y[i] = 0.5f * x[i] * (1.0f + erff(x[i] * 0.70710678f)) * scale;
    return 0;
}
