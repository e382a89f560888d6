"""Pass tests, TVM style (relax's test_transform_*.py): for each pass a small hand-built `before`
graph and the `expected` graph; the pass's result must equal `expected` structurally (ops in order,
edges, attrs, shapes and dtypes, constants by value; names are not compared), and the reference
interpreter (eval_graph) must give the same numbers before and after on random inputs.  Then a
few end-to-end checks that the optimized graph of a real model has the expected shape and still
reproduces PyTorch eager."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn as nn

from pt2c.compiler import to_graph
from pt2c.ir import Graph, Node, Origin, Value
from pt2c.kernels import layout
from pt2c.ops import eval_graph, verify
from pt2c.ops.elementwise import e_in, e_lit
from pt2c.options import CompileOptions
from pt2c.passes import finish
from pt2c.passes.algorithms import choose_algorithms
from pt2c.passes.attention_views import fold_attention_views
from pt2c.passes.fold import dce, fold_batchnorm, fuse_epilogues
from pt2c.passes.fusion import fuse_elementwise, fuse_views
from pt2c.passes.memory import ALIGN, materialize_outputs, plan_memory
from pt2c.passes.pads import fold_pads
from pt2c.passes.prepack import prepack
from pt2c.passes.pwdw import fuse_pw_dw

F = "float32"


# ---------------------------------------------------------------- building and comparing graphs

class B:
    """A graph by hand: B().input(...), .const(...), .op(...), .graph(outputs)."""

    def __init__(self, seed: int = 0) -> None:
        self.inputs: list[Value] = []
        self.nodes: list[Node] = []
        self.rng = np.random.default_rng(seed)
        self.n = 0

    def _name(self, hint: str) -> str:
        self.n += 1
        return f"{hint}{self.n}"

    def input(self, shape: tuple[int, ...], dtype: str = F) -> Value:
        v = Value(self._name("x"), shape, dtype)
        self.inputs.append(v)
        return v

    def const(self, data: Any, hint: str = "w") -> Value:
        data = np.asarray(data)
        return Value(self._name(hint), data.shape, "bool" if data.dtype == np.bool_ else str(data.dtype), data)

    def weight(self, *shape: int) -> Value:
        return self.const(self.rng.standard_normal(shape).astype(np.float32))

    def op(self, op: str, inputs: list[Value], attrs: dict, shapes: Any, dtypes: Any = F,
           origin: Origin | None = None) -> Any:
        """One node; shapes: its output's shape, or a list of them (then a list of Values comes back)."""
        many = isinstance(shapes, list)
        shapes = shapes if many else [shapes]
        dtypes = dtypes if isinstance(dtypes, list) else [dtypes] * len(shapes)
        outs = [Value(self._name(op), s, d) for s, d in zip(shapes, dtypes)]
        self.nodes.append(Node(op, list(inputs), dict(attrs), outs, origin or Origin()))
        return outs if many else outs[0]

    def graph(self, *outputs: Value) -> Graph:
        g = Graph("g", list(self.inputs), list(self.nodes), list(outputs))
        verify(g)
        return g


def ew(b: B, expr: tuple, inputs: list[Value], shape: tuple[int, ...], dtype: str = F, **attrs: Any) -> Value:
    return b.op("ew", inputs, {"expr": expr, **attrs}, shape, dtype)


def fn(name: str, *args: tuple, dtype: str = F) -> tuple:
    return (name, dtype, *args)


X0, X1 = e_in(F, 0), e_in(F, 1)


def conv_attrs(k: int = 3, stride: int = 1, pad: int = 1, groups: int = 1, **extra: Any) -> dict:
    return {"kernel": (k, k), "stride": (stride, stride), "padding": (pad, pad), "dilation": (1, 1),
            "groups": groups, "has_bias": False, **extra}


