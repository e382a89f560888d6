"""The GPU backend's graph body: each node of the planned graph as kernel launches.

The graph, passes and memory plan are the CPU's (passes.pipeline leaves out the CPU-only algorithm choice,
weight packing and fused pairs for a GPU target); what differs is the code per node:

- ops with a GPU kernel of their own (`GPU_OPS` below: matmul, conv2d, pooling, norms, softmax, reductions,
  attention, gathers) launch a kernel of `kernels/gpu/`, written once against `pt2c_gpu.h` and compiled as
  OpenCL C or CUDA;
- ops whose CPU code is a loop nest over their output (`ew` and its fused chains, strided copies, cat, pad,
  ...) reuse the op's own emit function: `GpuEmitter.strided_loop` turns the loop nest into a kernel with
  one thread per element, generated for that node;
- anything else is listed, with every other such node, in one UnsupportedError.

A launch is plain data (`Launch`): the kernel, its arguments (tensors as a value plus an element offset,
scalars) and the grid; codegen/gpu_host.py renders it as OpenCL or CUDA host code.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import resources
import re
from typing import Any, Callable

import numpy as np

from pt2c.codegen.emitter import loop_indices
from pt2c.codegen.escape import c_string
from pt2c.errors import UnsupportedError
from pt2c.ir import Graph, MemoryPlan, Node, Value, ctype, itemsize
from pt2c.ops import OPS
from pt2c.ops.conv import is_depthwise
from pt2c.ops.matmul import matmul_k, sdpa_dims
from pt2c.ops.util import broadcast_strides, contiguous_strides, lit, outer_inner

# epilogue activations -> the codes of kernels/gpu/pt2c_gpu.h (PT2C_ACT_*)
ACT_CODES = {None: 0, "relu": 1, "clamp": 2, "hardswish": 3, "silu": 4, "gelu": 5, "gelu_tanh": 6, "sigmoid": 7,
             "tanh": 8}
BLOCK = 256  # threads per group of the one-thread-per-element kernels
GPU_DTYPES = ("float32", "int64", "int32", "int16", "int8", "uint8", "bool")
MAX_HEAD_DIM = 256  # kernels/gpu/attention.h holds a query row in work-group memory


class NotPortable(Exception):
    """An op's CPU emit function wrote C of its own (not only loop nests): it has no GPU form yet."""


@dataclass
class Launch:
    kernel: str
    # ("t", value, extra element offset, const[, dtype read as]) | ("i", int) | ("l", int) | ("f", float) | ("err",)
    args: list[tuple[Any, ...]]
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    comment: list[str] = field(default_factory=list)


def _kernel_source(f: str) -> str:
    return (resources.files("pt2c.kernels") / "gpu" / f).read_text()


def gpu_kernel_files(names: set[str]) -> list[str]:
    """Kernel headers of kernels/gpu/ the model uses, with their #include'd dependencies, in include order."""
    order: list[str] = []

    def visit(f: str) -> None:
        if f in order:
            return
        for dep in re.findall(r'#include "([a-z0-9_]+\.h)"', _kernel_source(f)):
            visit(dep)
        order.append(f)

    visit("pt2c_gpu.h")
    for n in sorted(names):
        visit(f"{n}.h")
    return order


def kernel_params() -> dict[str, list[str]]:
    """Parameter names of every GPU library kernel, from its prototype (PT2C_T(type, x) is two: x, x_off)."""
    out: dict[str, list[str]] = {}
    for f in ("gemm.h", "norm.h", "reduce.h", "pool.h", "attention.h"):
        for m in re.finditer(r"PT2C_KERNEL\s+(pt2c_\w+)\s*\(([^{]*?)\)\s*\{", _kernel_source(f), re.S):
            names: list[str] = []
            for part in re.findall(r"\s*(PT2C_T\([^)]*\)|[^,]+)", m.group(2)):
                if part.startswith("PT2C_T("):
                    x = part[:-1].split(",")[-1].strip()
                    names += [x, x + "_off"]
                elif part.strip():
                    names.append(re.findall(r"\w+", part)[-1])
            out[m.group(1)] = names
    return out


