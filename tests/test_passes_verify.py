"""The verifier run between passes: each op's check rule (shapes, dtypes, attrs) rejects a broken
node with the op, what is wrong and the node; attrs must be plain data; a memory plan is checked
against its graph (buffers for every value, no two live arena buffers overlapping); a pass that
breaks the IR is reported as an internal error naming the pass."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from test_passes import X0, X1, B, conv_attrs, ew, fn

from pt2c.ir import Graph, Node, Value, VerifyError
from pt2c.ops import OPS, verify
from pt2c.ops.registry import non_plain
from pt2c.passes import finish, run_pass
from pt2c.passes.memory import plan_memory
from pt2c.passes.prepack import prepack

F = "float32"


def rejects(g: Graph, *words: str, plan: object = None) -> str:
    with pytest.raises(VerifyError) as e:
        verify(g, plan)  # type: ignore[arg-type]
    msg = str(e.value)
    for w in words:
        assert w in msg, msg
    return msg


def test_every_op_has_a_check_rule():
    assert [name for name, op in OPS.items() if op.rule is None] == []


def test_plain_data():
    assert non_plain({"a": (1, 2.0, None, True, "s", [1, {"b": ()}])}) is None
    assert non_plain({"w": np.zeros(3)}) == "w: ndarray"
    assert non_plain({"lo": np.float64(1.0)}) == "lo: float64"  # a float subclass, still not plain
    assert non_plain({"p": {"x": [1, Value("v", (1,), F)]}}) == "p.x[1]: Value"
    assert non_plain({"d": {1: 2}}) == "d: dict key 1 (int)"


def _matmul(b: B, out_shape: tuple[int, ...], **attrs: object) -> Graph:
    a, w = b.input((4, 6)), b.weight(6, 5)
    return Graph("g", b.inputs, [Node("matmul", [a, w], {"has_bias": False, "k": 6, **attrs},
                                      [Value("y", out_shape, F)])], [])


def test_a_node_with_non_plain_attrs_is_rejected():
    b = B()
    x = b.input((2,))
    y = ew(b, fn("relu", X0), [x], (2,))
    b.nodes[-1].attrs["_w_unpacked"] = np.zeros(2, np.float32)
    rejects(Graph("g", b.inputs, b.nodes, [y]), "op ew", "attr _w_unpacked: ndarray is not plain data", "%")
    b.nodes[-1].attrs.pop("_w_unpacked")
    b.nodes[-1].attrs["_pw"] = b.nodes[-1]
    rejects(Graph("g", b.inputs, b.nodes, [y]), "attr _pw: Node")


def test_matmul_shapes():
    verify(_matmul(B(), (4, 5)))
    rejects(_matmul(B(), (4, 6)), "op matmul", "is not [6, 6]", "matmul(%x1")
    rejects(_matmul(B(), (4, 5), act="swish"), "unknown epilogue activation 'swish'")
    rejects(_matmul(B(), (4, 5), b_packed=True), "packed b")


def test_elementwise_types_and_broadcasting():
    b = B()
    x, i = b.input((2, 3)), b.input((3,), "int64")
    ew(b, fn("add", X0, X1), [x, i], (2, 3))  # the leaf says float32
    rejects(Graph("g", b.inputs, b.nodes, []), "op ew", "expression leaf ('in', 'float32', 1): input 1 is int64")
    b.nodes[-1].attrs["expr"] = fn("add", X0, ("in", "int64", 1))  # the int64 operand is not cast
    rejects(Graph("g", b.inputs, b.nodes, []), "add of operands of different dtypes ['float32', 'int64']")
    b = B()
    x, y = b.input((2, 3)), b.input((4,))
    ew(b, fn("add", X0, X1), [x, y], (2, 3))
    rejects(Graph("g", b.inputs, b.nodes, []), "do not broadcast")
    b = B()
    x = b.input((2, 3))
    ew(b, fn("lt", X0, X0), [x], (2, 3))  # a comparison gives bool, not float32
    rejects(Graph("g", b.inputs, b.nodes, []), "lt(float32, float32) -> float32")
    b = B()
    x = b.input((6,))
    ew(b, X0, [x], (2, 3), views=[((2, 3), (3, 1), 1)])  # reads element 6 of 6
    rejects(Graph("g", b.inputs, b.nodes, []), "view of input 0: reads elements 1..6 of 6")


def test_views_and_strided_reads_stay_inside_their_input():
    b = B()
    x = b.input((2, 3))
    b.op("view", [x], {"offset": 2}, (5,))
    rejects(Graph("g", b.inputs, b.nodes, []), "op view", "5 elements at offset 2 of a 6-element tensor")
    b = B()
    x = b.input((2, 3))
    b.op("strided", [x], {"strides": (1, 3), "offset": 1}, (3, 2))
    rejects(Graph("g", b.inputs, b.nodes, []), "op strided", "reads elements 1..6 of 6")


def test_conv2d_algorithm_and_packed_weights():
    b = B()
    x = b.input((1, 16, 16, 16))
    y = b.op("conv2d", [x, b.weight(8, 16, 1, 1)], conv_attrs(k=1, pad=0), (1, 8, 16, 16))
    g = b.graph(y)
    g.nodes[0].attrs["algo"] = "winograd"
    rejects(g, "op conv2d", "Winograd on a conv that is not 3x3/1")
    g.nodes[0].attrs["algo"] = "depthwise"
    rejects(g, "algorithm depthwise for groups 1 of 16 channels")
    g.nodes[0].attrs["algo"] = "im2col"
    prepack(g)
    verify(g)
    g.nodes[0].attrs["algo"] = "smallp"  # a different layout than the one packed
    rejects(g, "packed weight", "is not the", "floats of smallp")
    b = B()
    x = b.input((1, 3, 8, 8))
    b.op("conv2d", [x, b.weight(4, 3, 3, 3)], conv_attrs(), (1, 4, 7, 7))
    rejects(Graph("g", b.inputs, b.nodes, []), "the inputs and attrs give float32[1, 4, 8, 8]")


def test_index_and_shape_rules():
    b = B()
    x, i = b.input((5, 3)), b.input((4,))
    b.op("gather", [x, i], {"dim": 0, "wrap": False}, (4, 3))
    rejects(Graph("g", b.inputs, b.nodes, []), "op gather", "index %x2 is float32")
    b = B()
    x, y = b.input((2, 3)), b.input((2, 4))
    b.op("cat", [x, y], {"dim": 1}, (2, 8))
    rejects(Graph("g", b.inputs, b.nodes, []), "op cat", "float32[2, 8], the inputs and attrs give float32[2, 7]")
    b = B()
    x = b.input((2, 5))
    b.op("select_sort", [x], {"dim": 1, "k": 6, "descending": True}, [(2, 6), (2, 6)], [F, "int64"])
    rejects(Graph("g", b.inputs, b.nodes, []), "op select_sort", "k 6 of 5")


def test_names_are_unique_constants_included():
    b = B()
    x = b.input((3,))
    c1, c2 = b.const(np.ones(3, np.float32), "c"), b.const(np.zeros(3, np.float32), "c")
    c2.name = c1.name
    y = ew(b, fn("add", X0, X1), [x, c1], (3,))
    z = ew(b, fn("add", X0, X1), [y, c2], (3,))
    rejects(Graph("g", b.inputs, b.nodes, [z]), f"two different values are named '{c1.name}'")


# ---------------------------------------------------------------- a planned graph

def _planned() -> tuple[Graph, object]:
    b = B()
    v = b.input((8, 64))
    for _ in range(4):
        v = ew(b, fn("relu", X0), [v], (8, 64))
    return finish(b.graph(v))


def test_a_plan_with_overlapping_live_buffers_is_rejected():
    g, plan = _planned()
    verify(g, plan)
    n0, n1 = g.nodes[0].outputs[0], g.nodes[1].outputs[0]  # both live at node 1
    bad = dataclasses.replace(plan, buffers={**plan.buffers, n1.name: dataclasses.replace(
        plan.buffers[n1.name], offset=plan.buffers[n0.name].offset)})
    rejects(g, "plan:", f"%{n1.name}", f"%{n0.name}", "are live together and overlap", plan=bad)


def test_a_plan_must_give_every_value_storage_and_every_output_its_buffer():
    g, plan = _planned()
    n2 = g.nodes[2].outputs[0]
    buffers = dict(plan.buffers)
    del buffers[n2.name]
    rejects(g, f"plan: %{n2.name} (ew) has no buffer", plan=dataclasses.replace(plan, buffers=buffers))
    b = B()
    x = b.input((3,))
    y = ew(b, fn("neg", X0), [x], (3,))
    g = b.graph(x, y)  # an input returned as an output: needs materialize_outputs before planning
    rejects(g, "plan: graph output 0", "is not written into output buffer 0", plan=plan_memory(g))
    g, plan = finish(g)
    verify(g, plan)


def test_a_pass_that_breaks_the_ir_is_an_internal_error_naming_it():
    b = B()
    x = b.input((1, 16, 16, 16))
    g = b.graph(b.op("conv2d", [x, b.weight(16, 16, 3, 3)], conv_attrs(), (1, 16, 16, 16)))

    def bad_pass(g: Graph) -> Graph:
        g.nodes[0].attrs["algo"] = "smallp"
        g.nodes[0].attrs["groups"] = 2
        return g

    with pytest.raises(RuntimeError, match="invalid after pass 'bad_pass'.*smallp on a grouped conv"):
        run_pass("bad_pass", bad_pass, g)
    g.nodes[0].attrs.update(groups=1, algo="smallp")

    def repack(g: Graph) -> Graph:
        prepack(g)
        g.nodes[0].attrs["algo"] = "winograd"  # the weight stays laid out for smallp
        return g

    with pytest.raises(RuntimeError, match="invalid after pass 'repack'.*packed weight"):
        run_pass("repack", repack, g)