def assert_same_graph(got: Graph, want: Graph) -> None:
    """TVM's assert_structural_equal for pt2c graphs (names aside)."""

    def refs(g: Graph) -> Any:
        where: dict[int, tuple] = {id(v): ("input", i) for i, v in enumerate(g.inputs)}
        for k, n in enumerate(g.nodes):
            for j, v in enumerate(n.outputs):
                where[id(v)] = ("node", k, n.op, j)
        return lambda v: ("const", v.shape, v.dtype) if v.is_const else where[id(v)]

    rg, rw = refs(got), refs(want)
    assert [n.op for n in got.nodes] == [n.op for n in want.nodes], (str(got), str(want))
    assert [(v.shape, v.dtype) for v in got.inputs] == [(v.shape, v.dtype) for v in want.inputs]
    for k, (a, b) in enumerate(zip(got.nodes, want.nodes)):
        where = f"node {k} ({a.op}):\n{got}\nexpected:\n{want}"
        assert [rg(v) for v in a.inputs] == [rw(v) for v in b.inputs], where
        assert a.attrs == b.attrs, where
        assert [(v.shape, v.dtype) for v in a.outputs] == [(v.shape, v.dtype) for v in b.outputs], where
        for va, vb in zip(a.inputs, b.inputs):
            if va.is_const:
                np.testing.assert_allclose(va.data, vb.data, rtol=1e-6, atol=1e-6, err_msg=where)
    assert [rg(v) for v in got.outputs] == [rw(v) for v in want.outputs], f"outputs:\n{got}\nexpected:\n{want}"


def random_inputs(g: Graph, seed: int = 1) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(v.shape).astype(np.float32) for v in g.inputs]


def check_pass(p: Any, before: Graph, expected: Graph, atol: float = 1e-5) -> Graph:
    """Run the pass on `before` (verified), compare with `expected` and the numbers with before's."""
    xs = random_inputs(before)
    want = eval_graph(before, xs)  # before the pass: passes rewrite the graph in place
    after = p(before)
    verify(after)
    assert_same_graph(after, expected)
    for a, w in zip(eval_graph(after, xs), want):
        np.testing.assert_allclose(a, w, rtol=1e-5, atol=atol)
    return after


# ---------------------------------------------------------------- dce

def _dce(b: B) -> tuple[Value, Value]:
    x = b.input((4,))
    y = ew(b, fn("relu", X0), [x], (4,))
    ew(b, fn("exp", X0), [x], (4,))  # never read
    return x, y


def test_dce_removes_unread_nodes():
    b = B()
    _, y = _dce(b)
    e = B()
    x = e.input((4,))
    check_pass(dce, b.graph(y), e.graph(ew(e, fn("relu", X0), [x], (4,))))


# ---------------------------------------------------------------- fold_pads

def test_fold_pads_grows_the_convs_padding():
    """a zero pad read by two convs becomes their padding; an asymmetric one their padding before (top,
    left) and padding_end (bottom, right)"""
    b = B()
    x, w1, w2, w3 = b.input((1, 3, 6, 6)), b.weight(4, 3, 3, 3), b.weight(3, 1, 3, 3), b.weight(4, 3, 3, 3)
    p = b.op("pad", [x], {"pads": ((0, 0), (0, 0), (1, 1), (2, 2)), "value": 0.0}, (1, 3, 8, 10))
    y1 = b.op("conv2d", [p, w1], conv_attrs(pad=0), (1, 4, 6, 8))
    y2 = b.op("conv2d", [p, w2], {**conv_attrs(groups=3), "padding": (1, 0)}, (1, 3, 8, 8))
    q = b.op("pad", [x], {"pads": ((0, 0), (0, 0), (0, 1), (0, 1)), "value": 0.0}, (1, 3, 7, 7))
    y3 = b.op("conv2d", [q, w3], conv_attrs(stride=2, pad=0), (1, 4, 3, 3))
    before = b.graph(y1, y2, y3)
    e = B()
    xe = e.input((1, 3, 6, 6))
    z1 = e.op("conv2d", [xe, e.const(w1.data)], {**conv_attrs(), "padding": (1, 2)}, (1, 4, 6, 8))
    z2 = e.op("conv2d", [xe, e.const(w2.data)], {**conv_attrs(groups=3), "padding": (2, 2)}, (1, 3, 8, 8))
    z3 = e.op("conv2d", [xe, e.const(w3.data)], {**conv_attrs(stride=2, pad=0), "padding_end": (1, 1)}, (1, 4, 3, 3))
    check_pass(fold_pads, before, e.graph(z1, z2, z3))


