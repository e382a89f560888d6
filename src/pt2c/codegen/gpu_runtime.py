"""The host code of a GPU artifact, per dialect: <name>.c for OpenCL (C99 on the ICD loader: platform and device
choice, the program built from its embedded source at init, kernel arguments set and launched per node) and
<name>.cu for CUDA (the kernels and their <<<>>> launches in one file nvcc compiles).  Both implement the API
<name>.h declares (codegen/gpu_host.py writes it and the shared parts: `c` below)."""

from __future__ import annotations

import re

from pt2c.codegen.escape import c_string


def _c_lines(text: str) -> str:
    """text as an array initializer of C string literals, one per line (C99 caps one literal at 4095 chars)."""
    return ",\n".join("    " + c_string(ln + "\n") for ln in text.split("\n"))


# ---------------------------------------------------------------- OpenCL host

def opencl_source(name: str, c: dict[str, str], program: str, kernel_names: list[str], body: list[str]) -> str:
    N = c["N"]
    names = ", ".join(c_string(k) for k in kernel_names) or "NULL"
    graph = "\n".join("    " + ln if ln else "" for ln in body)
    scalars = "".join(f"static cl_int {fn}(cl_kernel k, cl_uint i, {t} v) {{ return clSetKernelArg(k, i, sizeof(v), &v); }}\n"
                      for fn, t in (("set_i", "cl_int"), ("set_l", "cl_long"), ("set_f", "cl_float"))
                      if f"E({fn}(" in graph)
    return f"""{c['head']}
#include "{name}.h"

#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 120
#endif
#if defined(__APPLE__)
#include <OpenCL/opencl.h>
#else
#include <CL/cl.h>
#endif
#include <stdio.h>
#include <string.h>

{c['tables']}
/* ---- the OpenCL program (the same text as {name}.cl): pt2c's kernels, then those generated for this model ---- */
static const char *const program_source[] = {{
{_c_lines(program)}
}};

#define NUM_KERNELS {len(kernel_names)}
static const char *const kernel_names[] = {{{names}}};

typedef struct {{
    cl_mem buf;
    size_t off; /* bytes */
}} dev_buf;

static cl_kernel ctx_kernel(const {name}_ctx *ctx, int i) {{ return (cl_kernel)ctx->kernels[i]; }}

/* a tensor argument: the buffer and the element offset of (b.off + bytes) */
static cl_int set_t(cl_kernel k, cl_uint i, dev_buf b, size_t bytes, size_t item)
{{
    cl_long off = (cl_long)((b.off + bytes) / item);
    cl_int e = clSetKernelArg(k, i, sizeof(cl_mem), &b.buf);
    return e != CL_SUCCESS ? e : clSetKernelArg(k, i + 1, sizeof(cl_long), &off);
}}
{scalars}
static cl_int launch(cl_command_queue q, cl_kernel k, size_t g0, size_t g1, size_t g2, size_t b0, size_t b1, size_t b2)
{{
    const size_t global[3] = {{g0 * b0, g1 * b1, g2 * b2}}, local[3] = {{b0, b1, b2}};
    return clEnqueueNDRangeKernel(q, k, 3, NULL, global, local, 0, NULL, NULL);
}}

#define E(call) do {{ cl_int e_ = (call); if (e_ != CL_SUCCESS) return e_; }} while (0)

/* the graph: every node's kernels, in order, on queue q */
static cl_int forward(const {name}_ctx *ctx, cl_command_queue q, const dev_buf *in, const dev_buf *out)
{{
    const dev_buf w = {{(cl_mem)ctx->memory, W_OFF}}, ws = {{(cl_mem)ctx->memory, WS_OFF}}, err = {{(cl_mem)ctx->memory, ERR_OFF}};
    cl_kernel k;
    (void)w; (void)ws; (void)err; (void)in; (void)out;
{graph}
    return CL_SUCCESS;
}}

{c['api']}

static void set_message({name}_ctx *ctx, const char *what, cl_int e)
{{
    snprintf(ctx->message, sizeof(ctx->message), "%s failed (OpenCL error %d)", what, (int)e);
}}

void {name}_release({name}_ctx *ctx)
{{
    int i;
    if (!ctx) return;
    for (i = 0; i < NUM_KERNELS; i++)
        if (ctx->kernels[i]) clReleaseKernel((cl_kernel)ctx->kernels[i]);
    if (ctx->memory) clReleaseMemObject((cl_mem)ctx->memory);
    if (ctx->program) clReleaseProgram((cl_program)ctx->program);
    if (ctx->owns_queue && ctx->queue) clReleaseCommandQueue((cl_command_queue)ctx->queue);
    if (ctx->owns_queue && ctx->context) clReleaseContext((cl_context)ctx->context);
    for (i = 0; i < NUM_KERNELS; i++) ctx->kernels[i] = NULL;
    ctx->memory = ctx->program = ctx->queue = ctx->context = NULL;
    ctx->initialized = 0;
}}

/* ctx holds context, device and queue: build the program, make the kernels and the allocation, upload */
static int setup({name}_ctx *ctx, const unsigned char *data)
{{
    cl_int e;
    int i;
    size_t wg = 0;
    cl_context cx = (cl_context)ctx->context;
    cl_device_id dev = (cl_device_id)ctx->device;
    cl_program p;
    cl_mem m;
    char devname[96] = "";
    clGetDeviceInfo(dev, CL_DEVICE_NAME, sizeof(devname) - 1, devname, NULL);
    snprintf(ctx->device_name, sizeof(ctx->device_name), "opencl: %s", devname);
    if (clGetDeviceInfo(dev, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof(wg), &wg, NULL) != CL_SUCCESS || wg < 256) {{
        snprintf(ctx->message, sizeof(ctx->message), "%s: work-groups of %u threads at most; the kernels use 256",
                 devname, (unsigned)wg);
        return {N}_ERR_DEVICE;
    }}
    p = clCreateProgramWithSource(cx, (cl_uint)(sizeof(program_source) / sizeof(program_source[0])),
                                  (const char **)program_source, NULL, &e);
    if (e != CL_SUCCESS) {{ set_message(ctx, "clCreateProgramWithSource", e); return {N}_ERR_DEVICE; }}
    ctx->program = p;
    e = clBuildProgram(p, 1, &dev, "-cl-std=CL1.2", NULL, NULL);
    if (e != CL_SUCCESS) {{
        size_t n = 0;
        set_message(ctx, "clBuildProgram", e);
        if (clGetProgramBuildInfo(p, dev, CL_PROGRAM_BUILD_LOG, sizeof(ctx->message) - 1, ctx->message, &n) != CL_SUCCESS)
            set_message(ctx, "clBuildProgram", e);
        ctx->message[sizeof(ctx->message) - 1] = 0;
        return e == CL_OUT_OF_HOST_MEMORY || e == CL_OUT_OF_RESOURCES ? {N}_ERR_DEVICE : {N}_ERR_KERNEL_BUILD;
    }}
    for (i = 0; i < NUM_KERNELS; i++) {{
        ctx->kernels[i] = clCreateKernel(p, kernel_names[i], &e);
        if (e != CL_SUCCESS) {{ set_message(ctx, kernel_names[i], e); return {N}_ERR_KERNEL_BUILD; }}
    }}
    m = clCreateBuffer(cx, CL_MEM_READ_WRITE, {N}_DEVICE_BYTES, NULL, &e);
    if (e != CL_SUCCESS) {{
        set_message(ctx, "clCreateBuffer", e);
        return e == CL_MEM_OBJECT_ALLOCATION_FAILURE || e == CL_INVALID_BUFFER_SIZE || e == CL_OUT_OF_RESOURCES
            ? {N}_ERR_DEVICE_MEMORY : {N}_ERR_DEVICE;
    }}
    ctx->memory = m;
    if (expected_data_bytes > 0) {{
        e = clEnqueueWriteBuffer((cl_command_queue)ctx->queue, m, CL_TRUE, W_OFF, (size_t)expected_data_bytes, data,
                                 0, NULL, NULL);
        if (e != CL_SUCCESS) {{
            set_message(ctx, "uploading the weights", e);
            return e == CL_MEM_OBJECT_ALLOCATION_FAILURE || e == CL_OUT_OF_RESOURCES ? {N}_ERR_DEVICE_MEMORY : {N}_ERR_DEVICE;
        }}
    }}
    ctx->initialized = 0x70743263u;
    return {N}_OK;
}}

static void clear({name}_ctx *ctx)
{{
    memset(ctx, 0, sizeof(*ctx));
}}

int {name}_init_cl({name}_ctx *ctx, const void *weights, size_t weights_size, void *context, void *device, void *queue)
{{
    const unsigned char *data = NULL;
    int rc;
    if (!ctx) return {N}_ERR_NULL_ARG;
    clear(ctx);
    rc = check_weights(weights, weights_size, {N}_SIGNATURE, &data);
    if (rc != {N}_OK) return rc;
    if (!context || !device || !queue) return {N}_ERR_NULL_ARG;
    ctx->context = context;
    ctx->device = device;
    ctx->queue = queue;
    rc = setup(ctx, data);
    if (rc != {N}_OK) {name}_release(ctx);
    return rc;
}}

int {name}_init_checked({name}_ctx *ctx, const void *weights, size_t weights_size, void *workspace,
                        size_t workspace_size, uint64_t header_signature)
{{
    const unsigned char *data = NULL;
    cl_platform_id plats[16];
    cl_uint np = 0, i, pass;
    cl_device_id dev = NULL;
    cl_int e;
    int rc;
    (void)workspace;
    (void)workspace_size;
    if (!ctx) return {N}_ERR_NULL_ARG;
    clear(ctx);
    rc = check_weights(weights, weights_size, header_signature, &data);
    if (rc != {N}_OK) return rc;
    e = clGetPlatformIDs(16, plats, &np);
    if (e != CL_SUCCESS || np == 0) {{
        set_message(ctx, "clGetPlatformIDs (is an OpenCL driver installed?)", e);
        return {N}_ERR_NO_DEVICE;
    }}
    if (np > 16) np = 16;
    for (pass = 0; pass < 2 && !dev; pass++) /* a GPU first, else any device */
        for (i = 0; i < np && !dev; i++) {{
            cl_uint nd = 0;
            if (clGetDeviceIDs(plats[i], pass == 0 ? CL_DEVICE_TYPE_GPU : CL_DEVICE_TYPE_ALL, 1, &dev, &nd) != CL_SUCCESS
                || nd == 0)
                dev = NULL;
        }}
    if (!dev) {{
        snprintf(ctx->message, sizeof(ctx->message), "%u OpenCL platform(s), no device", (unsigned)np);
        return {N}_ERR_NO_DEVICE;
    }}
    ctx->device = dev;
    ctx->owns_queue = 1;
    ctx->context = clCreateContext(NULL, 1, &dev, NULL, NULL, &e);
    if (e != CL_SUCCESS) {{ set_message(ctx, "clCreateContext", e); {name}_release(ctx); return {N}_ERR_DEVICE; }}
    ctx->queue = clCreateCommandQueue((cl_context)ctx->context, dev, 0, &e);
    if (e != CL_SUCCESS) {{ set_message(ctx, "clCreateCommandQueue", e); {name}_release(ctx); return {N}_ERR_DEVICE; }}
    rc = setup(ctx, data);
    if (rc != {N}_OK) {name}_release(ctx);
    return rc;
}}

static int run_status(const {name}_ctx *ctx, cl_command_queue q)
{{
    cl_int flag = 0, e = clEnqueueReadBuffer(q, (cl_mem)ctx->memory, CL_TRUE, ERR_OFF, sizeof(flag), &flag, 0, NULL, NULL);
    if (e != CL_SUCCESS) return {N}_ERR_DEVICE;
    return flag ? {N}_ERR_INDEX : {N}_OK;
}}

static int enqueue(const {name}_ctx *ctx, cl_command_queue q, const dev_buf *in, const dev_buf *out)
{{
    static const cl_int zero = 0;
    cl_int e = clEnqueueWriteBuffer(q, (cl_mem)ctx->memory, CL_FALSE, ERR_OFF, sizeof(zero), &zero, 0, NULL, NULL);
    if (e == CL_SUCCESS) e = forward(ctx, q, in, out);
    return e == CL_SUCCESS ? {N}_OK : e == CL_MEM_OBJECT_ALLOCATION_FAILURE || e == CL_OUT_OF_RESOURCES
        ? {N}_ERR_DEVICE_MEMORY : {N}_ERR_DEVICE;
}}

int {name}_run_v(const {name}_ctx *ctx, const void *const *inputs, void *const *outputs)
{{
    dev_buf in[{N}_NUM_INPUTS + 1], out[{N}_NUM_OUTPUTS + 1];
    cl_command_queue q;
    cl_mem m;
    int i, rc;
    if (!ctx || (!inputs && {N}_NUM_INPUTS > 0) || !outputs) return {N}_ERR_NULL_ARG;
    if (ctx->initialized != 0x70743263u) return {N}_ERR_NOT_INITIALIZED;
    q = (cl_command_queue)ctx->queue;
    m = (cl_mem)ctx->memory;
    for (i = 0; i < {N}_NUM_INPUTS; i++) {{
        if (!inputs[i]) return {N}_ERR_NULL_ARG;
        in[i].buf = m;
        in[i].off = in_off[i];
        if (clEnqueueWriteBuffer(q, m, CL_FALSE, in_off[i], in_bytes[i], inputs[i], 0, NULL, NULL) != CL_SUCCESS)
            return {N}_ERR_DEVICE;
    }}
    for (i = 0; i < {N}_NUM_OUTPUTS; i++) {{
        if (!outputs[i]) return {N}_ERR_NULL_ARG;
        out[i].buf = m;
        out[i].off = out_off[i];
    }}
    rc = enqueue(ctx, q, in, out);
    if (rc == {N}_OK) rc = run_status(ctx, q); /* (waits) */
    for (i = 0; i < {N}_NUM_OUTPUTS && rc == {N}_OK; i++)
        if (clEnqueueReadBuffer(q, m, CL_TRUE, out_off[i], out_bytes[i], outputs[i], 0, NULL, NULL) != CL_SUCCESS)
            rc = {N}_ERR_DEVICE;
    if (rc != {N}_OK) clFinish(q); /* nothing of this call is left running on the caller's buffers */
    return rc;
}}

int {name}_run_device(const {name}_ctx *ctx, const void *const *inputs, void *const *outputs, void *queue)
{{
    dev_buf in[{N}_NUM_INPUTS + 1], out[{N}_NUM_OUTPUTS + 1];
    int i;
    if (!ctx || (!inputs && {N}_NUM_INPUTS > 0) || !outputs) return {N}_ERR_NULL_ARG;
    if (ctx->initialized != 0x70743263u) return {N}_ERR_NOT_INITIALIZED;
    for (i = 0; i < {N}_NUM_INPUTS; i++) {{
        if (!inputs[i]) return {N}_ERR_NULL_ARG;
        in[i].buf = (cl_mem)inputs[i];
        in[i].off = 0;
    }}
    for (i = 0; i < {N}_NUM_OUTPUTS; i++) {{
        if (!outputs[i]) return {N}_ERR_NULL_ARG;
        out[i].buf = (cl_mem)outputs[i];
        out[i].off = 0;
    }}
    return enqueue(ctx, queue ? (cl_command_queue)queue : (cl_command_queue)ctx->queue, in, out);
}}

int {name}_run_status(const {name}_ctx *ctx, void *queue)
{{
    if (!ctx) return {N}_ERR_NULL_ARG;
    if (ctx->initialized != 0x70743263u) return {N}_ERR_NOT_INITIALIZED;
    return run_status(ctx, queue ? (cl_command_queue)queue : (cl_command_queue)ctx->queue);
}}
"""


