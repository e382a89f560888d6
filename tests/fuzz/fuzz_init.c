/* libFuzzer + ASan/UBSan harness for a model's <name>_init (weights-blob loader).
 * Not part of CI.  With an artifact compiled as `pt2c compile ... --name mlp -o out/`
 * (another model: change the five lines after the includes):
 *
 *   clang -g -O1 -std=c99 -fsanitize=fuzzer,address,undefined -Iout \
 *       tests/fuzz/fuzz_init.c out/mlp.c -lm -o fuzz_init
 *   mkdir -p corpus && cp out/mlp.weights corpus/
 *   ./fuzz_init -max_total_time=120 -max_len=$(( $(stat -c %s out/mlp.weights) + 4096 )) corpus
 *
 * Each input is copied into an exact-size heap buffer, so any read past the end of the
 * blob is an ASan error; init must return a known status, and a blob it accepts must run. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mlp.h"
#define MODEL mlp
#define NUM_INPUTS MLP_NUM_INPUTS
#define NUM_OUTPUTS MLP_NUM_OUTPUTS
#define WORKSPACE_BYTES MLP_WORKSPACE_BYTES
#define WORKSPACE_ALIGN MLP_WORKSPACE_ALIGN

#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
#define FN(s) CAT(MODEL, s)

static unsigned char workspace[WORKSPACE_BYTES] __attribute__((aligned(WORKSPACE_ALIGN)));

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    FN(_ctx) ctx;
    unsigned char *buf = (unsigned char *)malloc(size ? size : 1);
    int rc;
    memcpy(buf, data, size);
    rc = FN(_init)(&ctx, buf, size, workspace);
    if (rc < 0 || rc > 10) abort();
    if (rc == 0) {
        /* an accepted blob must run (inputs: zeros) */
        const FN(_tensor_desc) *in = FN(_inputs)(), *out = FN(_outputs)();
        const void *ins[NUM_INPUTS + 1] = {0};
        void *outs[NUM_OUTPUTS] = {0};
        int i;
        for (i = 0; i < NUM_INPUTS; i++) ins[i] = calloc(1, in[i].nbytes);
        for (i = 0; i < NUM_OUTPUTS; i++) outs[i] = calloc(1, out[i].nbytes);
        if (FN(_run_v)(&ctx, ins, outs) != 0) abort();
        for (i = 0; i < NUM_INPUTS; i++) free((void *)ins[i]);
        for (i = 0; i < NUM_OUTPUTS; i++) free(outs[i]);
    }
    free(buf);
    return 0;
}
