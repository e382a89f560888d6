/* libFuzzer + ASan + UBSan harness for the C API of a generated model: <name>_init_checked
 * (the weights-blob loader) and <name>_run_v (the kernels, fed fuzzed inputs, index inputs included).
 *
 * The model is tests/fuzz/capi_model.py's (compiled as `fz`: an embedding, a conv1d, a linear
 * layer, a layer norm, x[:, pos], a softmax and a gather; three int64 index inputs).  CI runs it
 * through tests/test_fuzz_capi.py (fixed short budget); a longer campaign:
 *
 *   python3 tests/fuzz/capi_model.py --seconds 300      (builds into /tmp/pt2c-fuzz-capi, runs, reports)
 *
 * or by hand (what that script runs; out/ from `python3 tests/fuzz/capi_model.py --work W --build-only`
 * or any `pt2c compile ... --name fz --target generic -o out/`, then adapt INDEX_RULES below):
 *
 *   clang -g -O1 -std=c99 -DPT2C_NO_SIMD -Wno-unknown-pragmas -fsanitize=fuzzer,address,undefined \
 *       -fno-sanitize-recover=undefined -Iout tests/fuzz/fuzz_capi.c out/fz.c -lm -o fuzz_capi
 *   FUZZ_CAPI_WEIGHTS=out/fz.weights ./fuzz_capi -seed=1 -max_len=8192 -max_total_time=300 \
 *       work_corpus/ tests/fuzz/corpus/capi/
 *
 * One fuzz input:  [1 byte param][the input tensors, in <name>_inputs() order, 440 bytes for
 * this model, zero-padded when short][the weights blob: every remaining byte].  With bit 7 of param
 * set and FUZZ_CAPI_WEIGHTS naming the model's .weights file, the blob is that file instead (the
 * tail is ignored): most mutations of such an input land in the tensors, so the kernels get the
 * executions (a raw blob rarely survives a mutation: its CRC).  The blob is copied into an
 * exact-size heap buffer (64-byte aligned), as are the workspace, every input and every output,
 * so any read or write past an end is an ASan report.
 *
 * Per input, with the status codes the header documents (abort() on any other):
 *   - init: NULL ctx / weights / workspace -> ERR_NULL_ARG; a wrong header signature ->
 *     ERR_SIGNATURE; a workspace one byte or more short -> ERR_WORKSPACE_SIZE; misaligned
 *     weights or workspace -> ERR_ALIGN; the fuzzed blob -> OK or a weights error (3..7), OK
 *     only for a blob of at least WEIGHTS_BYTES;
 *   - after a failed init: isa() is NULL and run -> ERR_NOT_INITIALIZED;
 *   - after a successful init: NULL ctx / array / any entry -> ERR_NULL_ARG; run on the fuzzed
 *     inputs -> OK exactly when every index is in the range PyTorch accepts (INDEX_RULES), else
 *     ERR_INDEX; a second run over a workspace filled with another byte gives the same status
 *     and bit-identical outputs (no kernel reads scratch it did not write);
 *   - strerror of any int is a string.
 */
#define _POSIX_C_SOURCE 200112L /* posix_memalign */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef MODEL_HEADER
#define MODEL_HEADER "fz.h"
#endif
#include MODEL_HEADER

#ifndef MODEL
#define MODEL fz
#define MODEL_UC FZ
#endif

/* Model-specific: which inputs are indices and the range of values PyTorch accepts for each
 * (embedding and gather refuse negatives; x[:, pos] wraps them). */
static const struct {
    int input;
    int64_t lo, hi; /* valid: lo <= v < hi */
} INDEX_RULES[] = {{1, 0, 16}, {2, -4, 4}, {3, 0, 8}};

#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
#define FN(s) CAT(MODEL, s)
#define K(s) CAT(MODEL_UC, s)

#define NUM_INPUTS K(_NUM_INPUTS)
#define NUM_OUTPUTS K(_NUM_OUTPUTS)
#define WS_BYTES ((size_t)K(_WORKSPACE_BYTES))
#define WS_ALIGN K(_WORKSPACE_ALIGN)
#define SIGNATURE K(_SIGNATURE)