# ---------------------------------------------------------------- CUDA host

def cuda_source(name: str, c: dict[str, str], kfiles: list[str], kernels: list[str], kernel_names: list[str],
                body: list[str]) -> str:
    N = c["N"]
    includes = "\n".join(f'#include "pt2c_kernels/{f}"' for f in kfiles)
    graph = "\n".join("    " + ln if ln else "" for ln in body)
    probe = kernel_names[0] if kernel_names else None
    text = "\n".join(body)
    regions = "".join(f"    char *{r} = (char *)ctx->memory + {off};\n" for r, off in (("w", "W_OFF"), ("ws", "WS_OFF"))
                      if re.search(rf"\({r} \+|\){r}\b", text))
    regions += "    char *err = (char *)ctx->memory + ERR_OFF;\n" if "(int *)err" in text else ""
    probe_c = (f"""    {{ /* does the binary hold code for this GPU (machine code, or PTX the driver can compile)? */
        cudaFuncAttributes fa;
        e = cudaFuncGetAttributes(&fa, {probe});
        if (e == cudaErrorNoKernelImageForDevice || e == cudaErrorInvalidDeviceFunction || e == cudaErrorUnsupportedPtxVersion) {{
            set_message(ctx, "the kernels", e);
            return {N}_ERR_NO_KERNEL_IMAGE;
        }}
        if (e != cudaSuccess) {{ set_message(ctx, "cudaFuncGetAttributes", e); return {N}_ERR_DEVICE; }}
    }}""" if probe else "")
    return f"""{c['head']}
#include "{name}.h"

#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>

{includes}

/* ---- kernels generated for this model ---- */

{chr(10).join(kernels)}

{c['tables']}
/* the graph: every node's kernels, in order, on stream s */
static cudaError_t forward(const {name}_ctx *ctx, cudaStream_t s, const char *const *in, char *const *out)
{{
{regions}    (void)in;
    (void)out;
{graph}
    return cudaGetLastError();
}}

extern "C" {{

{c['api']}

static void set_message({name}_ctx *ctx, const char *what, cudaError_t e)
{{
    snprintf(ctx->message, sizeof(ctx->message), "%s: %s", what, cudaGetErrorString(e));
}}

void {name}_release({name}_ctx *ctx)
{{
    if (!ctx) return;
    if (ctx->graph) cudaGraphExecDestroy((cudaGraphExec_t)ctx->graph);
    if (ctx->owns_queue && ctx->queue) cudaStreamDestroy((cudaStream_t)ctx->queue);
    if (ctx->memory) cudaFree(ctx->memory);
    ctx->graph = ctx->queue = ctx->memory = NULL;
    ctx->owns_queue = 0;
    ctx->initialized = 0;
}}

int {name}_init_cuda({name}_ctx *ctx, const void *weights, size_t weights_size, int device, void *stream)
{{
    const unsigned char *data = NULL;
    cudaDeviceProp prop;
    cudaError_t e;
    int rc, n = 0;
    if (!ctx) return {N}_ERR_NULL_ARG;
    memset(ctx, 0, sizeof(*ctx));
    rc = check_weights(weights, weights_size, {N}_SIGNATURE, &data);
    if (rc != {N}_OK) return rc;
    e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0 || device < 0 || device >= n) {{
        if (e != cudaSuccess) set_message(ctx, "cudaGetDeviceCount", e);
        else snprintf(ctx->message, sizeof(ctx->message), "device %d of %d CUDA device(s)", device, n);
        return {N}_ERR_NO_DEVICE;
    }}
    e = cudaSetDevice(device);
    if (e == cudaSuccess) e = cudaGetDeviceProperties(&prop, device);
    if (e != cudaSuccess) {{ set_message(ctx, "cudaSetDevice", e); return {N}_ERR_DEVICE; }}
    snprintf(ctx->device_name, sizeof(ctx->device_name), "cuda: %.100s sm_%d%d", prop.name, prop.major, prop.minor);
{probe_c}
    e = cudaMalloc(&ctx->memory, {N}_DEVICE_BYTES);
    if (e != cudaSuccess) {{
        ctx->memory = NULL;
        set_message(ctx, "cudaMalloc", e);
        return e == cudaErrorMemoryAllocation ? {N}_ERR_DEVICE_MEMORY : {N}_ERR_DEVICE;
    }}
    if (expected_data_bytes > 0) e = cudaMemcpy((char *)ctx->memory + W_OFF, data, (size_t)expected_data_bytes,
                                                cudaMemcpyHostToDevice);
    if (e != cudaSuccess) {{ set_message(ctx, "uploading the weights", e); {name}_release(ctx); return {N}_ERR_DEVICE; }}
    ctx->queue = stream;
    ctx->initialized = 0x70743263u;
    return {N}_OK;
}}

int {name}_init_checked({name}_ctx *ctx, const void *weights, size_t weights_size, void *workspace,
                        size_t workspace_size, uint64_t header_signature)
{{
    (void)workspace;
    (void)workspace_size;
    if (!ctx) return {N}_ERR_NULL_ARG;
    if (header_signature != {N}_SIGNATURE) return {N}_ERR_SIGNATURE;
    return {name}_init_cuda(ctx, weights, weights_size, 0, NULL);
}}

static int enqueue(const {name}_ctx *ctx, cudaStream_t s, const char *const *in, char *const *out)
{{
    cudaError_t e = cudaMemsetAsync((char *)ctx->memory + ERR_OFF, 0, sizeof(int), s);
    if (e == cudaSuccess) e = forward(ctx, s, in, out);
    return e == cudaSuccess ? {N}_OK : e == cudaErrorMemoryAllocation ? {N}_ERR_DEVICE_MEMORY : {N}_ERR_DEVICE;
}}

static int run_status(const {name}_ctx *ctx, cudaStream_t s)
{{
    int flag = 0;
    cudaError_t e = cudaMemcpyAsync(&flag, (char *)ctx->memory + ERR_OFF, sizeof(flag), cudaMemcpyDeviceToHost, s);
    if (e == cudaSuccess) e = cudaStreamSynchronize(s);
    if (e != cudaSuccess) return {N}_ERR_DEVICE;
    return flag ? {N}_ERR_INDEX : {N}_OK;
}}

static void staging(const {name}_ctx *ctx, const char **in, char **out)
{{
    int i;
    for (i = 0; i < {N}_NUM_INPUTS; i++) in[i] = (const char *)ctx->memory + in_off[i];
    for (i = 0; i < {N}_NUM_OUTPUTS; i++) out[i] = (char *)ctx->memory + out_off[i];
}}

int {name}_use_graph({name}_ctx *ctx, int on)
{{
    const char *in[{N}_NUM_INPUTS + 1];
    char *out[{N}_NUM_OUTPUTS + 1];
    cudaStream_t s;
    cudaGraph_t g = NULL;
    cudaGraphExec_t x = NULL;
    cudaError_t e;
    int rc = {N}_OK;
    if (!ctx) return {N}_ERR_NULL_ARG;
    if (ctx->initialized != 0x70743263u) return {N}_ERR_NOT_INITIALIZED;
    if (ctx->graph) cudaGraphExecDestroy((cudaGraphExec_t)ctx->graph);
    ctx->graph = NULL;
    if (!on) return {N}_OK;
    if (!ctx->queue) {{ /* the legacy default stream cannot be captured */
        e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
        if (e != cudaSuccess) {{ set_message(ctx, "cudaStreamCreate", e); return {N}_ERR_DEVICE; }}
        ctx->queue = s;
        ctx->owns_queue = 1;
    }}
    s = (cudaStream_t)ctx->queue;
    staging(ctx, in, out);
    e = cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
    if (e == cudaSuccess) {{
        rc = enqueue(ctx, s, in, out);
        e = cudaStreamEndCapture(s, &g);
    }}
    if (e == cudaSuccess && rc == {N}_OK) e = cudaGraphInstantiate(&x, g, 0);
    if (g) cudaGraphDestroy(g);
    if (e != cudaSuccess || rc != {N}_OK) {{
        if (e != cudaSuccess) set_message(ctx, "capturing the CUDA graph", e);
        return rc != {N}_OK ? rc : {N}_ERR_DEVICE;
    }}
    ctx->graph = x;
    return {N}_OK;
}}

int {name}_run_v(const {name}_ctx *ctx, const void *const *inputs, void *const *outputs)
{{
    const char *in[{N}_NUM_INPUTS + 1];
    char *out[{N}_NUM_OUTPUTS + 1];
    cudaStream_t s;
    int i, rc;
    if (!ctx || (!inputs && {N}_NUM_INPUTS > 0) || !outputs) return {N}_ERR_NULL_ARG;
    if (ctx->initialized != 0x70743263u) return {N}_ERR_NOT_INITIALIZED;
    s = (cudaStream_t)ctx->queue;
    staging(ctx, in, out);
    for (i = 0; i < {N}_NUM_INPUTS; i++)
        if (!inputs[i]) return {N}_ERR_NULL_ARG;
    for (i = 0; i < {N}_NUM_OUTPUTS; i++)
        if (!outputs[i]) return {N}_ERR_NULL_ARG;
    for (i = 0; i < {N}_NUM_INPUTS; i++)
        if (cudaMemcpyAsync((char *)in[i], inputs[i], in_bytes[i], cudaMemcpyHostToDevice, s) != cudaSuccess)
            return {N}_ERR_DEVICE;
    if (ctx->graph)
        rc = cudaGraphLaunch((cudaGraphExec_t)ctx->graph, s) == cudaSuccess ? {N}_OK : {N}_ERR_DEVICE;
    else
        rc = enqueue(ctx, s, in, out);
    if (rc == {N}_OK) rc = run_status(ctx, s);
    for (i = 0; i < {N}_NUM_OUTPUTS && rc == {N}_OK; i++)
        if (cudaMemcpyAsync(outputs[i], out[i], out_bytes[i], cudaMemcpyDeviceToHost, s) != cudaSuccess
            || cudaStreamSynchronize(s) != cudaSuccess)
            rc = {N}_ERR_DEVICE;
    if (rc != {N}_OK) cudaStreamSynchronize(s);
    return rc;
}}

int {name}_run_device(const {name}_ctx *ctx, const void *const *inputs, void *const *outputs, void *queue)
{{
    int i;
    if (!ctx || (!inputs && {N}_NUM_INPUTS > 0) || !outputs) return {N}_ERR_NULL_ARG;
    if (ctx->initialized != 0x70743263u) return {N}_ERR_NOT_INITIALIZED;
    for (i = 0; i < {N}_NUM_INPUTS; i++)
        if (!inputs[i]) return {N}_ERR_NULL_ARG;
    for (i = 0; i < {N}_NUM_OUTPUTS; i++)
        if (!outputs[i]) return {N}_ERR_NULL_ARG;
    return enqueue(ctx, queue ? (cudaStream_t)queue : (cudaStream_t)ctx->queue, (const char *const *)inputs,
                   (char *const *)outputs);
}}

int {name}_run_status(const {name}_ctx *ctx, void *queue)
{{
    if (!ctx) return {N}_ERR_NULL_ARG;
    if (ctx->initialized != 0x70743263u) return {N}_ERR_NOT_INITIALIZED;
    return run_status(ctx, queue ? (cudaStream_t)queue : (cudaStream_t)ctx->queue);
}}

}} /* extern "C" */
"""