def test_fold_pads_leaves_pads_read_otherwise():
    """not zeros, read by something other than a conv, or a graph output: the pad stays"""
    b = B()
    x, w = b.input((1, 2, 4, 4)), b.weight(2, 2, 3, 3)
    p1 = b.op("pad", [x], {"pads": ((0, 0), (0, 0), (1, 1), (1, 1)), "value": 1.0}, (1, 2, 6, 6))
    y1 = b.op("conv2d", [p1, w], conv_attrs(pad=0), (1, 2, 4, 4))
    p2 = b.op("pad", [x], {"pads": ((0, 0), (0, 0), (1, 1), (1, 1)), "value": 0.0}, (1, 2, 6, 6))
    y2 = b.op("conv2d", [p2, w], conv_attrs(pad=0), (1, 2, 4, 4))
    y3 = ew(b, fn("relu", X0), [p2], (1, 2, 6, 6))
    before = b.graph(y1, y2, y3)
    ops = [(n.op, n.attrs.get("padding")) for n in before.nodes]
    assert [(n.op, n.attrs.get("padding")) for n in fold_pads(before).nodes] == ops


# ---------------------------------------------------------------- fold_batchnorm

def test_fold_batchnorm_scales_the_weights_and_makes_the_bias():
    b = B()
    x, w = b.input((1, 3, 5, 5)), b.weight(4, 3, 3, 3)
    scale, shift = b.weight(4), b.weight(4)
    y = b.op("conv2d", [x, w], conv_attrs(), (1, 4, 5, 5))
    before = b.graph(b.op("channel_affine", [y, scale, shift], {}, (1, 4, 5, 5)))
    e = B()
    xe = e.input((1, 3, 5, 5))
    we, be = e.const(w.data * scale.data.reshape(-1, 1, 1, 1)), e.const(shift.data.copy())
    expected = e.graph(e.op("conv2d", [xe, we, be], conv_attrs(has_bias=True), (1, 4, 5, 5)))
    check_pass(fold_batchnorm, before, expected)


# ---------------------------------------------------------------- fuse_epilogues

def test_fuse_epilogues_takes_the_residual_then_the_activation():
    b = B()
    x, w = b.input((1, 4, 6, 6)), b.weight(4, 4, 3, 3)
    y = b.op("conv2d", [x, w], conv_attrs(), (1, 4, 6, 6))
    r = ew(b, fn("add", X0, X1), [y, x], (1, 4, 6, 6))
    before = b.graph(ew(b, fn("relu", X0), [r], (1, 4, 6, 6)))
    e = B()
    xe = e.input((1, 4, 6, 6))
    expected = e.graph(e.op("conv2d", [xe, e.const(w.data), xe],
                            conv_attrs(has_residual=True, act="relu", lo=0.0, hi=0.0), (1, 4, 6, 6)))
    check_pass(fuse_epilogues, before, expected)


def test_fuse_epilogues_reaches_through_a_reshape():
    b = B()
    x, wt = b.input((5, 8)), b.weight(8, 8)
    y = b.op("matmul", [x, wt], {"has_bias": False, "k": 8}, (5, 8))
    v = b.op("view", [y], {"offset": 0}, (1, 5, 8))
    before = b.graph(ew(b, fn("gelu", X0), [v], (1, 5, 8)))
    e = B()
    xe = e.input((5, 8))
    ye = e.op("matmul", [xe, e.const(wt.data)], {"has_bias": False, "k": 8, "act": "gelu", "lo": 0.0, "hi": 0.0},
              (5, 8))
    expected = e.graph(e.op("view", [ye], {"offset": 0}, (1, 5, 8)))
    check_pass(fuse_epilogues, before, expected)


# ---------------------------------------------------------------- fuse_views

