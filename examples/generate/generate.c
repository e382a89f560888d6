/* generate.c: greedy text generation in C with a pt2c-compiled decoder LM and its KV cache.
 *
 * The model is a transformers causal LM exported with its static KV cache
 * (TorchExportableModuleForDecoderOnlyLM, a dynamic number of tokens per call) and compiled with
 * `--name lm` (examples/generate/generate.py does both).  Its inputs are the token ids [1, n] and their
 * positions in the sequence [n]; its output the logits [1, n, vocab].  The cache lives in the workspace:
 * the prompt is one call (prefill, n tokens), then each new token is a call of one.
 *
 *   cc -std=c99 -O2 -I OUT generate.c OUT/lm.c -o generate -lm
 *   ./generate OUT/lm.weights 20 5 17 42 8        (20 new tokens after the prompt 5 17 42 8)
 *
 * Prints the new token ids, one line.  libc only; no allocation but the buffers below.
 */
#include "lm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *read_file(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    void *buf = NULL;
    long n;
    if (!f) return NULL;
    if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) > 0 && fseek(f, 0, SEEK_SET) == 0) {
        *size = (size_t)n;
        buf = malloc((*size + 63) / 64 * 64 + 64);
        if (buf && fread(buf, 1, *size, f) != *size) {
            free(buf);
            buf = NULL;
        }
    }
    fclose(f);
    return buf;
}

static int64_t argmax(const float *x, int64_t n)
{
    int64_t i, best = 0;
    for (i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

int main(int argc, char **argv)
{
    lm_ctx ctx;
    const lm_size_desc *size = lm_sizes();
    size_t wsize = 0, ws_bytes = (LM_WORKSPACE_BYTES + 63) / 64 * 64;
    void *weights, *ws;
    int64_t vocab = lm_outputs()[0].shape[2], n_new, n, pos = 0, i, next, *ids, *positions;
    float *logits;
    int rc;

    if (argc < 4) {
        fprintf(stderr, "usage: %s WEIGHTS N_NEW TOKEN...\n", argv[0]);
        return 2;
    }
    n_new = atol(argv[2]);
    n = argc - 3;
    if (n > size[0].max) {
        fprintf(stderr, "the prompt has %ld tokens; the model takes at most %ld per call\n", (long)n, (long)size[0].max);
        return 2;
    }
    weights = read_file(argv[1], &wsize);
    ws = malloc(ws_bytes + 64);  /* aligned by hand below: C99 has no aligned_alloc */
    ids = (int64_t *)malloc((size_t)n * sizeof(int64_t));
    positions = (int64_t *)malloc((size_t)n * sizeof(int64_t));
    logits = (float *)malloc((size_t)(n * vocab) * sizeof(float));
    if (!weights || !ws || !ids || !positions || !logits) {
        fprintf(stderr, "cannot read %s or allocate the buffers\n", argv[1]);
        return 1;
    }
    rc = lm_init(&ctx, weights, wsize, (void *)(((uintptr_t)ws + 63) & ~(uintptr_t)63), ws_bytes);
    if (rc != LM_OK) {
        fprintf(stderr, "lm_init: %s\n", lm_strerror(rc));
        return 1;
    }
    for (i = 0; i < n; i++) {  /* prefill: the whole prompt in one call */
        ids[i] = atol(argv[3 + i]);
        positions[i] = pos++;
    }
    for (i = 0; i < n_new; i++) {
        rc = lm_set_sizes(&ctx, &n);
        if (rc == LM_OK) rc = lm_run(&ctx, ids, positions, logits);
        if (rc != LM_OK) {
            fprintf(stderr, "lm_run: %s\n", lm_strerror(rc));
            return 1;
        }
        next = argmax(logits + (n - 1) * vocab, vocab);
        printf("%s%ld", i ? " " : "", (long)next);
        n = 1;  /* decode: one token per call, the cache holds the rest */
        ids[0] = next;
        positions[0] = pos++;
        if (pos >= size[0].max) break;  /* the cache is full (generate.py exports n up to its length) */
    }
    printf("\n");
    free(logits);
    free(positions);
    free(ids);
    free(ws);
    free(weights);
    return 0;
}
