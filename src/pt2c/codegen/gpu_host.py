"""Writes a GPU artifact (--target opencl | cuda[:sm_XX,...]): <name>.h, the host code (<name>.c for OpenCL,
<name>.cu for CUDA), the kernels, <name>.weights, manifest.json and build files.

The device memory is one allocation, laid out at compile time: the weights' data, the activations (the
memory plan's arena), a staging buffer per input and output (runs on host pointers copy through them) and
one error word that index kernels set.  The C API is the CPU artifact's (init with the weights blob, run on
host pointers, status codes, strerror, I/O descriptors) plus a release, device-pointer runs on the
caller's queue / stream, and the driver's last message.
"""

from __future__ import annotations

import json
import re
from importlib import resources
from pathlib import Path
from typing import Any

from pt2c.codegen.capi import (HEADER_BYTES, WEIGHTS_FORMAT_VERSION, dtype_enum, io_doc, io_tables, status_enum,
                               status_messages, typed_params, weights_check, weights_helpers)
from pt2c.codegen.cwriter import ABI_VERSION, Artifact, WeightsBlob, _io_names, header_signature
from pt2c.codegen.escape import c_comment
from pt2c.codegen.emitter import node_comment
from pt2c.codegen.gpu import GpuEmitter, Launch, gpu_kernel_files, kernel_params, tensor_bytes
from pt2c.codegen.gpu_runtime import cuda_source, opencl_source
from pt2c.errors import InputError
from pt2c.ir import Graph, MemoryPlan, ctype, itemsize, walk
from pt2c.ops import OPS
from pt2c.sym import DynamicSizeError
from pt2c.version import __version__

DEVICE_ALIGN = 256  # bytes: every region of the device allocation (OpenCL's base-address alignment is <= 128)


def _up(n: int) -> int:
    return (n + DEVICE_ALIGN - 1) // DEVICE_ALIGN * DEVICE_ALIGN


class Layout:
    """Byte offsets of the regions of the one device allocation."""

    def __init__(self, g: Graph, plan: MemoryPlan, blob: WeightsBlob):
        self.w = 0
        self.ws = _up(blob.data_bytes)
        at = self.ws + _up(plan.arena_bytes)
        self.inputs, self.outputs = [], []
        for vals, dst in ((g.inputs, self.inputs), (g.outputs, self.outputs)):
            for v in vals:
                dst.append(at)
                at += _up(max(v.nbytes, 1))
        self.err = at
        self.total = at + DEVICE_ALIGN


def _tensor_arg(a: tuple[Any, ...], plan: MemoryPlan, offs: dict[int, int]) -> tuple[str, int, str, bool]:
    """(region, byte offset, C element type, const) of a launch's tensor argument."""
    _, v, extra, const = a[:4]
    dtype = a[4] if len(a) > 4 else v.dtype
    region, byte = tensor_bytes(plan, v, offs)
    byte += extra * itemsize(v.dtype)
    if byte % itemsize(dtype):
        raise AssertionError(f"{v.name}: byte offset {byte} is not a multiple of its element size")
    return region, byte, ctype(dtype), const


def _region(r: str) -> str:
    """The C expression of a region's base in the host code (both dialects name them alike)."""
    if r.startswith("in"):
        return f"in[{r[2:]}]"
    if r.startswith("out"):
        return f"out[{r[3:]}]"
    return r


# ---------------------------------------------------------------- launches as host code

def _opencl_launch(l: Launch, kidx: int, plan: MemoryPlan, offs: dict[int, int], names: list[str]) -> list[str]:
    lines = [*l.comment, f"k = ctx_kernel(ctx, {kidx}); /* {l.kernel} */"]
    i = 0
    for a in l.args:
        pname = names[i] if i < len(names) else (a[1].name if a[0] == "t" else "")
        if a[0] == "t":
            region, byte, _, _ = _tensor_arg(a, plan, offs)
            item = itemsize(a[4] if len(a) > 4 else a[1].dtype)
            lines.append(f"E(set_t(k, {i}, {_region(region)}, {byte}u, {item})); /* {pname} */")
            i += 2
        elif a[0] == "err":
            lines.append(f"E(set_t(k, {i}, err, 0u, 4)); /* the error word */")
            i += 2
        else:
            fn = {"i": "set_i", "l": "set_l", "f": "set_f"}[a[0]]
            val = a[1] if a[0] != "f" else _flt(a[1])
            lines.append(f"E({fn}(k, {i}, {val})); /* {pname} */")
            i += 1
    g, b = l.grid, l.block
    lines.append(f"E(launch(q, k, {g[0]}, {g[1]}, {g[2]}, {b[0]}, {b[1]}, {b[2]}));")
    return lines