def test_fuse_views_reads_a_permute_in_place():
    b = B()
    x, y = b.input((3, 5)), b.input((5, 3))
    yt = b.op("strided", [y], {"strides": (1, 3), "offset": 0}, (3, 5))
    before = b.graph(ew(b, fn("add", X0, X1), [x, yt], (3, 5)))
    e = B()
    xe, ye = e.input((3, 5)), e.input((5, 3))
    expected = e.graph(ew(e, fn("add", X0, X1), [xe, ye], (3, 5), views=[None, ((3, 5), (1, 3), 0)]))
    check_pass(fuse_views, before, expected)


def test_fuse_views_turns_a_transposed_operand_into_gemm_strides():
    b = B()
    a, w = b.input((4, 6)), b.input((5, 6))
    wt = b.op("strided", [w], {"strides": (1, 6), "offset": 0}, (6, 5))
    before = b.graph(b.op("matmul", [a, wt], {"has_bias": False, "k": 6}, (4, 5)))
    e = B()
    ae, we = e.input((4, 6)), e.input((5, 6))
    expected = e.graph(e.op("matmul", [ae, we], {"has_bias": False, "k": 6, "b_strides": (0, 1, 6)}, (4, 5)))
    check_pass(fuse_views, before, expected)


# ---------------------------------------------------------------- fuse_elementwise

def test_fuse_elementwise_inlines_a_chain_into_one_expression():
    b = B()
    x, y = b.input((2, 3)), b.input((2, 3))
    t = ew(b, fn("mul", X0, e_lit(F, 2.0)), [x], (2, 3))
    u = ew(b, fn("add", X0, X1), [t, y], (2, 3))
    before = b.graph(ew(b, fn("sigmoid", X0), [u], (2, 3)))
    e = B()
    xe, ye = e.input((2, 3)), e.input((2, 3))
    expr = fn("sigmoid", fn("add", fn("mul", X0, e_lit(F, 2.0)), X1))
    expected = e.graph(ew(e, expr, [xe, ye], (2, 3)))
    check_pass(fuse_elementwise, before, expected)


# ---------------------------------------------------------------- choose_algorithms

def _split_heads(b: B, qkv: Value, part: int, heads: int, d: int) -> Value:
    """GPT-2's c_attn(x).split(...)[part].view(B, L, H, D).transpose(1, 2): a slice, a view, a permute."""
    n, L, three_hd = qkv.shape
    s = b.op("strided", [qkv], {"strides": (L * three_hd, three_hd, 1), "offset": part * heads * d},
             (n, L, heads * d))
    v = b.op("view", [s], {"offset": 0}, (n, L, heads, d))
    return b.op("strided", [v], {"strides": (L * heads * d, d, heads * d, 1), "offset": 0}, (n, heads, L, d))


def test_fold_attention_views_reads_q_k_v_and_writes_the_output_in_place():
    n, L, H, D = 2, 5, 3, 4
    b = B()
    qkv = b.input((n, L, 3 * H * D))
    q, k, v = (_split_heads(b, qkv, i, H, D) for i in range(3))
    o = b.op("sdpa", [q, k, v], {"scale": 0.5, "causal": True}, (n, H, L, D))
    ob = b.op("strided", [o], {"strides": (H * L * D, D, L * D, 1), "offset": 0}, (n, L, H, D))
    before = b.graph(ob)
    e = B()
    qkv_e = e.input((n, L, 3 * H * D))
    for i in range(3):  # the slices, views and permutes stay until dce removes them
        _split_heads(e, qkv_e, i, H, D)
    row = (L * 3 * H * D, D, 3 * H * D)
    layout = {"q": (*row, 0), "k": (*row, H * D), "v": (*row, 2 * H * D), "out": (L * H * D, D, H * D, 0)}
    out = e.op("sdpa", [qkv_e, qkv_e, qkv_e], {"scale": 0.5, "causal": True, "layout": layout,
                                                "dims": (n, H, H, L, L, D, D)}, (n, L, H, D))
    expected = e.graph(out)
    after = check_pass(fold_attention_views, before, expected)
    assert [m.op for m in dce(after).nodes] == ["sdpa"]  # no copy left


