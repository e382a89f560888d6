"""Writes the artifact: <name>.h, <name>.c, pt2c_kernels/, <name>.weights, manifest.json
and the build files.  Everything is deterministic: the same program gives the same bytes."""

from __future__ import annotations

import hashlib
import json
import re
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from pt2c.version import __version__
from pt2c.codegen.buildfiles import write_build_files
from pt2c.codegen.capi import (HEADER_BYTES, WEIGHTS_FORMAT_VERSION, dtype_enum, io_doc, io_tables, status_enum,
                               status_messages, typed_params, weights_check, weights_helpers)
from pt2c.codegen.escape import c_comment
from pt2c.codegen.cppheader import write_cpp_header
from pt2c.custom import HEADER, c_prototype
from pt2c.codegen.driver import write_driver
from pt2c.codegen.dynamic import json_shape, sizes_header, sizes_source, state_header, state_source
from pt2c.codegen.emitter import Emitter
from pt2c.ir import Graph, Value, walk
from pt2c.ops import OPS, concrete
from pt2c.passes.memory import ALIGN, MemoryPlan
from pt2c.sym import hint, samples
from pt2c.targets import X86_LEVELS

if TYPE_CHECKING:
    from pt2c.options import CompileOptions

SIZES_PARAM = ", const int64_t *sizes"  # the run-time sizes (a model with dynamic dims)
ABI_VERSION = 3  # 2: <name>_ctx gained `variant`, <name>_isa(); 3: init takes the workspace size + the header's signature
WEIGHTS_MAGIC = b"PT2CWGT\0"


# Init-time ISA check (no SIGILL): when compiled with x86 SIMD flags, <name>_init asks the CPU
# (cpuid + xgetbv) for every extension the compiler was allowed to use and returns
# ERR_CPU_UNSUPPORTED if one is missing.  Baseline targets (generic, x86_64, aarch64, ...)
# compile it to `return 1`.  -DPT2C_FAKE_CPU_FEATURES=0 simulates a CPU without them (tests).
_CPU_CHECK = r"""/* ---- init-time instruction-set check (x86 SIMD builds, and aarch64+dotprod on Linux; NEON is baseline on aarch64) ---- */
#if defined(__x86_64__) || defined(__i386__) || defined(_M_X64) || defined(_M_IX86)
#if defined(__AVX512F__)
#define PT2C_BUILT_ISA "AVX-512 (x86_64-v4: AVX512F/BW/CD/DQ/VL, AVX2, FMA)"
#elif defined(__AVX2__) || defined(__FMA__)
#define PT2C_BUILT_ISA "AVX2+FMA (x86_64-v3: AVX2, FMA, BMI1/2, F16C, MOVBE, LZCNT)"
#endif
#elif defined(__aarch64__) && defined(__ARM_FEATURE_DOTPROD) && defined(__linux__)
#define PT2C_BUILT_ISA "the ARMv8.2-A dot product extension (aarch64+dotprod)"
#define PT2C_ARM_HWCAP_ASIMDDP (1ul << 20) /* <asm/hwcap.h> HWCAP_ASIMDDP */
#endif
#ifdef PT2C_BUILT_ISA
#if defined(PT2C_ARM_HWCAP_ASIMDDP)
#define PT2C_CPU_MSG "this library was built for " PT2C_BUILT_ISA " but the CPU lacks it; rebuild for --target aarch64"
#else
#define PT2C_CPU_MSG "this library was built for " PT2C_BUILT_ISA " but the CPU lacks it; rebuild for a lower --target (x86_64-v2, x86_64)"
#endif
#else
#define PT2C_CPU_MSG "this library was built for an instruction set the CPU lacks; rebuild for a lower --target"
#endif
#if defined(PT2C_BUILT_ISA) && !defined(PT2C_FAKE_CPU_FEATURES) && (defined(__GNUC__) || defined(__clang__)) \
    && (defined(__x86_64__) || defined(__i386__))
#include <cpuid.h>
#define PT2C_CPU_PROBE 1
#elif defined(PT2C_ARM_HWCAP_ASIMDDP) && !defined(PT2C_FAKE_CPU_FEATURES)
#include <sys/auxv.h>
#define PT2C_ARM_PROBE 1
#endif

/* 1 when the running CPU (and OS) support every extension this translation unit was compiled for. */
static int cpu_supported(void)
{
#if defined(PT2C_BUILT_ISA) && defined(PT2C_FAKE_CPU_FEATURES)
    return (PT2C_FAKE_CPU_FEATURES) != 0; /* test hook: 0 simulates a CPU without the built-in ISA */
#elif defined(PT2C_ARM_PROBE)
    return (getauxval(AT_HWCAP) & PT2C_ARM_HWCAP_ASIMDDP) != 0;
#elif defined(PT2C_CPU_PROBE)
    unsigned int a = 0, b = 0, c = 0, d = 0, xcr0 = 0, xcr0_hi = 0;
    if (!__get_cpuid_count(1, 0, &a, &b, &c, &d)) return 0;
    if (!(c & (1u << 27)) || !(c & (1u << 28))) return 0; /* OSXSAVE, AVX */
#if defined(__FMA__)
    if (!(c & (1u << 12))) return 0;
#endif
#if defined(__F16C__)
    if (!(c & (1u << 29))) return 0;
#endif
#if defined(__MOVBE__)
    if (!(c & (1u << 22))) return 0;
#endif
    __asm__ __volatile__("xgetbv" : "=a"(xcr0), "=d"(xcr0_hi) : "c"(0));
    (void)xcr0_hi;
    if ((xcr0 & 6u) != 6u) return 0; /* the OS saves XMM and YMM state */
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return 0;
#if defined(__AVX2__)
    if (!(b & (1u << 5))) return 0;
#endif
#if defined(__BMI__)
    if (!(b & (1u << 3))) return 0;
#endif
#if defined(__BMI2__)
    if (!(b & (1u << 8))) return 0;
#endif
#if defined(__AVX512F__)
    if ((xcr0 & 0xE6u) != 0xE6u) return 0; /* the OS saves opmask and ZMM state */
    if (!(b & (1u << 16))) return 0;
#endif
#if defined(__AVX512DQ__)
    if (!(b & (1u << 17))) return 0;
#endif
#if defined(__AVX512CD__)
    if (!(b & (1u << 28))) return 0;
#endif
#if defined(__AVX512BW__)
    if (!(b & (1u << 30))) return 0;
#endif
#if defined(__AVX512VL__)
    if (!(b & (1u << 31))) return 0;
#endif
#if defined(__LZCNT__)
    if (!__get_cpuid_count(0x80000001u, 0, &a, &b, &c, &d) || !(c & (1u << 5))) return 0;
#endif
    return 1;
#else
    return 1;
#endif
}
"""


