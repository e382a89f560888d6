/* mylib::minmax(Tensor x) -> (Tensor, Tensor): each row's minimum (out[0]) and maximum (out[1]). */
#include "pt2c_custom_op.h"

int mylib_minmax(const pt2c_tensor *out, const pt2c_tensor *in, const pt2c_arg *args, void *scratch,
                 size_t scratch_bytes)
{
    const float *x = (const float *)in[0].data;
    float *lo = (float *)out[0].data, *hi = (float *)out[1].data;
    const int64_t d = in[0].sizes[in[0].ndim - 1], rows = out[0].numel;
    int64_t r, j;
    (void)args;
    (void)scratch;
    (void)scratch_bytes;
    if (in[0].dtype != PT2C_DTYPE_FLOAT32 || d < 1) return 1;
    for (r = 0; r < rows; r++) {
        float a = x[r * d], b = x[r * d];
        for (j = 1; j < d; j++) {
            a = x[r * d + j] < a ? x[r * d + j] : a;
            b = x[r * d + j] > b ? x[r * d + j] : b;
        }
        lo[r] = a;
        hi[r] = b;
    }
    return 0;
}