#define CHECK(cond)                                                                   \
    do {                                                                              \
        if (!(cond)) {                                                                \
            fprintf(stderr, "fuzz_capi: line %d: check failed: %s\n", __LINE__, #cond);   \
            abort();                                                                  \
        }                                                                             \
    } while (0)
#define EXPECT(call, want)                                                                           \
    do {                                                                                             \
        int rc_ = (call);                                                                            \
        if (rc_ != (want)) {                                                                         \
            fprintf(stderr, "fuzz_capi: line %d: %s returned %d (%s), expected %d (%s)\n", __LINE__, #call, \
                    rc_, FN(_strerror)(rc_), (int)(want), FN(_strerror)(want));                     \
            abort();                                                                                 \
        }                                                                                            \
    } while (0)

static size_t input_bytes[NUM_INPUTS], output_bytes[NUM_OUTPUTS], all_input_bytes;
static unsigned char *ref_blob; /* FUZZ_CAPI_WEIGHTS's bytes, or NULL */
static size_t ref_size;

/* An exact-size, 64-byte aligned heap buffer (ASan catches a one-byte over-read). */
static void *exact(size_t n)
{
    void *p = NULL;
    if (posix_memalign(&p, 64, n ? n : 1) != 0) abort();
    return p;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    const FN(_tensor_desc) *in = FN(_inputs)(), *out = FN(_outputs)();
    size_t r;
    int i;
    const char *ref = getenv("FUZZ_CAPI_WEIGHTS");
    (void)argc;
    (void)argv;
    if (ref && *ref) {
        FILE *f = fopen(ref, "rb");
        long n;
        CHECK(f != NULL && fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) > 0 && fseek(f, 0, SEEK_SET) == 0);
        ref_size = (size_t)n;
        ref_blob = (unsigned char *)malloc(ref_size);
        CHECK(ref_blob != NULL && fread(ref_blob, 1, ref_size, f) == ref_size);
        fclose(f);
    }
    CHECK(FN(_num_inputs)() == NUM_INPUTS && FN(_num_outputs)() == NUM_OUTPUTS);
    CHECK(FN(_signature)() == SIGNATURE && FN(_abi_version)() == K(_ABI_VERSION));
    CHECK(FN(_workspace_size)() == WS_BYTES && FN(_weights_size)() == K(_WEIGHTS_BYTES));
    for (i = 0; i < NUM_INPUTS; i++) all_input_bytes += input_bytes[i] = in[i].nbytes;
    for (i = 0; i < NUM_OUTPUTS; i++) output_bytes[i] = out[i].nbytes;
    for (r = 0; r < sizeof INDEX_RULES / sizeof INDEX_RULES[0]; r++) /* the model is the one INDEX_RULES describes */
        CHECK(INDEX_RULES[r].input < NUM_INPUTS && in[INDEX_RULES[r].input].dtype == K(_DTYPE_INT64));
    return 0;
}

static int indices_valid(const void *const *ins)
{
    size_t r, j;
    for (r = 0; r < sizeof INDEX_RULES / sizeof INDEX_RULES[0]; r++) {
        const int64_t *v = (const int64_t *)ins[INDEX_RULES[r].input];
        for (j = 0; j < input_bytes[INDEX_RULES[r].input] / sizeof(int64_t); j++)
            if (v[j] < INDEX_RULES[r].lo || v[j] >= INDEX_RULES[r].hi) return 0;
    }
    return 1;
}