def _cuda_launch(l: Launch, plan: MemoryPlan, offs: dict[int, int], names: list[str]) -> list[str]:
    args = []
    i = 0
    for a in l.args:
        if a[0] == "t":
            region, byte, t, const = _tensor_arg(a, plan, offs)
            q = "const " if const else ""
            base = _region(region)
            args.append(f"({q}{t} *)({base} + {byte})" if byte else f"({q}{t} *){base}")
            args.append("0")
            i += 2
        elif a[0] == "err":
            args += ["(int *)err", "0"]
            i += 2
        else:
            val = str(a[1]) if a[0] != "f" else _flt(a[1])
            args.append(f"/*{names[i]}=*/{val}" if i < len(names) else val)
            i += 1
    g, b = l.grid, l.block
    head = f"{l.kernel}<<<dim3({g[0]}, {g[1]}, {g[2]}), dim3({b[0]}, {b[1]}, {b[2]}), 0, s>>>("
    lines, cur = [], head
    for j, a in enumerate(args):
        piece = a + (", " if j < len(args) - 1 else ");")
        if len(cur) + len(piece) > 110 and cur.strip() != head.strip():
            lines.append(cur.rstrip())
            cur = "    " + piece
        else:
            cur += piece
    lines.append(cur)
    return [*l.comment, *lines]


def _flt(x: float) -> str:
    r = repr(float(x))
    if r in ("inf", "-inf", "nan"):
        return {"inf": "INFINITY", "-inf": "(-INFINITY)", "nan": "NAN"}[r]
    return (r if ("." in r or "e" in r) else r + ".0") + "f"


# ---------------------------------------------------------------- the artifact