# Multi-versioning (--target x86_64,x86_64-v3,...): the x86-64 level of the running CPU, from cpuid and
# xgetbv (the OS must save the YMM / ZMM state), as the psABI defines the levels.  0 = baseline
# x86-64, 1 = v2, 2 = v3, 3 = v4.  Non-x86 or non-GNU compilers: 0 (the baseline path, always safe).
_X86_LEVEL = r"""/* ---- multi-versioning: the x86-64 level of the running CPU (psABI levels; 0 = baseline .. 3 = v4) ---- */
#if (defined(__GNUC__) || defined(__clang__)) && (defined(__x86_64__) || defined(__i386__))
#include <cpuid.h>
#define PT2C_X86_PROBE 1
#endif

static int cpu_x86_level(void)
{
#if defined(PT2C_X86_PROBE)
    unsigned int a = 0, b = 0, c1 = 0, d = 0, b7 = 0, c7 = 0, cx = 0, xcr0 = 0, xcr0_hi = 0;
    int ymm, zmm;
    if (!__get_cpuid_count(1, 0, &a, &b, &c1, &d)) return 0;
    if (!__get_cpuid_count(0x80000001u, 0, &a, &b, &cx, &d)) cx = 0;
    /* v2: SSE3, SSSE3, SSE4.1, SSE4.2, POPCNT, CMPXCHG16B, LAHF/SAHF */
    if ((c1 & 0x00982201u) != 0x00982201u || !(cx & 1u)) return 0;
    /* v3: + AVX, OSXSAVE (xgetbv: XMM and YMM state enabled), FMA, F16C, MOVBE, AVX2, BMI1, BMI2, LZCNT */
    if ((c1 & 0x38401000u) != 0x38401000u || !(cx & (1u << 5))) return 1;
    __asm__ __volatile__("xgetbv" : "=a"(xcr0), "=d"(xcr0_hi) : "c"(0));
    (void)xcr0_hi;
    ymm = (xcr0 & 6u) == 6u;
    zmm = (xcr0 & 0xE6u) == 0xE6u; /* + opmask, ZMM0-15 upper halves, ZMM16-31 */
    if (!ymm || !__get_cpuid_count(7, 0, &a, &b7, &c7, &d)) return 1;
    if ((b7 & 0x00000128u) != 0x00000128u) return 1;
    /* v4: + AVX512F, AVX512DQ, AVX512CD, AVX512BW, AVX512VL */
    if (!zmm || (b7 & 0xD0030000u) != 0xD0030000u) return 2;
    return 3;
#else
    return 0;
#endif
}
"""


@dataclass
class Artifact:
    out_dir: Path
    name: str
    files: list[str]
    manifest: dict[str, Any]


