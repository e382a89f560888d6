/* pt2c kernels: EmbeddingBag (torch.nn.functional.embedding_bag).
 *
 * out[b] = the sum (mode 0; each row times per_sample_weights[j] when given), mean (1) or max (2) of
 * the rows weight[indices[j]] for j in bag b = [offsets[b], offsets[b + 1]); the last bag runs to
 * num_indices, or is the last offset itself with include_last_offset.  Indices equal to padding_idx
 * are skipped (and not counted by the mean); an empty bag gives zeros.
 */
#ifndef PT2C_EMBEDDING_BAG_C
#define PT2C_EMBEDDING_BAG_C

#include "common.h"

/* 0, or 1 where torch raises: an index outside [0, num_weights), offsets that do not start at 0, go
 * down or past num_indices.  The inputs are checked before anything is written. */
PT2C_KERNEL int pt2c_embedding_bag(float *out, const float *weight, const int64_t *indices, const int64_t *offsets,
                                   const float *per_sample_weights, int num_indices, int num_bags, int num_weights,
                                   int D, int mode, int include_last_offset, long padding_idx)
{
    int b, j, d;
    if (num_bags > 0 && offsets[0] != 0) return 1;
    for (b = 0; b < num_bags + include_last_offset; b++)
        if (offsets[b] > num_indices || (b > 0 && offsets[b] < offsets[b - 1])) return 1;
    for (j = 0; j < num_indices; j++)
        if (indices[j] < 0 || indices[j] >= num_weights) return 1;

    PT2C_OMP(parallel for schedule(static) if ((long)num_indices * D > 65536))
    for (b = 0; b < num_bags; b++) {
        const int64_t end = b + 1 < num_bags || include_last_offset ? offsets[b + 1] : num_indices;
        float *o = out + (size_t)b * D;
        int count = 0;
        for (d = 0; d < D; d++) o[d] = 0.0f;
        for (j = (int)offsets[b]; j < end; j++) {
            const float *row = weight + (size_t)indices[j] * D;
            if (indices[j] == padding_idx) continue;
            if (mode == 2) {
                for (d = 0; d < D; d++) o[d] = count == 0 || row[d] > o[d] ? row[d] : o[d];
            } else {
                const float s = per_sample_weights ? per_sample_weights[j] : 1.0f;
                for (d = 0; d < D; d++) o[d] += s * row[d];
            }
            count++;
        }
        if (mode == 1 && count > 0)
            for (d = 0; d < D; d++) o[d] /= (float)count;
    }
    return 0;
}

#endif /* PT2C_EMBEDDING_BAG_C */