def write_gpu_artifact(g: Graph, plan: MemoryPlan, out_dir: Path, options: Any,
                       provenance: dict[str, Any] | None = None) -> Artifact:
    name, target = g.name, options.target
    dialect = target.backend
    if g.meta.get("dims"):
        raise DynamicSizeError(f"the {dialect} backend compiles static shapes so far")
    if any(n.op == "state" for n in g.nodes):
        raise InputError(f"the program updates buffers in place ({', '.join(g.meta['state']['names'][:4])}: a KV "
                         f"cache ...), which the {dialect} backend does not keep from run to run yet.\nWhat to try: "
                         "compile for a CPU target, or export the cache as inputs and outputs (past_key_values).")
    reduced = sorted({v.dtype for v in [*g.inputs, *g.outputs] if v.dtype in ("bfloat16", "float16")}
                     | {d for n in g.nodes for d, r in (("bfloat16", "round_bf16"), ("float16", "round_f16"))
                        if r in repr(n.attrs.get("expr", ""))})
    if reduced:
        raise InputError(f"the model computes in {' / '.join(reduced)}, which the {dialect} backend does not "
                         "implement yet.\nWhat to try: compile for a CPU target, or export the model in float32 "
                         "(model.float()).")
    out_dir.mkdir(parents=True, exist_ok=True)
    blob = WeightsBlob(g.constants())
    em = GpuEmitter(g, plan)
    em.emit_graph(node_comment)
    lay = Layout(g, plan, blob)
    kfiles = gpu_kernel_files(em.library)
    params = kernel_params()
    for l in em.launches:  # generated kernels: their parameters from their own launch
        params.setdefault(l.kernel, [])
    kernel_names = list(dict.fromkeys(l.kernel for l in em.launches))
    if dialect == "opencl":
        body = []
        for l in em.launches:
            body += [""] + _opencl_launch(l, kernel_names.index(l.kernel), plan, blob.offsets, params[l.kernel])
    else:
        body = []
        for l in em.launches:
            body += [""] + _cuda_launch(l, plan, blob.offsets, params[l.kernel])
    in_names, out_names = _io_names(g)
    prov = provenance or {}
    header = _header(g, name, lay, len(blob), in_names, out_names, max(len(kernel_names), 1), dialect)
    files = [f"{name}.h"]
    (out_dir / f"{name}.h").write_text(header)
    common = _common(g, name, lay, blob, in_names, out_names, target, prov, options.command, em.errors)
    if dialect == "opencl":
        program = _program_source(kfiles, em.kernels)
        (out_dir / f"{name}.c").write_text(opencl_source(name, common, program, kernel_names, body))
        (out_dir / f"{name}.cl").write_text(program)  # the same kernels, for reading and offline compilers
        files += [f"{name}.c", f"{name}.cl"]
    else:
        kdir = out_dir / "pt2c_kernels"
        kdir.mkdir(exist_ok=True)
        src = resources.files("pt2c.kernels") / "gpu"
        for f in kfiles:
            (kdir / f).write_text((src / f).read_text())
        files += [f"pt2c_kernels/{f}" for f in kfiles]
        (out_dir / f"{name}.cu").write_text(cuda_source(name, common, kfiles, em.kernels, kernel_names, body))
        files.append(f"{name}.cu")
    wfile = out_dir / f"{name}.weights"
    blob.write(wfile)
    files.append(wfile.name)
    manifest = {
        "pt2c_version": __version__,
        "abi_version": ABI_VERSION,
        "signature": re.search(r"_SIGNATURE UINT64_C\((0x[0-9a-f]+)\)", header).group(1),
        "name": name,
        "backend": dialect,
        "source": prov.get("source", ""),
        "torch_version": prov.get("torch_version", ""),
        "exported_with_torch": prov.get("exported_with_torch", ""),
        "export_schema_version": prov.get("schema_version", ""),
        # dims the export declared dynamic, compiled at the example's size (pt2c compiles static shapes so far)
        "specialized": prov.get("specialized", []),
        "sizes": [],  # (the GPU backends compile static shapes)
        "target": target.name,
        "target_cflags": list(target.cflags),
        "gpu_archs": [f"sm_{a}" for a in target.gpu_archs],
        "variants": [],
        "openmp": False,
        "freestanding": False,
        "inputs": [{"name": n, "shape": list(v.shape), "dtype": v.dtype} for n, v in zip(in_names, g.inputs)],
        "outputs": [{"name": n, "shape": list(v.shape), "dtype": v.dtype} for n, v in zip(out_names, g.outputs)],
        "weights": {"file": wfile.name, "embedded": False, "bytes": len(blob),
                    "format_version": WEIGHTS_FORMAT_VERSION, "crc32": f"{blob.crc:08x}"},
        "memory": {"device_bytes": lay.total, "arena_bytes": plan.arena_bytes, "workspace_bytes": 0,
                   "scratch_bytes": 0, "lower_bound_bytes": plan.lower_bound},
        "ops": sorted({n.op for n in walk(g)}),
        "op_counts": {op: sum(1 for n in walk(g) if n.op == op) for op in sorted({n.op for n in walk(g)})},
        "flops": int(sum(OPS[n.op].flops(n) for n in walk(g) if OPS[n.op].flops)),
        "kernels": kfiles,
        "launches": len(em.launches),
    }
    (out_dir / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    files += _build_files(out_dir, name, target)
    files.append("manifest.json")
    return Artifact(out_dir, name, files, manifest)


def _program_source(kfiles: list[str], kernels: list[str]) -> str:
    """The OpenCL program: the library kernels (their #includes resolved by inlining, in order) and the
    generated kernels."""
    src = resources.files("pt2c.kernels") / "gpu"
    parts = [re.sub(r'^#include "[a-z0-9_]+\.h"\n', "", (src / f).read_text(), flags=re.M) for f in kfiles]
    return "\n".join(parts) + "\n/* ---- kernels generated for this model ---- */\n\n" + "\n\n".join(kernels) + "\n"


# ---------------------------------------------------------------- header (plain C: no CUDA / OpenCL headers needed)

def _header(g: Graph, name: str, lay: Layout, blob_bytes: int, in_names: list[str], out_names: list[str],
            nkernels: int, dialect: str) -> str:
    N = name.upper()
    status, dtypes, typed = status_enum(N), dtype_enum(N), typed_params(g, in_names, out_names)
    doc = io_doc(g, in_names, out_names)
    if dialect == "cuda":
        what, dev, q = "CUDA", "device pointers (cudaMalloc)", "cudaStream_t"
        extra = f"""/* init on CUDA device `device` (cudaSetDevice), running on `stream` (a cudaStream_t; NULL: the default stream). */
int {name}_init_cuda({name}_ctx *ctx, const void *weights, size_t weights_size, int device, void *stream);
/* on != 0: capture the model's launches once as a CUDA graph, which {name}_run / _run_v then replay (one launch
 * instead of one per kernel; a stream of its own is made if the ctx has none); 0: launch kernel by kernel. */
int {name}_use_graph({name}_ctx *ctx, int on);"""
    else:
        what, dev, q = "OpenCL", "cl_mem handles", "cl_command_queue"
        extra = f"""/* init on the application's own OpenCL context, device and in-order queue (cl_context, cl_device_id,
 * cl_command_queue; pt2c_release leaves them to the caller). */
int {name}_init_cl({name}_ctx *ctx, const void *weights, size_t weights_size, void *context, void *device,
                   void *queue);"""
    text = f"""/* {name}.h: C API of the model `{name}` on a GPU through {what} (generated by pt2c {__version__}; do not edit).
 *
 * Usage:
 *   {name}_ctx ctx;
 *   int rc = {name}_init(&ctx, weights, weights_size, NULL, 0);   (weights: the bytes of {name}.weights)
 *   if (rc != {N}_OK) fprintf(stderr, "%s: %s\\n", {name}_strerror(rc), {name}_last_error(&ctx));
 *   rc = {name}_run(&ctx, ...);   (host buffers in and out; or {name}_run_device: {dev})
 *   {name}_release(&ctx);
 *
 * init picks the device ({'the first GPU of the first platform that has one, else the first device' if dialect == 'opencl' else 'the current CUDA device'}),
 * makes the one device allocation the model uses ({N}_DEVICE_BYTES: weights, activations, I/O staging)
 * and uploads the weights; run allocates nothing. One ctx per concurrent caller. The workspace arguments
 * of init are unused (the CPU artifact's signature): pass NULL, 0.
{doc}
 */
#ifndef {N}_H
#define {N}_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {{
#endif

#define {N}_ABI_VERSION {ABI_VERSION}
#define {N}_SIGNATURE UINT64_C(@SIGNATURE@)
#define {N}_WEIGHTS_BYTES {blob_bytes}u
#define {N}_WORKSPACE_BYTES 0u
#define {N}_DEVICE_BYTES {lay.total}u
#define {N}_NUM_INPUTS {len(g.inputs)}
#define {N}_NUM_OUTPUTS {len(g.outputs)}

enum {{
{status}
}};

enum {{
{dtypes}
}};

typedef struct {name}_ctx {{
    void *context, *device, *queue, *program; /* OpenCL handles; CUDA: queue is the cudaStream_t */
    void *memory;                             /* the one device allocation (cl_mem / device pointer) */
    void *kernels[{nkernels}];
    void *graph; /* CUDA: the captured graph's cudaGraphExec_t ({name}_use_graph) */
    uint32_t initialized, owns_queue;
    char device_name[128];
    char message[1024]; /* the driver's words for the last failure (OpenCL: the head of the build log) */
}} {name}_ctx;

typedef struct {name}_tensor_desc {{
    const char *name;
    int dtype; /* {N}_DTYPE_* */
    int rank;
    const int64_t *shape;
    size_t nbytes;
}} {name}_tensor_desc;

int {name}_abi_version(void);
uint64_t {name}_signature(void);
size_t {name}_workspace_size(void); /* 0: a GPU artifact needs no host workspace */
size_t {name}_device_memory_size(void);
size_t {name}_weights_size(void);
size_t {name}_ctx_size(void);
/* Checks the header signature and the weights blob (magic, format version, size, checksum), finds the
 * device, builds the kernels (OpenCL), allocates and uploads. Returns {N}_OK or an error code; on error
 * nothing stays allocated. */
int {name}_init_checked({name}_ctx *ctx, const void *weights, size_t weights_size, void *workspace,
                        size_t workspace_size, uint64_t header_signature);
#define {name}_init(ctx, weights, weights_size, workspace, workspace_size) \\
    {name}_init_checked((ctx), (weights), (weights_size), (workspace), (workspace_size), {N}_SIGNATURE)
{extra}
/* Frees what init made (device memory, kernels; the queue and context when init made them). */
void {name}_release({name}_ctx *ctx);
/* The device init chose ("opencl: <device name>", "cuda: <device name> sm_XX"); NULL before init. */
const char *{name}_isa(const {name}_ctx *ctx);
/* The driver's message for the last failure of this ctx ("" if none). */
const char *{name}_last_error(const {name}_ctx *ctx);
/* Runs the model on host buffers: copies the inputs in, runs, copies the outputs out; returns when done.
 * {N}_ERR_INDEX (outputs untouched) for an index input out of range. */
int {name}_run(const {name}_ctx *ctx, {typed});
int {name}_run_v(const {name}_ctx *ctx, const void *const *inputs, void *const *outputs);
/* Enqueues the model on device buffers ({dev}, dense, the shapes above) on `queue` (a {q}; NULL:
 * the ctx's own) and returns without waiting. {name}_run_status waits for it and says whether an index
 * was out of range (then the outputs hold zeros where it was read). */
int {name}_run_device(const {name}_ctx *ctx, const void *const *inputs, void *const *outputs, void *queue);
int {name}_run_status(const {name}_ctx *ctx, void *queue);
const char *{name}_strerror(int status);
int {name}_num_inputs(void);
int {name}_num_outputs(void);
const {name}_tensor_desc *{name}_inputs(void);
const {name}_tensor_desc *{name}_outputs(void);

#ifdef __cplusplus
}}
#endif

#endif /* {N}_H */
"""
    return text.replace("@SIGNATURE@", header_signature(text))


# ---------------------------------------------------------------- host code shared by both dialects

def _common(g: Graph, name: str, lay: Layout, blob: WeightsBlob, in_names: list[str], out_names: list[str],
            target: Any, prov: dict[str, Any], command: str, errors: set[str]) -> dict[str, str]:
    N = name.upper()
    status_rows = status_messages(name, cpu_msg=False)
    offs = lambda xs: ", ".join(f"{x}u" for x in xs) or "0u"  # noqa: E731
    sizes = lambda vs: ", ".join(f"{v.nbytes}u" for v in vs) or "0u"  # noqa: E731
    params = typed_params(g, in_names, out_names)
    head = f"""/* {name}: generated by pt2c {__version__} -- do not edit; regenerate instead.
 *
 * source model : {c_comment(prov.get('source', ''))} (exported with torch {c_comment(prov.get('exported_with_torch', ''))}, export schema {c_comment(prov.get('schema_version', ''))})
 * command      : {c_comment(command or 'pt2c.compile(...)', 1000)}
 * target       : {target.name} ({c_comment(target.description)})
 * device memory: {lay.total} bytes (weights {blob.data_bytes}, activations {lay.err - lay.ws - sum(_up(max(v.nbytes, 1)) for v in g.inputs + g.outputs)}, I/O staging, error word)
 * weights      : {len(blob)} bytes, crc32 {blob.crc:08x}
 */"""
    tables = f"""static const uint32_t expected_crc32 = 0x{blob.crc:08x}u;
static const uint64_t expected_data_bytes = {blob.data_bytes}u;
/* byte offsets in the device allocation: weights data, activations, I/O staging, the error word */
#define W_OFF {lay.w}u
#define WS_OFF {lay.ws}u
#define ERR_OFF {lay.err}u
static const size_t in_off[] = {{{offs(lay.inputs)}}};
static const size_t out_off[] = {{{offs(lay.outputs)}}};
static const size_t in_bytes[] = {{{sizes(g.inputs)}}};
static const size_t out_bytes[] = {{{sizes(g.outputs)}}};

{io_tables(g, name, in_names, out_names)}

static const char *const status_messages[] = {{
{status_rows}
}};

{weights_helpers()}"""
    api = f"""int {name}_abi_version(void) {{ return {N}_ABI_VERSION; }}
uint64_t {name}_signature(void) {{ return {N}_SIGNATURE; }}
size_t {name}_workspace_size(void) {{ return 0; }}
size_t {name}_device_memory_size(void) {{ return {N}_DEVICE_BYTES; }}
size_t {name}_weights_size(void) {{ return {N}_WEIGHTS_BYTES; }}
size_t {name}_ctx_size(void) {{ return sizeof({name}_ctx); }}
int {name}_num_inputs(void) {{ return {N}_NUM_INPUTS; }}
int {name}_num_outputs(void) {{ return {N}_NUM_OUTPUTS; }}
const {name}_tensor_desc *{name}_inputs(void) {{ return inputs_desc; }}
const {name}_tensor_desc *{name}_outputs(void) {{ return outputs_desc; }}

const char *{name}_strerror(int status)
{{
    if (status < 0 || status >= (int)(sizeof(status_messages) / sizeof(status_messages[0]))) return "unknown status";
    return status_messages[status];
}}

const char *{name}_isa(const {name}_ctx *ctx)
{{
    return ctx && ctx->initialized == 0x70743263u ? ctx->device_name : NULL;
}}

const char *{name}_last_error(const {name}_ctx *ctx)
{{
    return ctx ? ctx->message : "";
}}

/* the blob's tensor data after its checks (header signature, magic, format version, size, checksum) */
static int check_weights(const void *weights, size_t weights_size, uint64_t header_signature,
                         const unsigned char **data)
{{
    const unsigned char *blob = (const unsigned char *)weights;
    uint64_t data_bytes;
    int i;
    if (header_signature != {N}_SIGNATURE) return {N}_ERR_SIGNATURE;
    if (!blob) return {N}_ERR_NULL_ARG;
{weights_check(N)}
    *data = blob + {HEADER_BYTES};
    return {N}_OK;
}}

int {name}_run(const {name}_ctx *ctx, {params})
{{
    const void *inputs[] = {{{', '.join(f'(const void *){n}' for n in in_names) or 'NULL'}}};
    void *outputs[] = {{{', '.join(f'(void *){n}' for n in out_names)}}};
    return {name}_run_v(ctx, inputs, outputs);
}}"""
    return {"head": head, "tables": tables, "api": api, "N": N}


# ---------------------------------------------------------------- build files

def _make_rules(deps: str, compile_cmd: str, link_cmd: str) -> str:
    """The rules both dialects' Makefiles share: the object from `deps`, a static and a shared library, clean."""
    return f"""all: static shared
static: $(BUILDDIR)/lib$(NAME).a
shared: $(BUILDDIR)/lib$(NAME).so

$(BUILDDIR):
\tmkdir -p $(BUILDDIR)

$(BUILDDIR)/$(NAME).o: {deps} | $(BUILDDIR)
\t{compile_cmd}

$(BUILDDIR)/lib$(NAME).a: $(BUILDDIR)/$(NAME).o
\tar rcs $@ $<

$(BUILDDIR)/lib$(NAME).so: $(BUILDDIR)/$(NAME).o
\t{link_cmd}

clean:
\trm -rf $(BUILDDIR)

.PHONY: all static shared clean
"""


def _build_files(out_dir: Path, name: str, target: Any) -> list[str]:
    if target.backend == "cuda":
        archs = ";".join([f"{a}-real" for a in target.gpu_archs[:-1]] + [str(target.gpu_archs[-1])])
        gencode = " ".join(target.cflags)
        cmake = f"""# {name}: build files generated by pt2c {__version__} (--target {target.name})
# add_subdirectory() it, or build it alone: cmake -S . -B build && cmake --build build
cmake_minimum_required(VERSION 3.18)
project({name} LANGUAGES CUDA)
if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
  # machine code for each listed architecture, and the last one's PTX for newer GPUs
  set(CMAKE_CUDA_ARCHITECTURES {archs})
endif()
add_library({name} {name}.cu)
target_include_directories({name} PUBLIC $<BUILD_INTERFACE:${{CMAKE_CURRENT_SOURCE_DIR}}> $<INSTALL_INTERFACE:include>)
set_target_properties({name} PROPERTIES CUDA_RUNTIME_LIBRARY Static POSITION_INDEPENDENT_CODE ON)
install(TARGETS {name} ARCHIVE DESTINATION lib LIBRARY DESTINATION lib)
install(FILES {name}.h DESTINATION include)
"""
        make = f"""# {name}: build files generated by pt2c {__version__} (--target {target.name})
# make            -> $(BUILDDIR)/lib{name}.a and lib{name}.so (the CUDA runtime linked statically)
# make NVCC=/usr/local/cuda/bin/nvcc CUDA_ARCHS="-gencode=arch=compute_89,code=sm_89"
NAME       = {name}
NVCC      ?= nvcc
NVCCFLAGS ?= -O3
CUDA_ARCHS ?= {gencode}
BUILDDIR  ?= build

""" + _make_rules("$(NAME).cu $(NAME).h $(wildcard pt2c_kernels/*.h)",
                  "$(NVCC) $(NVCCFLAGS) $(CUDA_ARCHS) -Xcompiler -fPIC -c $(NAME).cu -o $@",
                  "$(NVCC) -shared --cudart static $(CUDA_ARCHS) -o $@ $<")
        cmd = f"nvcc -O3 {gencode} -Xcompiler -fPIC -c {name}.cu -o {name}.o"
        src = f"{name}.cu"
    else:
        cmake = f"""# {name}: build files generated by pt2c {__version__} (--target opencl)
# add_subdirectory() it, or build it alone: cmake -S . -B build && cmake --build build
cmake_minimum_required(VERSION 3.16)
project({name} LANGUAGES C)
find_package(OpenCL REQUIRED)
add_library({name} {name}.c)
target_include_directories({name} PUBLIC $<BUILD_INTERFACE:${{CMAKE_CURRENT_SOURCE_DIR}}> $<INSTALL_INTERFACE:include>)
target_link_libraries({name} PUBLIC OpenCL::OpenCL)
set_target_properties({name} PROPERTIES C_STANDARD 99 C_STANDARD_REQUIRED ON POSITION_INDEPENDENT_CODE ON)
install(TARGETS {name} ARCHIVE DESTINATION lib LIBRARY DESTINATION lib)
install(FILES {name}.h DESTINATION include)
"""
        make = f"""# {name}: build files generated by pt2c {__version__} (--target opencl)
# make            -> $(BUILDDIR)/lib{name}.a and lib{name}.so (linked with the OpenCL ICD loader)
NAME      = {name}
CC       ?= cc
CFLAGS   ?= -O2 -std=c99 -Wall -Wextra -pedantic
OPENCL_LIBS ?= -lOpenCL
BUILDDIR ?= build

""" + _make_rules("$(NAME).c $(NAME).h", "$(CC) $(CFLAGS) -fPIC -c $(NAME).c -o $@",
                  "$(CC) -shared -o $@ $< $(OPENCL_LIBS)")
        cmd = f"cc -O2 -std=c99 -fPIC -c {name}.c -o {name}.o"
        src = f"{name}.c"
    (out_dir / "CMakeLists.txt").write_text(cmake)
    (out_dir / "Makefile").write_text(make)
    (out_dir / "compile_commands.json").write_text(json.dumps(
        [{"directory": ".", "command": cmd, "file": src}], indent=2) + "\n")
    return ["CMakeLists.txt", "Makefile", "compile_commands.json"]