static int is_weights_error(int rc)
{
    return rc == K(_ERR_WEIGHTS_TRUNCATED) || rc == K(_ERR_WEIGHTS_MAGIC) || rc == K(_ERR_WEIGHTS_VERSION) ||
           rc == K(_ERR_WEIGHTS_MISMATCH) || rc == K(_ERR_WEIGHTS_CORRUPT);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    FN(_ctx) ctx;
    const unsigned param = size ? data[0] : 0;
    const uint8_t *tensors = size ? data + 1 : data;
    size_t avail = size ? size - 1 : 0, n_weights, off = 0, short_ws;
    const void *ins[NUM_INPUTS];
    void *outs[NUM_OUTPUTS], *first[NUM_OUTPUTS];
    const void *bad_ins[NUM_INPUTS];
    void *bad_outs[NUM_OUTPUTS];
    unsigned char *weights, *ws, *ws_short, *shifted;
    const uint64_t wrong_sig = SIGNATURE ^ ((uint64_t)1 << (param % 64));
    int i, rc, rc2;

    /* strerror: any int gives a string */
    CHECK(FN(_strerror)((int)(int8_t)param) != NULL && strlen(FN(_strerror)((int)(int8_t)param)) > 0);
    CHECK(FN(_strerror)(-2147483647 - 1) != NULL && FN(_strerror)(2147483647) != NULL);

    /* the inputs: fixed-size region, zero-padded; the weights: the rest */
    for (i = 0; i < NUM_INPUTS; i++) {
        unsigned char *p = (unsigned char *)exact(input_bytes[i]);
        size_t take = avail > off ? (avail - off < input_bytes[i] ? avail - off : input_bytes[i]) : 0;
        memset(p, 0, input_bytes[i]);
        if (take) memcpy(p, tensors + off, take);
        off += input_bytes[i];
        ins[i] = p;
    }
    for (i = 0; i < NUM_OUTPUTS; i++) {
        outs[i] = exact(output_bytes[i]);
        first[i] = exact(output_bytes[i]);
    }
    if ((param & 0x80) && ref_blob) {
        n_weights = ref_size;
        weights = (unsigned char *)exact(n_weights);
        memcpy(weights, ref_blob, n_weights);
    } else {
        n_weights = avail > all_input_bytes ? avail - all_input_bytes : 0;
        weights = (unsigned char *)exact(n_weights);
        if (n_weights) memcpy(weights, tensors + all_input_bytes, n_weights);
    }
    ws = (unsigned char *)exact(WS_BYTES);
    short_ws = 1 + param % (WS_BYTES - 1); /* 1 .. WS_BYTES - 1 */
    ws_short = (unsigned char *)exact(short_ws);
    shifted = (unsigned char *)exact(n_weights + 1);
    if (n_weights) memcpy(shifted + 1, weights, n_weights);

    /* ---- init: misuse first (each must fail with its code whatever the blob) */
    EXPECT(FN(_init_checked)(NULL, weights, n_weights, ws, WS_BYTES, SIGNATURE), K(_ERR_NULL_ARG));
    EXPECT(FN(_init_checked)(&ctx, weights, n_weights, ws, WS_BYTES, wrong_sig), K(_ERR_SIGNATURE));
    CHECK(FN(_isa)(&ctx) == NULL);
    EXPECT(FN(_run_v)(&ctx, ins, outs), K(_ERR_NOT_INITIALIZED));
    EXPECT(FN(_init_checked)(&ctx, NULL, n_weights, ws, WS_BYTES, SIGNATURE), K(_ERR_NULL_ARG));
    EXPECT(FN(_init_checked)(&ctx, weights, n_weights, NULL, WS_BYTES, SIGNATURE), K(_ERR_NULL_ARG));
    EXPECT(FN(_init_checked)(&ctx, weights, n_weights, ws_short, short_ws, SIGNATURE), K(_ERR_WORKSPACE_SIZE));
    EXPECT(FN(_init_checked)(&ctx, shifted + 1, n_weights, ws, WS_BYTES, SIGNATURE), K(_ERR_ALIGN));
    EXPECT(FN(_init_checked)(&ctx, weights, n_weights, ws + 1, WS_BYTES - 1, SIGNATURE), K(_ERR_ALIGN));
    EXPECT(FN(_run_v)(&ctx, ins, outs), K(_ERR_NOT_INITIALIZED));

    /* ---- init on the fuzzed blob */
    rc = FN(_init)(&ctx, weights, n_weights, ws, WS_BYTES);
    if (rc != K(_OK)) {
        if (!is_weights_error(rc)) {
            fprintf(stderr, "fuzz_capi: init returned %d (%s), not a weights error\n", rc, FN(_strerror)(rc));
            abort();
        }
        CHECK(FN(_isa)(&ctx) == NULL);
        EXPECT(FN(_run_v)(&ctx, ins, outs), K(_ERR_NOT_INITIALIZED));
        goto done;
    }
    CHECK(n_weights >= K(_WEIGHTS_BYTES));
    CHECK(FN(_isa)(&ctx) != NULL);

    /* ---- run: NULL anywhere */
    EXPECT(FN(_run_v)(NULL, ins, outs), K(_ERR_NULL_ARG));
    EXPECT(FN(_run_v)(&ctx, NULL, outs), K(_ERR_NULL_ARG));
    EXPECT(FN(_run_v)(&ctx, ins, NULL), K(_ERR_NULL_ARG));
    for (i = 0; i < NUM_INPUTS; i++) {
        memcpy(bad_ins, ins, sizeof ins);
        bad_ins[i] = NULL;
        EXPECT(FN(_run_v)(&ctx, bad_ins, outs), K(_ERR_NULL_ARG));
    }
    for (i = 0; i < NUM_OUTPUTS; i++) {
        memcpy(bad_outs, outs, sizeof outs);
        bad_outs[i] = NULL;
        EXPECT(FN(_run_v)(&ctx, ins, bad_outs), K(_ERR_NULL_ARG));
    }

    /* ---- run on the fuzzed inputs, twice over differently filled scratch */
    memset(ws, 0xA5, WS_BYTES);
    rc = FN(_run_v)(&ctx, ins, outs);
    EXPECT(rc, indices_valid(ins) ? K(_OK) : K(_ERR_INDEX));
    for (i = 0; i < NUM_OUTPUTS; i++) memcpy(first[i], outs[i], output_bytes[i]);
    memset(ws, 0x5A, WS_BYTES);
    rc2 = FN(_run_v)(&ctx, ins, outs);
    EXPECT(rc2, rc);
    if (rc == K(_OK))
        for (i = 0; i < NUM_OUTPUTS; i++)
            if (memcmp(first[i], outs[i], output_bytes[i]) != 0) {
                fprintf(stderr, "fuzz_capi: output %d differs between two runs on the same inputs (a kernel reads scratch "
                                "it did not write)\n", i);
                abort();
            }

    /* ---- a failed re-init leaves the ctx unusable */
    EXPECT(FN(_init_checked)(&ctx, weights, n_weights, ws, WS_BYTES, wrong_sig), K(_ERR_SIGNATURE));
    EXPECT(FN(_run_v)(&ctx, ins, outs), K(_ERR_NOT_INITIALIZED));

done:
    for (i = 0; i < NUM_INPUTS; i++) free((void *)ins[i]);
    for (i = 0; i < NUM_OUTPUTS; i++) {
        free(outs[i]);
        free(first[i]);
    }
    free(weights);
    free(ws);
    free(ws_short);
    free(shifted);
    return 0;
}