class WeightsBlob:
    """The weights file: a header, then the constants' data, each 64-byte aligned (offsets[id(value)]:
    relative to the data start).  Laid out and checksummed over the arrays in place, and written chunk
    by chunk: the tensors are never copied into one bytes object (a 124M-parameter model's blob was
    held four times over)."""

    def __init__(self, consts: list[Value]) -> None:
        self.offsets: dict[int, int] = {}
        self._parts: list[tuple[int, np.ndarray]] = []  # (zero bytes before, the data)
        seen: dict[tuple[int, int], list[tuple[np.ndarray, int]]] = {}  # (size, crc32) -> (data, offset)
        pos = crc = 0
        for v in consts:
            data = np.ascontiguousarray(v.data).astype(np.dtype(v.data.dtype).newbyteorder("<"), copy=False)
            if v.dtype == "bool":
                data = data.astype(np.uint8)
            data = data.reshape(-1).view(np.uint8)
            # equal bytes are stored once (weights tied or shared by several layers, however they were reached)
            same = seen.setdefault((data.size, zlib.crc32(data)), [])
            hit = next((off for d, off in same if np.array_equal(d, data)), None)
            if hit is not None:
                self.offsets[id(v)] = hit
                continue
            pad = (-pos) % ALIGN
            crc = zlib.crc32(data, zlib.crc32(bytes(pad), crc))
            self._parts.append((pad, data))
            self.offsets[id(v)] = pos + pad
            same.append((data, pos + pad))
            pos += pad + data.size
        self.data_bytes, self.crc = pos, crc
        header = WEIGHTS_MAGIC + struct.pack("<IIQQ", WEIGHTS_FORMAT_VERSION, HEADER_BYTES, pos, crc)
        self.header = header + bytes(HEADER_BYTES - len(header))

    def __len__(self) -> int:
        return HEADER_BYTES + self.data_bytes

    def chunks(self) -> Iterator[bytes | np.ndarray]:
        yield self.header
        for pad, data in self._parts:
            if pad:
                yield bytes(pad)
            yield data

    def write(self, path: Path) -> None:
        with open(path, "wb") as f:
            for c in self.chunks():
                f.write(c)

    def tobytes(self) -> bytes:
        return b"".join(bytes(c) for c in self.chunks())


def _kernel_deps(names: set[str]) -> list[str]:
    """Kernel files needed (with their #include'd kernel dependencies), in include order."""
    kdir = resources.files("pt2c.kernels")
    order: list[str] = []

    def visit(f: str) -> None:
        if f in order:
            return
        text = (kdir / f).read_text()
        for dep in re.findall(r'#include "([a-z0-9_]+\.[ch])"', text):
            visit(dep)
        order.append(f)

    visit("common.h")
    visit("ewise.h")
    for k in sorted(names):
        visit(f"{k}.c")
    return order


def _custom_kernels(g: Graph) -> dict[str, str]:
    """The users' kernels the graph calls: C function name -> source (one file each in custom_ops/)."""
    out: dict[str, str] = {}
    for n in walk(g):
        if n.op == "custom_call":
            out[n.attrs["function"]] = n.attrs["_source"]
    return dict(sorted(out.items()))


def _includes(g: Graph, kfiles: list[str]) -> str:
    """The #includes of a translation unit: pt2c's kernels, then each user kernel after a static declaration
    of its fixed prototype (so the compiler checks the definition, and each code path has its own copy)."""
    customs = _custom_kernels(g)
    lines = [f'#include "custom_ops/{HEADER}"'] if customs else []  # (pt2c_kernels/custom_call.c uses it)
    lines += [f'#include "pt2c_kernels/{f}"' for f in kfiles]
    if customs:
        lines += ["", "/* users' kernels for custom ops (see custom_ops/ and docs/custom-ops.md) */"]
        for fn in customs:
            lines += [f"static {c_prototype(fn)};", f'#include "custom_ops/{fn}.c"']
    return "\n".join(lines)


def _io_names(g: Graph) -> tuple[list[str], list[str]]:
    ins = [v.name for v in g.inputs]
    outs = ["output"] if len(g.outputs) == 1 else [f"output{i}" for i in range(len(g.outputs))]
    outs = [o if o not in ins else o + "_" for o in outs]
    return ins, outs


def variant_file(name: str, t: Any) -> str:
    """The source file of an extra code path (multi-versioning): ``<name>_x86_64_v3.c``."""
    return f"{name}_{t.name.replace('-', '_')}.c"