def test_fold_attention_views_reads_repeated_kv_heads_once():
    """Llama's repeat_kv (expand + reshape to H heads) becomes the kernel's own kv heads."""
    n, Hkv, rep, L, D = 1, 2, 2, 4, 8
    b = B()
    q, k, v = b.input((n, Hkv * rep, L, D)), b.input((n, Hkv, L, D)), b.input((n, Hkv, L, D))

    def repeat(x: Value) -> Value:
        u = b.op("view", [x], {"offset": 0}, (n, Hkv, 1, L, D))
        ex = b.op("strided", [u], {"strides": (Hkv * L * D, L * D, 0, D, 1), "offset": 0}, (n, Hkv, rep, L, D))
        return b.op("view", [ex], {"offset": 0}, (n, Hkv * rep, L, D))

    o = b.op("sdpa", [q, repeat(k), repeat(v)], {"scale": 0.35, "causal": False}, (n, Hkv * rep, L, D))
    after = fold_attention_views(b.graph(o))
    verify(after)
    s = next(m for m in after.nodes if m.op == "sdpa")
    assert s.inputs[1] is k and s.inputs[2] is v and s.attrs["dims"][2] == Hkv
    xs = random_inputs(after)
    ref = eval_graph(after, xs)[0]
    qt, kt, vt = (torch.from_numpy(x) for x in xs)
    want = torch.nn.functional.scaled_dot_product_attention(qt, kt.repeat_interleave(rep, 1),
                                                            vt.repeat_interleave(rep, 1), scale=0.35)
    np.testing.assert_allclose(ref, want.numpy(), rtol=1e-5, atol=1e-5)


def _four_convs(b: B, x: Value) -> list[Value]:
    """A depthwise, a Winograd-sized 3x3, a few-pixel (7x7) and a strided 1x1 conv."""
    dw = b.op("conv2d", [x, b.weight(16, 1, 3, 3)], conv_attrs(groups=16), (1, 16, 16, 16))
    w3 = b.op("conv2d", [x, b.weight(16, 16, 3, 3)], conv_attrs(), (1, 16, 16, 16))
    sp = b.op("conv2d", [w3, b.weight(16, 16, 3, 3)], conv_attrs(stride=2, pad=0), (1, 16, 7, 7))
    s1 = b.op("conv2d", [dw, b.weight(8, 16, 1, 1)], conv_attrs(k=1, stride=2, pad=0), (1, 8, 8, 8))
    return [sp, s1]


def test_choose_algorithms_records_each_convs_kernel():
    for winograd, algo in ((True, "winograd"), (False, "im2col")):
        b = B()
        before = b.graph(*_four_convs(b, b.input((1, 16, 16, 16))))
        e = B()
        expected = e.graph(*_four_convs(e, e.input((1, 16, 16, 16))))
        for n, a in zip(expected.nodes, ("depthwise", algo, "smallp", "im2col")):
            n.attrs["algo"] = a
        check_pass(lambda g, w=winograd: choose_algorithms(g, winograd=w), before, expected)


