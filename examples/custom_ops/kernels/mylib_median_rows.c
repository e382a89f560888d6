/* mylib::median_rows(Tensor x) -> Tensor: the lower median of each row (torch.median's choice).
 * The row is sorted in scratch, sized here:
 * pt2c: scratch = inputs[0].shape[-1] * inputs[0].itemsize
 */
#include "pt2c_custom_op.h"

static void insertion_sort(float *v, int64_t n)
{
    int64_t i, j;
    for (i = 1; i < n; i++) {
        float key = v[i];
        for (j = i - 1; j >= 0 && v[j] > key; j--) v[j + 1] = v[j];
        v[j + 1] = key;
    }
}

int mylib_median_rows(const pt2c_tensor *out, const pt2c_tensor *in, const pt2c_arg *args, void *scratch,
                      size_t scratch_bytes)
{
    const float *x = (const float *)in[0].data;
    float *y = (float *)out[0].data, *row = (float *)scratch;
    const int64_t d = in[0].sizes[in[0].ndim - 1], rows = out[0].numel;
    int64_t r, j;
    (void)args;
    if (in[0].dtype != PT2C_DTYPE_FLOAT32 || d < 1 || scratch_bytes < (size_t)d * sizeof(float)) return 1;
    for (r = 0; r < rows; r++) {
        for (j = 0; j < d; j++) row[j] = x[r * d + j];
        insertion_sort(row, d);
        y[r] = row[(d - 1) / 2];
    }
    return 0;
}
