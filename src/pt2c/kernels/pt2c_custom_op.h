/* pt2c_custom_op.h: the types of a user kernel for a custom op (see docs/custom-ops.md).
 *
 * A custom op ns::op is implemented by one C function with this fixed prototype:
 *
 *     int ns_op(const pt2c_tensor *out, const pt2c_tensor *in, const pt2c_arg *args,
 *               void *scratch, size_t scratch_bytes);
 *
 * in:      the op's tensor arguments in schema order (a Tensor[] argument: each element; an absent
 *          Tensor? argument: an entry with data == NULL and ndim == -1); read only.
 * out:     its tensor results, allocated by the model (sizes and dtypes from the export); write them.
 * args:    its other arguments in schema order, as the export recorded them (NULL when it has none).
 * scratch: scratch_bytes bytes, 64-byte aligned, for the kernel's own use (NULL and 0 unless asked for
 *          with a "pt2c: scratch = <expression>" comment or register_kernel(..., scratch=...)).
 * Return 0, or another value to make the model's run return <NAME>_ERR_CUSTOM_OP.
 *
 * Inputs and outputs never share memory.  Tensors are dense and row-major (C-contiguous).  The
 * kernel is compiled into the model's translation unit (once per code path of a multi-versioned
 * artifact): helper functions in the kernel file must be static.
 */
#ifndef PT2C_CUSTOM_OP_H
#define PT2C_CUSTOM_OP_H

#include <stddef.h>
#include <stdint.h>

/* dtype codes: the same as the model's <NAME>_DTYPE_* */
#define PT2C_DTYPE_FLOAT32 0
#define PT2C_DTYPE_FLOAT64 1
#define PT2C_DTYPE_INT64 2
#define PT2C_DTYPE_INT32 3
#define PT2C_DTYPE_INT16 4
#define PT2C_DTYPE_INT8 5
#define PT2C_DTYPE_UINT8 6
#define PT2C_DTYPE_BOOL 7

typedef struct pt2c_tensor {
    void *data;
    const int64_t *sizes; /* ndim entries */
    int32_t ndim;
    int32_t dtype;        /* PT2C_DTYPE_* */
    int64_t numel;        /* the product of sizes (1 for a 0-d tensor) */
} pt2c_tensor;

/* what an argument held */
#define PT2C_ARG_NONE 0
#define PT2C_ARG_INT 1    /* i (f: the same value) */
#define PT2C_ARG_FLOAT 2  /* f (i: truncated) */
#define PT2C_ARG_BOOL 3   /* i: 0 or 1 (f: the same value) */
#define PT2C_ARG_STR 4    /* s */
#define PT2C_ARG_INTS 5   /* n, ints (int[] and bool[]) */
#define PT2C_ARG_FLOATS 6 /* n, floats */

typedef struct pt2c_arg {
    int32_t kind;        /* PT2C_ARG_* */
    int64_t i;
    double f;
    int64_t n;           /* list length */
    const int64_t *ints;
    const double *floats;
    const char *s;
} pt2c_arg;

#endif /* PT2C_CUSTOM_OP_H */