def test_grouped_3x3_convs_run_winograd_per_group(tmp_path):
    """RegNet-style grouped 3x3 convs (group width 32 and 16) take Winograd, one kernel call per image and
    group with the bias and the residual offset to the group; batch 2; against eager (tolerance 1e-4 *
    max(1, max|ref|), Winograd's transforms round more than a direct conv)."""
    import pt2c
    from conftest import assert_outputs_close, build_and_run

    class M(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = nn.Conv2d(64, 64, 3, padding=1, groups=2)
            self.b = nn.Conv2d(64, 96, 3, padding=1, groups=4, bias=False)

        def forward(self, x):
            return self.b(torch.relu(self.a(x)) + x).relu()

    torch.manual_seed(0)
    m = M().eval()
    x = torch.randn(2, 64, 20, 20)
    g, _ = to_graph(torch.export.export(m, (x,)))
    assert [(n.attrs["algo"], n.attrs["groups"]) for n in g.nodes if n.op == "conv2d"] == [("winograd", 2),
                                                                                         ("winograd", 4)]
    pt2c.compile(m, tmp_path / "out", example_inputs=(x,), target="x86_64-v3")
    with torch.no_grad():
        assert_outputs_close(build_and_run(tmp_path / "out", [x.numpy()]), [m(x).numpy()], "grouped Winograd")


# ---------------------------------------------------------------- prepack

def test_prepack_lays_constant_weights_out_for_their_kernel():
    b = B()
    x = b.input((1, 16, 16, 16))
    convs = _four_convs(b, x)
    flat = b.op("view", [convs[1]], {"offset": 0}, (8, 64))
    mm = b.op("matmul", [flat, b.weight(64, 10)], {"has_bias": False, "k": 64}, (8, 10))
    before = choose_algorithms(b.graph(convs[0], mm), winograd=True)
    e = B()
    xe = e.input((1, 16, 16, 16))
    pack = {"winograd": layout.pack_winograd_weight, "smallp": layout.pack_conv_weight_t,
            "im2col": lambda w: layout.pack_conv_weight(w, 1)}
    outs = {}
    for n in before.nodes:
        ins = [outs.get(id(v), xe) if not v.is_const else e.const(v.data) for v in n.inputs]
        attrs = dict(n.attrs)
        if n.op == "conv2d" and attrs["algo"] != "depthwise":
            ins[1], attrs["w_packed"] = e.const(pack[attrs["algo"]](ins[1].data)), True
        elif n.op == "matmul":
            ins[1], attrs["b_packed"] = e.const(layout.pack_b(ins[1].data)), True
        outs[id(n.outputs[0])] = e.op(n.op, ins, attrs, n.outputs[0].shape)
    expected = e.graph(*[outs[id(v)] for v in before.outputs])
    check_pass(prepack, before, expected, atol=1e-4)  # Winograd's reference unpacks within float32 rounding


# ---------------------------------------------------------------- fuse_pw_dw

def test_fuse_pw_dw_runs_an_expansion_and_its_depthwise_conv_as_one_node():
    b = B()
    x = b.input((1, 8, 128, 128))
    w1, w2, bias = b.weight(24, 8, 1, 1), b.weight(24, 1, 3, 3), b.weight(24)
    pw_origin = Origin("conv", "features.1.0", "torch.nn.modules.conv.Conv2d", "m.py:3: self.c(x)")
    y = b.op("conv2d", [x, w1], conv_attrs(k=1, pad=0, act="relu", lo=0.0, hi=0.0), (1, 24, 128, 128),
             origin=pw_origin)
    z = b.op("conv2d", [y, w2, bias], conv_attrs(groups=24, has_bias=True), (1, 24, 128, 128))
    before = prepack(choose_algorithms(b.graph(z)))
    pw_attrs, dw_attrs = dict(before.nodes[0].attrs), dict(before.nodes[1].attrs)
    assert pw_attrs["algo"] == "im2col" and pw_attrs["w_packed"] and dw_attrs["algo"] == "depthwise"
    e = B()
    xe = e.input((1, 8, 128, 128))
    ins = [xe, e.const(layout.pack_conv_weight(w1.data)), e.const(w2.data), e.const(bias.data)]
    attrs = {"pw": pw_attrs, "dw": dw_attrs, "pw_inputs": 2, "mid": (y.name, (1, 24, 128, 128), F),
             "pw_origin": ("conv", "features.1.0", "torch.nn.modules.conv.Conv2d", "m.py:3: self.c(x)")}
    expected = e.graph(e.op("conv2d_pw_dw", ins, attrs, (1, 24, 128, 128)))
    after = check_pass(fuse_pw_dw, before, expected, atol=1e-4)
    from pt2c.ops.conv import pw_dw_parts

    pw, dw = pw_dw_parts(after.nodes[0])  # the two convs, rebuilt from plain data for comments and references
    assert pw.origin == pw_origin and dw.outputs == after.nodes[0].outputs and dw.outputs[0].producer is after.nodes[0]


# ---------------------------------------------------------------- materialize_outputs

def test_materialize_outputs_copies_what_cannot_be_written_in_place():
    b = B()
    x = b.input((2, 3))
    c = b.const(np.ones((2, 3), np.float32))
    y = ew(b, fn("neg", X0), [x], (2, 3))
    tail = b.op("view", [y], {"offset": 3}, (3,))
    before = b.graph(x, c, y, y, tail)  # an input, a constant, one value twice, an offset view
    e = B()
    xe = e.input((2, 3))
    ye = ew(e, fn("neg", X0), [xe], (2, 3))
    taile = e.op("view", [ye], {"offset": 3}, (3,))
    copies = [ew(e, X0, [v], v.shape) for v in (xe, e.const(c.data), ye, taile)]
    expected = e.graph(copies[0], copies[1], ye, copies[2], copies[3])
    check_pass(materialize_outputs, before, expected)


# ---------------------------------------------------------------- plan_memory

def _chain(b: B, n: int = 4) -> Graph:
    """x -> a -> view -> b -> ... each [8, 64] (2 KiB), the last the output."""
    v = b.input((8, 64))
    for i in range(n):
        v = ew(b, fn("relu", X0), [v], (8, 64))
        if i == 1:
            v = b.op("view", [v], {"offset": 0}, (8, 64))
    return b.graph(v)


def test_plan_memory_places_the_chain_in_two_alternating_buffers():
    g = _chain(B())
    g, plan = finish(g)  # materialize_outputs (nothing to copy here), plan_memory, both verified
    x, n0, n1, view, n2, n3 = [g.inputs[0]] + [n.outputs[0] for n in g.nodes]
    size = 8 * 64 * 4
    assert plan.buffers[x.name].kind == "input" and plan.buffers[n3.name].kind == "output"
    assert plan.aliases == {view.name: (n1.name, 0)}
    # n0 live over nodes [0, 1], n1 (through its view) over [1, 3], n2 over [3, 4]: n0 and n2 share bytes
    arena = {k: (b.offset, b.first, b.last) for k, b in plan.buffers.items() if b.kind == "arena"}
    assert arena == {n0.name: (0, 0, 1), n1.name: (size, 1, 3), n2.name: (0, 3, 4)}
    assert plan.arena_bytes == plan.lower_bound == 2 * size and size % ALIGN == 0


def test_memory_plan_reuses_buffers_and_reports_lower_bound():
    m = nn.Sequential(*[nn.Linear(64, 64) for _ in range(6)]).eval()
    x = torch.randn(8, 64)
    g, _ = to_graph(torch.export.export(m, (x,)), options=CompileOptions(name="seq"))
    g, plan = finish(g)
    # six 2 KiB intermediates, at most two alive at once (the last writes the output buffer)
    assert plan.lower_bound == 2 * 8 * 64 * 4
    assert plan.arena_bytes == plan.lower_bound
    arena = {s.offset for s in plan.storage.values() if s.kind == "arena"}
    assert len(arena) == 2
    assert plan_memory(g) == plan  # plain data: planning again gives an equal plan


# ---------------------------------------------------------------- end to end: real models through the pipeline

class ConvBlock(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(4, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        with torch.no_grad():
            self.bn.running_mean.uniform_(-1, 1)
            self.bn.running_var.uniform_(0.5, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.bn(self.conv(x)) + x)


class EwChain(nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(x * 2.0 + y.permute(1, 0)) - 1.0


def _ops(g):
    return [n.op for n in g.nodes]


def test_batchnorm_residual_relu_fold_into_one_conv():
    torch.manual_seed(0)
    m = ConvBlock().eval()
    x = torch.randn(1, 4, 6, 6)
    g, _ = to_graph(torch.export.export(m, (x,)), options=CompileOptions(name="blk"))
    assert _ops(g) == ["conv2d"]
    conv = g.nodes[0]
    assert conv.attrs["has_bias"] and conv.attrs["has_residual"] and conv.attrs["act"] == "relu"
    assert conv.attrs["algo"] == "smallp" and conv.attrs["w_packed"]  # 36 output pixels
    (got,) = eval_graph(g, [x.numpy()])
    np.testing.assert_allclose(got, m(x).detach().numpy(), atol=1e-5)


class LinearGeluResidual(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: [1, T, 8]: the linear runs on [T, 8]
        return nn.functional.gelu(self.fc(x) + x)


def test_linear_epilogue_fuses_through_the_reshape():
    torch.manual_seed(0)
    m = LinearGeluResidual().eval()
    x = torch.randn(1, 5, 8)
    g, _ = to_graph(torch.export.export(m, (x,)), options=CompileOptions(name="lin"))
    assert "ew" not in _ops(g), _ops(g)
    mm = next(n for n in g.nodes if n.op == "matmul")
    assert mm.attrs["has_residual"] and mm.attrs["act"] == "gelu"
    (got,) = eval_graph(g, [x.numpy()])
    np.testing.assert_allclose(got, m(x).detach().numpy(), atol=1e-5)


def test_elementwise_chain_with_permute_is_one_loop():
    x, y = torch.randn(3, 5), torch.randn(5, 3)
    g, _ = to_graph(torch.export.export(EwChain(), (x, y)), options=CompileOptions(name="ew"))
    assert _ops(g) == ["ew"]
    assert g.nodes[0].attrs.get("views"), "the permute should be read in place, not copied"
    (got,) = eval_graph(g, [x.numpy(), y.numpy()])
    np.testing.assert_allclose(got, EwChain()(x, y).numpy(), atol=1e-6)


def test_unoptimized_graph_matches_too():
    torch.manual_seed(0)
    m = ConvBlock().eval()
    x = torch.randn(1, 4, 6, 6)
    g, _ = to_graph(torch.export.export(m, (x,)), options=CompileOptions(name="blk", opt_level=0))
    verify(g)
    assert "channel_affine" in _ops(g)
    (got,) = eval_graph(g, [x.numpy()])
    np.testing.assert_allclose(got, m(x).detach().numpy(), atol=1e-5)


class TfSamePads(nn.Module):
    """TF-style "same" padding written out: F.pad before convs (symmetric, asymmetric, empty)."""

    def __init__(self) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 3)
        self.dw = nn.Conv2d(8, 8, 3, stride=2, groups=8)
        self.pw = nn.Conv2d(8, 16, 1)
        self.c5 = nn.Conv2d(16, 8, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        F = nn.functional
        y = torch.relu(self.c1(F.pad(x, (1, 1, 1, 1))))
        y = torch.relu(self.dw(F.pad(y, (0, 1, 0, 1))))      # stride 2 on an even size: asymmetric
        y = self.pw(F.pad(y, (0, 0, 0, 0)))                   # nothing
        return self.c5(F.pad(y, (2, 2, 2, 2)))


def test_tf_same_pads_fold_into_the_convs():
    torch.manual_seed(0)
    m, x = TfSamePads().eval(), torch.randn(1, 3, 12, 12)
    g, _ = to_graph(torch.export.export(m, (x,)), options=CompileOptions(name="tf"))
    assert "pad" not in _ops(g), _ops(g)
    convs = [n for n in g.nodes if n.op == "conv2d"]
    assert [n.attrs["padding"] for n in convs] == [(1, 1), (0, 0), (0, 0), (2, 2)]
    assert [n.attrs.get("padding_end") for n in convs] == [None, (1, 1), None, None]
    (got,) = eval_graph(g, [x.numpy()])
    np.testing.assert_allclose(got, m(x).detach().numpy(), atol=1e-5)


class Wide3x3(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(16, 16, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


def test_winograd_is_an_option_not_graph_meta():
    torch.manual_seed(0)
    m, x = Wide3x3().eval(), torch.randn(1, 16, 16, 16)
    ep = torch.export.export(m, (x,))
    for opts, algo in ((CompileOptions(), "winograd"), (CompileOptions(winograd=False), "im2col"),
                       (CompileOptions(opt_level=0), "im2col"), (CompileOptions.resolve(target="cortex-m"), "im2col"),
                       (CompileOptions.resolve(target="cortex-m", winograd=True), "winograd")):
        g, _ = to_graph(ep, options=opts)
        assert g.meta == {} and g.nodes[0].attrs["algo"] == algo, (opts, g.nodes[0].attrs)
        (got,) = eval_graph(g, [x.numpy()])
        np.testing.assert_allclose(got, m(x).detach().numpy(), atol=1e-4)