def _groups(n: int, per: int) -> int:
    return max(1, -(-n // per))


class GpuEmitter:
    """The EmitCtx an op's CPU emit function writes through, for the GPU: pointers are the values' names
    (kernel parameters), strided loops become generated kernels, anything else is NotPortable."""

    def __init__(self, g: Graph, plan: MemoryPlan):
        self.g = g
        self.plan = plan
        self.launches: list[Launch] = []
        self.kernels: list[str] = []  # generated kernel definitions (device source)
        self.library: set[str] = set()  # kernels/gpu/ headers used
        self.errors: set[str] = set()
        self.values: dict[str, Value] = {}
        self.node: Node | None = None
        self.comment: list[str] = []
        self._n = 0

    # ---------------------------------------------------------------- EmitCtx
    def line(self, s: str) -> None:
        raise NotPortable(s)

    def block(self, *a: Any, **k: Any) -> None:
        raise NotPortable("a control-flow block")

    def scratch(self, node: Node) -> str:
        raise NotPortable("kernel scratch")

    @staticmethod
    def flt(x: float) -> str:
        return lit("float32", x)

    @staticmethod
    def string(text: str) -> str:
        return c_string(text)

    def ptr(self, v: Value) -> str:
        """The kernel parameter naming v: its name, prefixed so that no value name can be an OpenCL C or CUDA
        keyword or builtin (a layer called `local` or `half`)."""
        self.values["v_" + v.name] = v
        return "v_" + v.name

    def strided_loop(self, shape: tuple[int, ...], operands: list[tuple[str, tuple[int, ...], int]],
                     body: Callable[[list[str]], str]) -> None:
        """A kernel with one thread per element of `shape`; operands (pointer, strides, offset), the first
        written.  The index of each dim comes from the thread's linear id."""
        numel = int(np.prod(shape, dtype=np.int64)) if shape else 1
        if numel == 0:
            return
        sizes, names, idx = loop_indices(shape, operands)
        rank = len(sizes)
        decomp = []
        rest = "e__"
        for d in range(rank - 1, -1, -1):
            if d == 0:
                decomp.append(f"const pt2c_long {names[d]} = {rest};")
            else:
                decomp.append(f"const pt2c_long {names[d]} = {rest} % {sizes[d]};")
                rest = f"({rest} / {sizes[d]})"
        written = operands[0][0]
        params = [written] + [p for p in dict.fromkeys(p for p, _, _ in operands[1:]) if p != written]
        self.element_kernel(numel, [(p, p == written) for p in params], decomp + [body(idx)])

    # ---------------------------------------------------------------- kernels and launches
    def element_kernel(self, numel: int, params: list[tuple[str, bool]], body: list[str],
                       uses_err: bool = False) -> None:
        """A generated kernel over `numel` elements (e__ the element index): params (value name, written)."""
        node = self.node
        assert node is not None
        self._n += 1
        kname = f"k{self._n}_{node.outputs[0].name}"[:60]
        decl = []
        for p, w in params:
            v = self.values[p]
            decl.append(f"PT2C_T({'' if w else 'const '}{ctype(v.dtype)}, {p})")
        if uses_err:
            decl.append("PT2C_T(int, err__)")
        head = f"PT2C_KERNEL {kname}({', '.join(decl)})"
        lines = [*self.comment, head, "{", "    const pt2c_long e__ = PT2C_GID0;", f"    if (e__ >= {numel}) return;"]
        lines += [f"    {p} += {p}_off;" for p, _ in params]
        if uses_err:
            lines.append("    err__ += err___off;")
        lines += [f"    {s}" for s in body]
        lines.append("}")
        self.kernels.append("\n".join(lines))
        args: list[tuple[Any, ...]] = [("t", self.values[p], 0, not w) for p, w in params]
        if uses_err:
            args.append(("err",))
        self.launch(kname, args, (_groups(numel, BLOCK), 1, 1), (BLOCK, 1, 1))

    def launch(self, kernel: str, args: list[tuple[Any, ...]], grid: tuple[int, int, int],
               block: tuple[int, int, int]) -> None:
        if grid[0] >= 2**31 or max(grid[1], grid[2]) > 65535:  # CUDA's grid limits (OpenCL devices: similar)
            raise GpuRefusal(f"{kernel} would need a grid of {list(grid)} work-groups (at most 2^31-1 x 65535 x 65535)")
        self.launches.append(Launch(kernel, args, grid, block, list(self.comment)))
        self.comment = []  # (a node's comment once, before its first launch)

    # ---------------------------------------------------------------- the graph
    def emit_graph(self, comment: Callable[[Node], list[str]]) -> None:
        problems: list[tuple[str, str, str]] = []
        for n in self.g.nodes:
            if OPS[n.op].alias:
                continue
            why = _unsupported_dtype(n)
            if why is None:
                self.node, self.comment = n, comment(n)
                marks = (len(self.launches), len(self.kernels), set(self.library))
                try:
                    if n.op in GPU_OPS:
                        GPU_OPS[n.op](self, n)
                    elif n.op in LOOP_OPS:
                        OPS[n.op].emit(self, n)
                    else:
                        raise NotPortable(n.op)
                except NotPortable:
                    why = f"the GPU backend has no kernel for {n.op} yet"
                except GpuRefusal as e:
                    why = str(e)
                if why is not None:
                    del self.launches[marks[0]:], self.kernels[marks[1]:]
                    self.library = marks[2]
            if why is not None:
                problems.append((f"{n.op} on a GPU target", n.origin.describe() or n.outputs[0].name, why))
        if problems:
            raise UnsupportedError(problems)


class GpuRefusal(Exception):
    """A node the GPU kernel cannot take (sizes beyond its limits): the reason."""


def _unsupported_dtype(n: Node) -> str | None:
    bad = sorted({v.dtype for v in n.inputs + n.outputs if v.dtype not in GPU_DTYPES})
    if bad:
        return f"{', '.join(bad)} tensors (GPU targets compute in float32; indices and masks: integers, bool)"
    if n.blocks:
        return "control flow (torch.cond / while_loop / scan) is not on the GPU backend yet"
    return None


# ---------------------------------------------------------------- ops with GPU kernels of their own

def _t(v: Value, off: int = 0, const: bool = True) -> tuple[Any, ...]:
    return ("t", v, off, const)


def _epilogue(node: Node, first: int) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """(bias arg, residual arg, [act, lo, hi]) of a GEMM / conv node; a missing bias or residual is given
    the output (never read: its flag is 0)."""
    at = node.attrs
    i = first
    out = node.outputs[0]
    bias = res = _t(out)
    if at.get("has_bias"):
        bias = _t(node.inputs[i])
        i += 1
    if at.get("has_residual"):
        res = _t(node.inputs[i])
    tail = [("i", ACT_CODES[at.get("act")]), ("f", float(at.get("lo", 0.0))), ("f", float(at.get("hi", 0.0)))]
    return [bias], [res], tail


def _matmul(em: GpuEmitter, node: Node) -> None:
    a, b = node.inputs[0], node.inputs[1]
    out = node.outputs[0]
    M, N, K = out.shape[-2], out.shape[-1], matmul_k(node)
    batch = int(np.prod(out.shape[:-2], dtype=np.int64)) if len(out.shape) > 2 else 1
    sa = node.attrs.get("a_strides") or ((M * K if len(a.shape) > 2 else 0), K, 1)
    sb = node.attrs.get("b_strides") or ((K * N if len(b.shape) > 2 else 0), N, 1)
    if node.attrs.get("a_strides") is None and len(a.shape) > 2 and len(b.shape) == 2 and batch > 1:
        M, batch, sa = M * batch, 1, (0, K, 1)  # [..., M, K] @ [K, N]: one GEMM with M * batch rows
    bias, res, act = _epilogue(node, 2)
    at = node.attrs
    em.library.add("gemm")
    args = [_t(out, 0, False), _t(a), _t(b), *bias, *res, ("i", M), ("i", N), ("i", K), ("l", sa[0]), ("i", sa[1]),
            ("i", sa[2]), ("l", sb[0]), ("i", sb[1]), ("i", sb[2]), ("i", int(bool(at.get("has_bias")))), ("i", 0),
            ("i", int(bool(at.get("has_residual")))), *act]
    if M <= 4 and sb[1] == 1:  # few rows against a weight read along k: one column per 32 threads
        em.launch("pt2c_gemv", args, (_groups(N, 8), 1, batch), (BLOCK, 1, 1))
    else:
        em.launch("pt2c_gemm", args, (_groups(N, 64), _groups(M, 64), batch), (16, 16, 1))


def _conv2d(em: GpuEmitter, node: Node) -> None:
    at = node.attrs
    x, w, out = node.inputs[0], node.inputs[1], node.outputs[0]
    N, C, H, W = x.shape
    _, OC, OH, OW = out.shape
    KH, KW = at["kernel"]
    (sh, sw), (ph, pw), (dh, dw) = at["stride"], at["padding"], at["dilation"]
    G = at["groups"]
    bias, res, act = _epilogue(node, 2)
    geo = [("i", v) for v in (C, H, W, OC, KH, KW, sh, sw, ph, pw, dh, dw, G, OH, OW)]
    flags = [("i", int(bool(at.get("has_bias")))), ("i", int(bool(at.get("has_residual"))))]
    em.library.add("gemm")
    if is_depthwise(node) or OC // G <= 4:
        em.launch("pt2c_conv2d_direct", [_t(out, 0, False), _t(x), _t(w), *bias, *res, ("i", N), *geo, *flags, *act],
                  (_groups(N * OC * OH * OW, BLOCK), 1, 1), (BLOCK, 1, 1))
    else:
        em.launch("pt2c_conv2d", [_t(out, 0, False), _t(x), _t(w), *bias, *res, *geo, *flags, *act],
                  (_groups(OH * OW, 64), _groups(OC // G, 64), N * G), (16, 16, 1))


def _pool2d(em: GpuEmitter, node: Node) -> None:
    at = node.attrs
    x, out = node.inputs[0], node.outputs[0]
    N, C, H, W = x.shape
    OH, OW = out.shape[2:]
    (KH, KW), (sh, sw), (ph, pw) = at["kernel"], at["stride"], at["padding"]
    dh, dw = at.get("dilation", (1, 1))
    is_max = at["kind"] == "max"
    em.library.add("pool")
    em.launch("pt2c_pool2d", [_t(out, 0, False), _t(x)] + [("i", v) for v in (
        N * C, H, W, KH, KW, sh, sw, ph, pw, dh, dw, OH, OW, int(is_max),
        int(bool(at.get("count_include_pad"))) if not is_max else 0, (at.get("divisor") or 0) if not is_max else 0)],
        (_groups(N * C * OH * OW, BLOCK), 1, 1), (BLOCK, 1, 1))


def _adaptive_pool2d(em: GpuEmitter, node: Node) -> None:
    x, out = node.inputs[0], node.outputs[0]
    N, C, H, W = x.shape
    OH, OW = out.shape[2:]
    em.library.add("pool")
    em.launch("pt2c_adaptive_pool2d", [_t(out, 0, False), _t(x)] + [("i", v) for v in (
        N * C, H, W, OH, OW, int(node.attrs["kind"] == "max"))], (_groups(N * C * OH * OW, BLOCK), 1, 1), (BLOCK, 1, 1))


def _rows(n: int) -> tuple[int, int, int]:
    return (n, 1, 1)


def _layer_norm(em: GpuEmitter, node: Node) -> None:
    x, out = node.inputs[0], node.outputs[0]
    at = node.attrs
    cols = int(np.prod(x.shape[len(x.shape) - at["normalized"]:], dtype=np.int64))
    rest = node.inputs[1:]
    w = rest[0] if at["has_weight"] else out
    b = rest[-1] if at["has_bias"] else out
    em.library.add("norm")
    em.launch("pt2c_layer_norm", [_t(out, 0, False), _t(x), _t(w), _t(b), ("i", cols), ("i", int(at["has_weight"])),
                                  ("i", int(at["has_bias"])), ("f", float(at["eps"]))],
              _rows(x.numel // max(cols, 1)), (BLOCK, 1, 1))


def _rms_norm(em: GpuEmitter, node: Node) -> None:
    x, out = node.inputs[0], node.outputs[0]
    cols = x.shape[-1]
    w = node.inputs[1] if len(node.inputs) > 1 else out
    em.library.add("norm")
    em.launch("pt2c_rms_norm", [_t(out, 0, False), _t(x), _t(w), ("i", cols), ("i", int(len(node.inputs) > 1)),
                                ("f", float(node.attrs["eps"]))], _rows(x.numel // max(cols, 1)), (BLOCK, 1, 1))


def _softmax(em: GpuEmitter, node: Node) -> None:
    x, out = node.inputs[0], node.outputs[0]
    outer, n, inner = outer_inner(x.shape, node.attrs["dim"])
    em.library.add("norm")
    em.launch("pt2c_softmax", [_t(out, 0, False), _t(x), ("i", n), ("i", inner), ("i", int(node.attrs["log"]))],
              _rows(outer * inner), (BLOCK, 1, 1))


_RED_CODES = {"sum": 0, "mean": 1, "max": 2, "min": 3, "prod": 4}


def _reduce(em: GpuEmitter, node: Node) -> None:
    x, out = node.inputs[0], node.outputs[0]
    outer, r, inner = node.attrs["view"]
    kind = node.attrs["kind"]
    if x.dtype != "float32" or kind not in (*_RED_CODES, "argmax", "argmin") or out.dtype not in ("float32", "int64"):
        _reduce_loop(em, node)
        return
    em.library.add("reduce")
    if kind in ("argmax", "argmin"):
        em.launch("pt2c_argreduce", [_t(out, 0, False), _t(x), ("i", r), ("i", inner), ("i", int(kind == "argmax"))],
                  _rows(outer * inner), (BLOCK, 1, 1))
    elif kind in _RED_CODES:
        em.launch("pt2c_reduce", [_t(out, 0, False), _t(x), ("i", r), ("i", inner), ("i", _RED_CODES[kind])],
                  _rows(outer * inner), (BLOCK, 1, 1))


def _sdpa(em: GpuEmitter, node: Node) -> None:
    q, k, v = node.inputs[:3]
    out = node.outputs[0]
    B, H, Hkv, Lq, Lk, D, Dv = sdpa_dims(node)
    if max(D, Dv) > MAX_HEAD_DIM:
        raise GpuRefusal(f"attention with head size {max(D, Dv)} (the GPU kernel takes up to {MAX_HEAD_DIM})")
    lay = node.attrs.get("layout")
    if lay:
        strides = {t: lay[t] for t in ("q", "k", "v", "out")}
    else:
        strides = {}
        for t, val in (("q", q), ("k", k), ("v", v), ("out", out)):
            cs = contiguous_strides(val.shape)
            strides[t] = (cs[0], cs[1], cs[2], 0)
    mask_kind, ms, mask = 0, [0, 0, 0, 0], out
    if len(node.inputs) > 3:
        mask = node.inputs[3]
        full = (1,) * (4 - len(mask.shape)) + tuple(mask.shape)
        cs = contiguous_strides(full)
        ms = [0 if full[i] == 1 else cs[i] for i in range(4)]
        mask_kind = 1 if mask.dtype == "bool" else 2
    madd = _t(mask) if mask_kind == 2 else _t(out)
    mbool = _t(mask) if mask_kind == 1 else ("t", out, 0, True, "uint8")  # (unused: never read)
    em.library.add("attention")
    em.launch("pt2c_sdpa", [_t(out, strides["out"][3], False), _t(q, strides["q"][3]), _t(k, strides["k"][3]),
                            _t(v, strides["v"][3]), madd, mbool, ("i", mask_kind), *[("l", s) for s in ms],
                            ("i", H), ("i", Hkv), ("i", Lk), ("i", D), ("i", Dv), ("f", float(node.attrs["scale"])),
                            ("i", int(node.attrs["causal"]))]
              + [("l", s) for t in ("q", "k", "v", "out") for s in strides[t][:3]],
              (Lq, H, B), (64, 1, 1))


def _gather(em: GpuEmitter, node: Node) -> None:
    x, idx = node.inputs
    out = node.outputs[0]
    dim = node.attrs["dim"]
    inner = int(np.prod(x.shape[dim + 1:], dtype=np.int64))
    D, J = x.shape[dim], idx.numel
    X, I, Y = em.ptr(x), em.ptr(idx), em.ptr(out)
    body = [f"const pt2c_long t = e__ % {inner}, j = (e__ / {inner}) % {J}, o = e__ / {inner * J};",
            f"int64_t k = (int64_t){I}[j];"]
    if node.attrs.get("wrap", False):
        body.append(f"if (k < 0) k += {D};")
    body += [f"if (k < 0 || k >= {D}) {{ err__[0] = PT2C_ERR_INDEX_FLAG; {Y}[e__] = 0; return; }}",
             f"{Y}[e__] = {X}[(o * {D} + k) * {inner} + t];"]
    em.errors.add("INDEX")
    em.element_kernel(out.numel, [(Y, True), (X, False), (I, False)], body, uses_err=True)


def _take(em: GpuEmitter, node: Node) -> None:
    x, offs = node.inputs
    out = node.outputs[0]
    X, O, Y = em.ptr(x), em.ptr(offs), em.ptr(out)
    em.element_kernel(out.numel, [(Y, True), (X, False), (O, False)], [f"{Y}[e__] = {X}[{O}[e__]];"])


def _unflatten(shape: tuple[int, ...], flat: str = "e__", prefix: str = "u") -> tuple[list[str], list[str]]:
    """Statements naming the multi-index of element `flat` of a dense tensor of `shape`: (statements, names)."""
    names = [f"{prefix}{d}" for d in range(len(shape))]
    lines, rest = [], flat
    for d in range(len(shape) - 1, -1, -1):
        lines.append(f"const pt2c_long {names[d]} = {rest}" + (f" % {shape[d]};" if d else ";"))
        rest = f"{rest} / {shape[d]}" if rest == flat else f"({rest}) / {shape[d]}"
    return lines, names


def _lin(names: list[str], strides: tuple[int, ...]) -> str:
    terms = [n if s == 1 else f"{n} * {s}" for n, s in zip(names, strides) if s != 0]
    return " + ".join(terms) or "0"


def _pad(em: GpuEmitter, node: Node) -> None:
    """constant padding (negative pads crop): each output element reads its source or is the value."""
    x, out = node.inputs[0], node.outputs[0]
    X, Y = em.ptr(x), em.ptr(out)
    lines, names = _unflatten(out.shape)
    conds, src = [], []
    for d, ((lo, _), n) in enumerate(zip(node.attrs["pads"], x.shape)):
        src.append(f"(u{d} - {lo})" if lo else f"u{d}")
        conds.append(f"{src[-1]} >= 0 && {src[-1]} < {n}" if lo > 0 else f"{src[-1]} < {n}")
    ist = contiguous_strides(x.shape)
    at = " + ".join(f"{s_} * {st}" if st != 1 else s_ for s_, st in zip(src, ist) if st != 0) or "0"
    value = lit(out.dtype, node.attrs["value"])
    em.element_kernel(out.numel, [(Y, True), (X, False)],
                      lines + [f"{Y}[e__] = ({' && '.join(conds) or '1'}) ? {X}[{at}] : {value};"])


def _channel_affine(em: GpuEmitter, node: Node) -> None:
    x, s_, b = node.inputs
    out = node.outputs[0]
    C = x.shape[1]
    inner = x.numel // max(x.shape[0] * C, 1)
    X, S, B, Y = em.ptr(x), em.ptr(s_), em.ptr(b), em.ptr(out)
    em.element_kernel(out.numel, [(Y, True), (X, False), (S, False), (B, False)],
                      [f"const pt2c_long c = (e__ / {inner}) % {C};", f"{Y}[e__] = {X}[e__] * {S}[c] + {B}[c];"])


def _upsample2d(em: GpuEmitter, node: Node) -> None:
    x, out = node.inputs[0], node.outputs[0]
    H, W = x.shape[-2:]
    OH, OW = out.shape[-2:]
    X, Y = em.ptr(x), em.ptr(out)
    T = [em.ptr(v) for v in node.inputs[1:]]
    body = [f"const pt2c_long ow = e__ % {OW}, oh = (e__ / {OW}) % {OH}, p = e__ / {OH * OW};",
            f"PT2C_GLOBAL const float *xp = {X} + p * {H * W};"]
    if node.attrs["mode"] == "nearest":
        body.append(f"{Y}[e__] = xp[{T[0]}[oh] * {W} + {T[1]}[ow]];")
    else:
        h0, h1, hl0, hl1, w0, w1, wl0, wl1 = T
        body += [f"PT2C_GLOBAL const float *r0 = xp + {h0}[oh] * {W}, *r1 = xp + {h1}[oh] * {W};",
                 f"{Y}[e__] = {hl0}[oh] * ({wl0}[ow] * r0[{w0}[ow]] + {wl1}[ow] * r0[{w1}[ow]])"
                 f" + {hl1}[oh] * ({wl0}[ow] * r1[{w0}[ow]] + {wl1}[ow] * r1[{w1}[ow]]);"]
    em.element_kernel(out.numel, [(Y, True), (X, False)] + [(t, False) for t in dict.fromkeys(T)], body)


def _reduce_loop(em: GpuEmitter, node: Node) -> None:
    """A reduction the work-group kernels do not take (integer / bool inputs, any / all): one thread per
    output, accumulating in the output's type (float32: in float)."""
    x, out = node.inputs[0], node.outputs[0]
    outer, r, inner = node.attrs["view"]
    kind = node.attrs["kind"]
    t, X, Y = ctype(out.dtype), em.ptr(x), em.ptr(out)
    body = [f"const pt2c_long i = e__ % {inner}, o = e__ / {inner};"]
    at = f"(o * {r} + k) * {inner} + i"
    init = {"sum": "0", "mean": "0", "prod": "1", "any": "0", "all": "1"}
    if kind in init:
        acc = "int" if kind in ("any", "all") else ("float" if out.dtype == "float32" else t)
        step = {"sum": "acc += {x};", "mean": "acc += {x};", "prod": "acc *= {x};", "any": "acc = acc || ({x} != 0);",
                "all": "acc = acc && ({x} != 0);"}[kind]
        body += [f"{acc} acc = {init[kind]};", f"for (pt2c_long k = 0; k < {r}; k++) " + step.format(x=f"{X}[{at}]")]
        res = f"acc / {r}" if kind == "mean" else "acc"
    else:
        cmp = ">" if "max" in kind else "<"
        body += ["pt2c_long best = 0;",
                 f"for (pt2c_long k = 1; k < {r}; k++) if ({X}[{at}] {cmp} {X}[(o * {r} + best) * {inner} + i]) best = k;"]
        res = "best" if kind.startswith("arg") else f"{X}[(o * {r} + best) * {inner} + i]"
    body.append(f"{Y}[e__] = ({t})({res});")
    em.element_kernel(outer * inner, [(Y, True), (X, False)], body)


def _cumsum(em: GpuEmitter, node: Node) -> None:
    x, out = node.inputs[0], node.outputs[0]
    outer, r, inner = outer_inner(x.shape, node.attrs["dim"])
    t, X, Y = ctype(out.dtype), em.ptr(x), em.ptr(out)
    acc = "float" if out.dtype == "float32" else t
    em.element_kernel(outer * inner, [(Y, True), (X, False)], [
        f"const pt2c_long i = e__ % {inner}, o = e__ / {inner};",
        f"{acc} acc = 0;",
        f"for (pt2c_long k = 0; k < {r}; k++) {{",
        f"    const pt2c_long at = (o * {r} + k) * {inner} + i;",
        f"    acc += ({acc}){X}[at];",
        f"    {Y}[at] = ({t})acc;",
        "}"])


def _gather_dim(em: GpuEmitter, node: Node) -> None:
    x, idx = node.inputs
    out = node.outputs[0]
    dim = node.attrs["dim"]
    X, I, Y = em.ptr(x), em.ptr(idx), em.ptr(out)
    lines, names = _unflatten(idx.shape)
    src = list(names)
    src[dim] = "j"
    em.errors.add("INDEX")
    em.element_kernel(out.numel, [(Y, True), (X, False), (I, False)], lines + [
        f"const int64_t j = (int64_t){I}[e__];",
        f"if (j < 0 || j >= {x.shape[dim]}) {{ err__[0] = PT2C_ERR_INDEX_FLAG; {Y}[e__] = 0; return; }}",
        f"{Y}[e__] = {X}[{_lin(src, contiguous_strides(x.shape))}];"], uses_err=True)


def _index_multi(em: GpuEmitter, node: Node) -> None:
    """x[..., i0, i1, ...] with run-time index tensors (broadcast together), negative indices wrapped."""
    x, idx = node.inputs[0], node.inputs[1:]
    out = node.outputs[0]
    pre, bshape = node.attrs["pre"], tuple(node.attrs["bshape"])
    X, Y = em.ptr(x), em.ptr(out)
    lines, names = _unflatten(out.shape)
    xs = contiguous_strides(x.shape)
    nb = len(bshape)
    terms = [f"{names[d]} * {xs[d]}" for d in range(pre)]
    terms += [f"{names[pre + nb + d]} * {xs[pre + len(idx) + d]}" for d in range(len(x.shape) - pre - len(idx))]
    body = list(lines)
    for q, iv in enumerate(idx):
        st = broadcast_strides(iv.shape, contiguous_strides(iv.shape), bshape)
        n = x.shape[pre + q]
        body += [f"int64_t j{q} = (int64_t){em.ptr(iv)}[{_lin(names[pre:pre + nb], st)}];",
                 f"if (j{q} < 0) j{q} += {n};",
                 f"if (j{q} < 0 || j{q} >= {n}) {{ err__[0] = PT2C_ERR_INDEX_FLAG; {Y}[e__] = 0; return; }}"]
        terms.append(f"j{q} * {xs[pre + q]}")
    body.append(f"{Y}[e__] = {X}[{' + '.join(terms) or '0'}];")
    em.errors.add("INDEX")
    em.element_kernel(out.numel, [(Y, True), (X, False)] + [(em.ptr(v), False) for v in dict.fromkeys(idx)], body,
                      uses_err=True)


def _conv_transpose2d(em: GpuEmitter, node: Node) -> None:
    """Transposed convolution as a gather: each output element sums the input taps that land on it."""
    at = node.attrs
    x, w = node.inputs[:2]
    out = node.outputs[0]
    _, C, H, W = x.shape
    _, OC, OH, OW = out.shape
    G = at["groups"]
    Cg, OCg = C // G, OC // G
    KH, KW = w.shape[2:]
    (sh, sw), (ph, pw), (dh, dw) = at["stride"], at["padding"], at["dilation"]
    X, Wt, Y = em.ptr(x), em.ptr(w), em.ptr(out)
    params = [(Y, True), (X, False), (Wt, False)]
    if len(node.inputs) > 2:
        params.append((em.ptr(node.inputs[2]), False))
    em.element_kernel(out.numel, params, [
        f"const pt2c_long ow = e__ % {OW}, oh = (e__ / {OW}) % {OH}, oc = (e__ / {OW * OH}) % {OC}, "
        f"n = e__ / {OW * OH * OC};",
        f"const pt2c_long g = oc / {OCg}, ocg = oc % {OCg};",
        f"float s = {params[3][0] + '[oc]' if len(params) > 3 else '0.0f'};",
        f"for (pt2c_long icg = 0; icg < {Cg}; icg++) {{",
        f"    const pt2c_long ic = g * {Cg} + icg;",
        f"    PT2C_GLOBAL const float *xp = {X} + (n * {C} + ic) * {H * W};",
        f"    PT2C_GLOBAL const float *wp = {Wt} + (ic * {OCg} + ocg) * {KH * KW};",
        f"    for (pt2c_long kh = 0; kh < {KH}; kh++) {{",
        f"        const pt2c_long th = oh + {ph} - kh * {dh};",
        f"        if (th < 0 || th % {sh} != 0 || th / {sh} >= {H}) continue;",
        f"        for (pt2c_long kw = 0; kw < {KW}; kw++) {{",
        f"            const pt2c_long tw = ow + {pw} - kw * {dw};",
        f"            if (tw < 0 || tw % {sw} != 0 || tw / {sw} >= {W}) continue;",
        f"            s += xp[(th / {sh}) * {W} + tw / {sw}] * wp[kh * {KW} + kw];",
        "        }",
        "    }",
        "}",
        f"{Y}[e__] = s;"])


def _select_sort(em: GpuEmitter, node: Node) -> None:
    """sort / topk: one thread per line, k selection passes (stable; NaN first descending, last ascending)."""
    x = node.inputs[0]
    vals, inds = node.outputs
    dim, k, desc = node.attrs["dim"], node.attrs["k"], node.attrs["descending"]
    outer, n, inner = outer_inner(x.shape or (1,), dim)
    X, V, I = em.ptr(x), em.ptr(vals), em.ptr(inds)
    t = ctype(x.dtype)
    nan_a, nan_b = ("(va != va)", "(vb != vb)") if x.dtype == "float32" else ("0", "0")
    if desc:
        before = f"({nan_a} ? (!{nan_b} || ia < ib) : (!{nan_b} && (va > vb || (va == vb && ia < ib))))"
    else:
        before = f"({nan_b} ? (!{nan_a} || ia < ib) : (!{nan_a} && (va < vb || (va == vb && ia < ib))))"
    em.element_kernel(outer * inner, [(V, True), (I, True), (X, False)], [
        f"const pt2c_long in_ = e__ % {inner}, o = e__ / {inner};",
        f"PT2C_GLOBAL const {t} *xl = {X} + o * {n * inner} + in_;",
        "pt2c_long prev = 0;",
        "int have = 0;",
        f"for (pt2c_long r = 0; r < {k}; r++) {{",
        "    pt2c_long best = 0;",
        "    int found = 0;",
        f"    for (pt2c_long j = 0; j < {n}; j++) {{",
        f"        {t} va, vb;",
        "        pt2c_long ia, ib;",
        "        if (have) { /* j must come after prev */",
        f"            va = xl[prev * {inner}]; ia = prev; vb = xl[j * {inner}]; ib = j;",
        f"            if (!{before}) continue;",
        "        }",
        "        if (found) {",
        f"            va = xl[j * {inner}]; ia = j; vb = xl[best * {inner}]; ib = best;",
        f"            if (!{before}) continue;",
        "        }",
        "        best = j;",
        "        found = 1;",
        "    }",
        f"    {V}[(o * {k} + r) * {inner} + in_] = xl[best * {inner}];",
        f"    {I}[(o * {k} + r) * {inner} + in_] = (int64_t)best;",
        "    prev = best;",
        "    have = 1;",
        "}"])


def _fill(em: GpuEmitter, node: Node) -> None:
    out = node.outputs[0]
    Y = em.ptr(out)
    em.element_kernel(out.numel, [(Y, True)], [f"{Y}[e__] = {lit(out.dtype, node.attrs['value'])};"])


def _moments_norm(em: GpuEmitter, node: Node) -> None:
    O, M, I = node.attrs["view"]
    x = node.inputs[0]
    y, mean, rstd = node.outputs
    em.library.add("norm")
    em.launch("pt2c_moments_norm", [_t(y, 0, False), _t(mean, 0, False), _t(rstd, 0, False), _t(x), ("i", O),
                                    ("i", M), ("i", I), ("f", float(node.attrs["eps"]))], _rows(M), (BLOCK, 1, 1))


# ops whose CPU emit function only writes loop nests over strided_loop: on a GPU, one generated kernel each
LOOP_OPS = ("ew", "strided", "cat")

GPU_OPS: dict[str, Callable[[GpuEmitter, Node], None]] = {
    "matmul": _matmul, "conv2d": _conv2d, "pool2d": _pool2d, "adaptive_pool2d": _adaptive_pool2d,
    "layer_norm": _layer_norm, "rms_norm": _rms_norm, "softmax": _softmax, "reduce": _reduce, "sdpa": _sdpa,
    "gather": _gather, "take": _take, "pad": _pad, "channel_affine": _channel_affine, "upsample2d": _upsample2d,
    "cumsum": _cumsum, "gather_dim": _gather_dim, "index_multi": _index_multi, "moments_norm": _moments_norm,
    "fill": _fill, "conv_transpose2d": _conv_transpose2d,
    "select_sort": _select_sort,
}


def gpu_kernel(op: str) -> str:
    """What runs an IR op on a GPU target, for docs/ops.md: the library kernel file(s) its emitter launches,
    "generated kernel", or "-"."""
    import inspect

    if OPS[op].alias:
        return "no code (a view)"
    if op in LOOP_OPS:
        return "generated kernel"
    if op not in GPU_OPS:
        return "-"
    src = inspect.getsource(GPU_OPS[op])
    files = sorted(set(re.findall(r'em\.library\.add\("(\w+)"\)', src)))
    return ", ".join(f"`gpu/{f}.h`" for f in files) or "generated kernel"


def tensor_bytes(plan: MemoryPlan, v: Value, const_offsets: dict[int, int]) -> tuple[str, int]:
    """Where v lives: (region, byte offset in it); region "w" (weights), "ws" (activations), "in<i>", "out<i>"."""
    r = plan.root(v)
    off = plan.elem_offset.get(id(v), 0) * itemsize(r.dtype)
    if r.is_const:
        return "w", const_offsets[id(r)] + off
    st = plan.storage[id(r)]
    if st.kind == "input":
        return f"in{st.index}", off
    if st.kind == "output":
        return f"out{st.index}", off
    return "ws", st.offset + off


__all__ = ["ACT_CODES", "GPU_OPS", "LOOP_OPS", "gpu_kernel", "GpuEmitter", "Launch", "gpu_kernel_files", "kernel_params",
           "tensor_bytes"]