def write_artifact(g: Graph, plan: MemoryPlan, out_dir: Path, options: CompileOptions,
                   provenance: dict[str, Any] | None = None) -> Artifact:
    """Write the files of a planned graph (passes.finish: outputs materialised, memory planned and
    verified); nothing here changes the graph.  options.target: the baseline preset (what <name>.c is
    built for); options.variants: extra x86-64 levels, each written to its own <name>_<level>.c and
    chosen at init when the CPU has it.

    out_dir: an empty folder (the staging folder of codegen/outdir.py); nothing is removed here: moving
    the files into the output folder and removing an earlier compile's stale files is outdir's commit."""
    name = g.name
    target, embed_weights, openmp = options.target, options.embed_weights, options.openmp
    command, freestanding = options.command, options.freestanding
    out_dir.mkdir(parents=True, exist_ok=True)
    consts = g.constants()
    blob = WeightsBlob(consts)
    em = Emitter(g, plan, blob.offsets)
    body = em.emit_graph()

    kernels = {k for n in walk(g) for k in OPS[n.op].kernels}
    kfiles = _kernel_deps(kernels)
    kdir = out_dir / "pt2c_kernels"
    kdir.mkdir(exist_ok=True)
    src = resources.files("pt2c.kernels")
    for f in kfiles:
        (kdir / f).write_text((src / f).read_text())
    customs = _custom_kernels(g)
    if customs:
        cdir = out_dir / "custom_ops"
        cdir.mkdir()
        (cdir / HEADER).write_text((src / HEADER).read_text())
        for fn, text in customs.items():
            (cdir / f"{fn}.c").write_text(text)

    in_names, out_names = _io_names(g)
    prov = provenance or {}
    header = _header(g, name, plan, len(blob), in_names, out_names)
    variants = list(options.variants)
    source = _source(g, name, plan, blob, body, kfiles, in_names, out_names, embed_weights, target, prov, command,
                     variants)
    (out_dir / f"{name}.h").write_text(header)
    (out_dir / f"{name}.c").write_text(source)
    vfiles = []
    for t in variants:
        vfiles.append(variant_file(name, t))
        (out_dir / vfiles[-1]).write_text(_variant_source(name, t, body, _includes(g, kfiles), bool(g.meta.get("dims"))))
    files = [f"{name}.h", f"{name}.c", *vfiles] + [f"pt2c_kernels/{f}" for f in kfiles]
    if customs:
        files += [f"custom_ops/{HEADER}"] + [f"custom_ops/{fn}.c" for fn in customs]
    wfile = out_dir / f"{name}.weights"
    if not embed_weights:
        blob.write(wfile)
        files.append(wfile.name)

    flops = sum(OPS[n.op].flops(n) for n in walk(g) if OPS[n.op].flops)
    manifest = {
        "pt2c_version": __version__,
        "abi_version": ABI_VERSION,
        "signature": re.search(r"_SIGNATURE UINT64_C\((0x[0-9a-f]+)\)", header).group(1),  # <NAME>_SIGNATURE
        "name": name,
        "source": prov.get("source", ""),
        "torch_version": prov.get("torch_version", ""),
        "exported_with_torch": prov.get("exported_with_torch", ""),
        "export_schema_version": prov.get("schema_version", ""),
        # dims the export declared dynamic, compiled at the example's size (pt2c compiles static shapes so far)
        "specialized": prov.get("specialized", []),
        # dims compiled dynamic: each size's C name, input dim, range and example (manifest shapes name them)
        # (the input dim has scale * size + offset elements: 1 and 0 unless the export derived it, h = 32 * k)
        "sizes": [{"name": d.cname, "input": d.input, "dim": d.dim, "scale": d.scale, "offset": d.offset,
                   "min": d.lo, "max": d.hi, "example": d.hint}
                  for d in (g.meta["dims"].dims if g.meta.get("dims") else [])],
        # optimisations left out because they needed a dynamic size static (the code is right, maybe slower)
        "skipped_passes": g.meta.get("skipped_passes", {}),
        "target": ",".join(t.name for t in [target, *variants]),
        "target_cflags": list(target.cflags),
        # extra code paths (multi-versioning): source file and the flags it is compiled with
        "variants": [{"target": t.name, "file": variant_file(name, t), "cflags": list(t.cflags)} for t in variants],
        "openmp": openmp,
        "freestanding": freestanding,
        "inputs": [{"name": n, "shape": json_shape(v.shape), "dtype": v.dtype} for n, v in zip(in_names, g.inputs)],
        "outputs": [{"name": n, "shape": json_shape(v.shape), "dtype": v.dtype} for n, v in zip(out_names, g.outputs)],
        "weights": {"file": None if embed_weights else wfile.name, "embedded": embed_weights, "bytes": len(blob),
                    "format_version": WEIGHTS_FORMAT_VERSION, "crc32": f"{blob.crc:08x}"},
        "memory": {"workspace_bytes": plan.workspace_bytes, "arena_bytes": plan.arena_bytes,
                   "scratch_bytes": plan.scratch_bytes, "lower_bound_bytes": plan.lower_bound,
                   **({"state_bytes": plan.state_bytes} if plan.state_bytes else {})},
        # buffers the program mutates (kept in the workspace from run to run; <name>_reset_state)
        # (a buffer the program only writes, never reads, is not kept)
        "state": [{"name": g.meta["state"]["names"][n.attrs["index"]], "shape": list(n.outputs[0].shape),
                   "dtype": n.outputs[0].dtype} for n in g.nodes if n.op == "state"],
        "ops": sorted({n.op for n in walk(g)}),
        "op_counts": {op: sum(1 for n in walk(g) if n.op == op) for op in sorted({n.op for n in walk(g)})},
        "flops": hint(flops),  # (at the example's sizes)
        "kernels": kfiles,
    }
    (out_dir / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    files += write_cpp_header(out_dir, name, manifest)
    files += write_driver(out_dir, name, manifest)
    files += write_build_files(out_dir, name, target, openmp=openmp,
                               variants=[(variant_file(name, t), t.flags_str) for t in variants])
    files.append("manifest.json")
    return Artifact(out_dir, name, files, manifest)


# ---------------------------------------------------------------- header

def _header(g: Graph, name: str, plan: MemoryPlan, blob_bytes: int, in_names: list[str], out_names: list[str]) -> str:
    N = name.upper()
    status, dtypes, typed = status_enum(N), dtype_enum(N), typed_params(g, in_names, out_names)
    doc = io_doc(g, in_names, out_names)
    dims = g.meta.get("dims")
    ctx_sizes, sizes_decl = sizes_header(g, name)
    state_decl = state_header(g, plan, name)
    text = f"""/* {name}.h: C API of the model `{name}` (generated by pt2c {__version__}; do not edit).
 *
 * Usage:
 *   {name}_ctx ctx;
 *   void *ws = aligned_alloc({N}_WORKSPACE_ALIGN, {N}_WORKSPACE_BYTES);
 *   int rc = {name}_init(&ctx, weights, weights_size, ws, {N}_WORKSPACE_BYTES);   (weights: the bytes of {name}.weights)
 *   if (rc != {N}_OK) fprintf(stderr, "%s\\n", {name}_strerror(rc));
 *   rc = {name}_run(&ctx, ...);
 *
 * No allocation, no global mutable state: one ctx + workspace per concurrent caller (a ctx is
 * not to be used by two threads at once).  Every function checks its pointers: NULL gives
 * {N}_ERR_NULL_ARG, never a crash.  {name}_init is a macro that also passes this header's
 * {N}_SIGNATURE, so a program built against the header of another compile of `{name}` gets
 * {N}_ERR_SIGNATURE instead of overrunning its buffers.
 * On Linux, weights and workspace of 2 MiB or more run faster from transparent huge pages when
 * the caches are cold between runs: start them on a 2 MiB boundary and madvise(MADV_HUGEPAGE).
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
/* A hash of this header's text: init refuses a library generated with a different header. */
#define {N}_SIGNATURE UINT64_C(@SIGNATURE@)
#define {N}_WEIGHTS_BYTES {blob_bytes}u
#define {N}_WORKSPACE_BYTES {max(plan.workspace_bytes, ALIGN)}u
#define {N}_WORKSPACE_ALIGN {ALIGN}
#define {N}_NUM_INPUTS {len(g.inputs)}
#define {N}_NUM_OUTPUTS {len(g.outputs)}{f"{chr(10)}#define {N}_NUM_SIZES {len(dims.dims)}" if dims else ""}

enum {{
{status}
}};

enum {{
{dtypes}
}};

typedef struct {name}_ctx {{
    const unsigned char *weights; /* start of the tensor data inside the weights blob */
    unsigned char *workspace;
    uint32_t initialized;
    uint32_t variant; /* the code path init chose (multi-versioned builds; see {name}_isa) */{ctx_sizes}
}} {name}_ctx;

typedef struct {name}_tensor_desc {{
    const char *name;
    int dtype; /* {N}_DTYPE_* */
    int rank;
    const int64_t *shape;
    size_t nbytes;
}} {name}_tensor_desc;

/* {N}_ABI_VERSION of the compiled library (compare with the header you compiled against). */
int {name}_abi_version(void);
/* {N}_SIGNATURE of the library's own header. */
uint64_t {name}_signature(void);
size_t {name}_workspace_size(void);
size_t {name}_weights_size(void);
size_t {name}_ctx_size(void);
/* Checks that header_signature is the library's own header's {N}_SIGNATURE ({N}_ERR_SIGNATURE), the CPU
 * (x86 SIMD builds: {N}_ERR_CPU_UNSUPPORTED if it lacks the instruction set the library was compiled for),
 * the workspace (at least {N}_WORKSPACE_BYTES bytes, {N}_WORKSPACE_ALIGN-byte aligned) and the weights
 * blob (magic, format version, size, checksum), and binds ctx to them. weights may be NULL when the
 * weights are embedded in the library. Returns {N}_OK or an error code. */
int {name}_init_checked({name}_ctx *ctx, const void *weights, size_t weights_size, void *workspace,
                        size_t workspace_size, uint64_t header_signature);
#define {name}_init(ctx, weights, weights_size, workspace, workspace_size) \\
    {name}_init_checked((ctx), (weights), (weights_size), (workspace), (workspace_size), {N}_SIGNATURE)
/* The instruction-set code path that init chose for this CPU ("x86_64-v3", ...: multi-versioned builds
 * pick the best one compiled in; otherwise the target preset's name); NULL before a successful init. */
const char *{name}_isa(const {name}_ctx *ctx);
/* Runs the model on caller-owned buffers (dense, row-major, of the shapes and dtypes above). Returns
 * {N}_OK or an error code ({N}_ERR_NULL_ARG for any NULL pointer, {N}_ERR_INDEX for an index input out
 * of the range PyTorch accepts). */
int {name}_run(const {name}_ctx *ctx, {typed});
/* The same with arrays of pointers, in the order of {name}_inputs() / {name}_outputs(). */
int {name}_run_v(const {name}_ctx *ctx, const void *const *inputs, void *const *outputs);
const char *{name}_strerror(int status);
/* I/O descriptor tables ({name}_num_inputs() / {name}_num_outputs() entries): the library's own truth. */
int {name}_num_inputs(void);
int {name}_num_outputs(void);
const {name}_tensor_desc *{name}_inputs(void);
const {name}_tensor_desc *{name}_outputs(void);
{sizes_decl}{state_decl}
#ifdef __cplusplus
}}
#endif

#endif /* {N}_H */
"""
    return text.replace("@SIGNATURE@", header_signature(text))


def header_signature(text: str) -> str:
    """<NAME>_SIGNATURE: the first 64 bits of the SHA-256 of the header's text (with the placeholder)."""
    return "0x" + hashlib.sha256(text.encode()).hexdigest()[:16]


# ---------------------------------------------------------------- source

def _c_bytes(data: bytes, per_line: int = 24) -> str:
    rows = []
    for i in range(0, len(data), per_line):
        rows.append("    " + ",".join(str(b) for b in data[i:i + per_line]) + ",")
    return "\n".join(rows)


def _source(g: Graph, name: str, plan: MemoryPlan, blob: WeightsBlob, body: list[str], kfiles: list[str],
            in_names: list[str], out_names: list[str], embed: bool, target: Any, prov: dict[str, Any], command: str,
            variants: list[Any] | None = None) -> str:
    N = name.upper()
    variants = variants or []
    paths = [target, *variants]
    dims = g.meta.get("dims")
    fwd = [f"{name}__forward_{t.name.replace('-', '_')}" for t in variants]
    if variants:
        decls = "".join(f"int {f}(const unsigned char *wb, unsigned char *ws, const void *const *inputs, "
                        f"void *const *outputs{SIZES_PARAM if dims else ''}); /* {variant_file(name, t)} */\n"
                        for f, t in zip(fwd, variants))
        multi = (f"""/* ---- code paths: {', '.join(t.name for t in paths)} (the first is this file's; init picks the best
 * the CPU supports, capped by the environment variable PT2C_MAX_ISA=<level name> unless built with
 * -DPT2C_NO_GETENV) ---- */
{decls}static const int variant_levels[] = {{{', '.join(str(X86_LEVELS.index(t.name)) for t in paths)}}};
#if !defined(PT2C_NO_GETENV)
#include <stdlib.h>
#endif

{_X86_LEVEL}
static uint32_t choose_variant(void)
{{
    static const char *const level_names[] = {{{', '.join(f'"{n}"' for n in X86_LEVELS)}}};
    int level = cpu_x86_level(), i;
    uint32_t v = 0;
#if !defined(PT2C_NO_GETENV)
    const char *cap = getenv("PT2C_MAX_ISA");
    if (cap)
        for (i = 0; i < 4; i++)
            if (strcmp(cap, level_names[i]) == 0 && i < level) level = i;
#else
    (void)level_names;
#endif
    for (i = 1; i < {len(paths)}; i++)
        if (variant_levels[i] <= level) v = (uint32_t)i;
    return v;
}}
""")
        dispatch = "".join(f"\n    if (ctx->variant == {i + 1}u) return {f}(ctx->weights, ctx->workspace, inputs, outputs"
                           f"{', ctx->sizes' if dims else ''});"
                           for i, f in enumerate(fwd))
    else:
        multi = ""
        dispatch = ""
    isa_names = ", ".join(f'"{t.name}"' for t in paths)
    includes = _includes(g, kfiles)
    crc, data_bytes = blob.crc, blob.data_bytes
    tables, status_rows, params = io_tables(g, name, in_names, out_names), status_messages(name), typed_params(
        g, in_names, out_names)
    in_list = ", ".join(f"(const void *){n}" for n in in_names) or "NULL"
    out_list = ", ".join(f"(void *){n}" for n in out_names)
    embedded = ""
    if embed:
        embedded = (f"/* The weights blob, embedded ({len(blob)} bytes). */\n"
                    f"static const unsigned char embedded_weights[{len(blob)}] PT2C_ALIGNED(64) = {{\n{_c_bytes(blob.tobytes())}\n}};\n")
    WEIGHTS_HELPERS = weights_helpers()
    checks = sorted({OPS[n.op].scratch_c(c) for n in walk(g) if OPS[n.op].scratch_c
                     for c in ([n] if not dims else [concrete(n, z) for z in samples(dims, 8)])})
    scratch_check = "".join(f"\n    if ((size_t)({c}) > {plan.scratch_bytes}u) return {N}_ERR_WORKSPACE_PLAN;"
                            for c in checks if c != "0")
    uses_ws = re.search(r"\bws\b", "\n".join(body)) is not None  # (not "rows" in /*rows=*/ 4)
    uses_wb = re.search(r"\bwb \+", "\n".join(body)) is not None
    graph_body = "\n".join(body)
    states = [n for n in g.nodes if n.op == "state"]
    sizes_api_state = state_source(g, plan, blob.offsets, name)
    sizes_init, sizes_api = ("", "") if not dims else (
        "".join(f"\n    ctx->sizes[{i}] = {d.hint};" for i, d in enumerate(dims.dims)), sizes_source(g, name))
    return f"""/* {name}.c: generated by pt2c {__version__} -- do not edit; regenerate instead.
 *
 * source model : {c_comment(prov.get('source', ''))} (exported with torch {c_comment(prov.get('exported_with_torch', ''))}, export schema {c_comment(prov.get('schema_version', ''))})
 * command      : {c_comment(command or 'pt2c.compile(...)', 1000)}
 * target       : {target.name} ({target.description})
 * workspace    : {plan.workspace_bytes} bytes (arena {plan.arena_bytes}, scratch {plan.scratch_bytes}; live-bytes lower bound {plan.lower_bound})
 * weights      : {len(blob)} bytes, crc32 {crc:08x}
 *
 * One translation unit: the kernels below are static, so several models link into one program.
 */
#include "{name}.h"

{includes}

#define PT2C_ERR_INDEX {N}_ERR_INDEX
#define PT2C_ERR_CUSTOM_OP {N}_ERR_CUSTOM_OP

static const uint32_t expected_crc32 = 0x{crc:08x}u;
static const uint64_t expected_data_bytes = {data_bytes}u;

{tables}

{_CPU_CHECK}
{multi}static const char *const isa_names[] = {{{isa_names}}};

static const char *const status_messages[] = {{
{status_rows}
}};

{embedded}int {name}_abi_version(void) {{ return {N}_ABI_VERSION; }}
uint64_t {name}_signature(void) {{ return {N}_SIGNATURE; }}
size_t {name}_workspace_size(void) {{ return {N}_WORKSPACE_BYTES; }}
size_t {name}_weights_size(void) {{ return {N}_WEIGHTS_BYTES; }}
size_t {name}_ctx_size(void) {{ return sizeof({name}_ctx); }}
int {name}_num_inputs(void) {{ return {N}_NUM_INPUTS; }}
int {name}_num_outputs(void) {{ return {N}_NUM_OUTPUTS; }}
const {name}_tensor_desc *{name}_inputs(void) {{ return inputs_desc; }}
const {name}_tensor_desc *{name}_outputs(void) {{ return outputs_desc; }}

const char *{name}_isa(const {name}_ctx *ctx)
{{
    if (!ctx || ctx->initialized != 0x70743263u || ctx->variant >= sizeof(isa_names) / sizeof(isa_names[0])) return NULL;
    return isa_names[ctx->variant];
}}

const char *{name}_strerror(int status)
{{
    if (status < 0 || status >= (int)(sizeof(status_messages) / sizeof(status_messages[0]))) return "unknown status";
    return status_messages[status];
}}

{WEIGHTS_HELPERS}
int {name}_init_checked({name}_ctx *ctx, const void *weights, size_t weights_size, void *workspace,
                        size_t workspace_size, uint64_t header_signature)
{{
    const unsigned char *blob = (const unsigned char *)weights;
    uint64_t data_bytes;
    int i;
    if (!ctx) return {N}_ERR_NULL_ARG;
    ctx->initialized = 0;
    ctx->variant = 0;
    if (header_signature != {N}_SIGNATURE) return {N}_ERR_SIGNATURE;
    if (!cpu_supported()) return {N}_ERR_CPU_UNSUPPORTED;{scratch_check}
{'    if (!blob) { blob = embedded_weights; weights_size = sizeof(embedded_weights); }' if embed else ''}
    if (!blob || !workspace) return {N}_ERR_NULL_ARG;
    if (((uintptr_t)workspace % {N}_WORKSPACE_ALIGN) != 0 || ((uintptr_t)blob % 16) != 0) return {N}_ERR_ALIGN;
    if (workspace_size < {N}_WORKSPACE_BYTES) return {N}_ERR_WORKSPACE_SIZE;
{weights_check(N)}
    ctx->weights = blob + {HEADER_BYTES};
    ctx->workspace = (unsigned char *)workspace;
    ctx->variant = {'choose_variant()' if variants else '0'};{sizes_init}
    ctx->initialized = 0x70743263u;
    return {N + '_OK' if not states else name + '_reset_state(ctx)'};
}}
{sizes_api}{sizes_api_state}
int {name}_run_v(const {name}_ctx *ctx, const void *const *inputs, void *const *outputs)
{{
{'    const unsigned char *wb;' if uses_wb else ''}
{'    unsigned char *ws;' if uses_ws else ''}{chr(10) + '    const int64_t *sizes;' if dims else ''}
    int i;
    if (!ctx || (!inputs && {N}_NUM_INPUTS > 0) || !outputs) return {N}_ERR_NULL_ARG;
    for (i = 0; i < {N}_NUM_INPUTS; i++)
        if (!inputs[i]) return {N}_ERR_NULL_ARG;
    for (i = 0; i < {N}_NUM_OUTPUTS; i++)
        if (!outputs[i]) return {N}_ERR_NULL_ARG;
    if (ctx->initialized != 0x70743263u) return {N}_ERR_NOT_INITIALIZED;{dispatch}{chr(10) + '    sizes = ctx->sizes;' if dims else ''}
{'    wb = ctx->weights;' if uses_wb else ''}
{'    ws = ctx->workspace;' if uses_ws else ''}
{graph_body}

    return {N}_OK;
}}

int {name}_run(const {name}_ctx *ctx, {params})
{{
    const void *inputs[] = {{{in_list}}};
    void *outputs[] = {{{out_list}}};
    return {name}_run_v(ctx, inputs, outputs);
}}
"""


# x86 level -> (gcc #pragma target arch, predefined macros the file requires)
_VARIANT_ISA = {
    "x86_64-v2": ("x86-64-v2", ("__SSE4_2__", "__POPCNT__")),
    "x86_64-v3": ("x86-64-v3", ("__AVX2__", "__FMA__")),
    "x86_64-v4": ("x86-64-v4", ("__AVX512F__", "__AVX512BW__", "__AVX512DQ__", "__AVX512VL__")),
}


def _variant_source(name: str, t: Any, body: list[str], includes: str, dynamic: bool = False) -> str:
    """One extra code path of a multi-versioned artifact: the same graph body as <name>.c, compiled for
    a higher x86-64 level; <name>_init selects it when the CPU has that level."""
    N = name.upper()
    sp = SIZES_PARAM if dynamic else ""
    arch, macros = _VARIANT_ISA[t.name]
    fname = variant_file(name, t)
    func = f"{name}__forward_{t.name.replace('-', '_')}"
    missing = " || ".join(f"!defined({m})" for m in macros)
    return f"""/* {fname}: the {t.name} code path of the model `{name}` (generated by pt2c {__version__} -- do not edit).
 *
 * The graph of {name}.c, compiled for {t.description}.
 * {name}_init selects it when the CPU (and OS) support that level; {name}_isa() says which path runs.
 * Compile it with {t.flags_str} (the generated build files do; with gcc, the #pragma below does too).
 */
#if defined(__GNUC__) && !defined(__clang__) && ({missing})
#pragma GCC target("arch={arch}")
#endif
#include "{name}.h"
#if {missing}
#error "{fname} is the {t.name} code path of {name}: compile it with {t.flags_str} (as the generated build files do)"
#endif

{includes}

#define PT2C_ERR_INDEX {N}_ERR_INDEX
#define PT2C_ERR_CUSTOM_OP {N}_ERR_CUSTOM_OP

int {func}(const unsigned char *wb, unsigned char *ws, const void *const *inputs, void *const *outputs{sp});

int {func}(const unsigned char *wb, unsigned char *ws, const void *const *inputs, void *const *outputs{sp})
{{
    (void)wb;
    (void)ws;
    (void)inputs;
    (void)outputs;
{chr(10).join(body)}

    return {N}_OK;
}}
"""

