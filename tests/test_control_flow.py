"""torch.cond as if / else and while_loop as a C loop (ops/control.py): compiled, built with the strict
warning flags and compared with eager on inputs that take each branch and different trip counts
(tolerance: conftest's rule, 1e-4 * max(1, max|ref|); integer outputs exact); the reference interpreter
and the memory plan (verified with the graph) cover every block."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from torch._higher_order_ops.while_loop import while_loop

import pt2c
from pt2c.compiler import to_graph
from pt2c.ir import walk
from pt2c.ops import eval_graph
from pt2c.options import CompileOptions
from pt2c.passes import finish
from pt2c.runtime.verify import verify

from conftest import assert_outputs_close, build_and_run, private_lib_copy


class Branchy(torch.nn.Module):
    """A data-dependent cond whose branches hold a conv (prepacked, algorithm chosen inside the block), a
    linear with a fused epilogue, and reads of an outer value computed before the cond."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.fc_a = torch.nn.Linear(8, 5)
        self.fc_b = torch.nn.Linear(8, 5)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.conv(x).relu().mean(dim=(2, 3))  # [N, 8]
        g = h * 2.0

        def big(h: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
            return torch.sigmoid(self.fc_a(h)) + g[:, :5]

        def small(h: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
            return self.fc_b(h - g).tanh() * 3.0

        y = torch.cond(x.mean() > 0, big, small, (h, g))
        return y, g + 1.0


class Loop(torch.nn.Module):
    """A while_loop whose trip count is an input, with a nested cond in the body and an outer value read in
    every step; returns the state and a value computed after the loop."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(6, 6)

    def forward(self, x: torch.Tensor, n: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        bias = x.mean(dim=0, keepdim=True)

        def cond_fn(i: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
            return i < n.squeeze()

        def body_fn(i: torch.Tensor, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            h2 = torch.tanh(self.fc(h)) + bias
            h3 = torch.cond(i % 2 == 0, lambda t: t * 0.5, lambda t: t - 0.25, (h2,))
            return i + 1, h3

        i, h = while_loop(cond_fn, body_fn, (torch.zeros((), dtype=torch.int64), x))
        return h, i, h.sum(dim=1)


def _compile_build(tmp_path: Path, model: torch.nn.Module, example: tuple) -> pt2c.runtime.runner.Model:
    ep = torch.export.export(model.eval(), example)
    pt2c.compile(ep, tmp_path / "out", target="x86_64-v3")
    from conftest import GCC_CFLAGS

    lib = pt2c.build(tmp_path / "out", cc="gcc", cflags=GCC_CFLAGS)
    return pt2c.load(tmp_path / "out", lib=private_lib_copy(Path(lib)))


def _eager(model: torch.nn.Module, *args: torch.Tensor) -> list[np.ndarray]:
    with torch.no_grad():
        out = model(*args)
    return [t.numpy() for t in (out if isinstance(out, tuple) else (out,))]


def test_cond_takes_each_branch(tmp_path: Path) -> None:
    torch.manual_seed(0)
    m = Branchy().eval()
    lib = _compile_build(tmp_path, m, (torch.randn(2, 3, 6, 6),))
    taken = set()
    for shift in (-2.0, 3.0, 0.5):
        x = torch.randn(2, 3, 6, 6) + shift
        with torch.no_grad():
            taken.add(bool(x.mean() > 0))
        assert_outputs_close(lib.run([x.numpy()]), _eager(m, x), f"cond, shift {shift}")
    assert taken == {True, False}
    src = next(p for p in (tmp_path / "out").glob("*.c") if "driver" not in p.name).read_text()
    assert "if (gt[0]) {" in src and "} else {" in src


def test_while_loop_trip_counts_and_nested_cond(tmp_path: Path) -> None:
    torch.manual_seed(0)
    m = Loop().eval()
    lib = _compile_build(tmp_path, m, (torch.randn(3, 6), torch.tensor([2])))
    for n in (0, 1, 4, 9):
        x = torch.randn(3, 6)
        nn = torch.tensor([n])
        outs = lib.run([x.numpy(), nn.numpy()])
        refs = _eager(m, x, nn)
        assert int(outs[1]) == n == int(refs[1])
        assert_outputs_close(outs, refs, f"while_loop, {n} steps")


def test_reference_interpreter_and_plan_cover_the_blocks() -> None:
    torch.manual_seed(0)
    m = Loop().eval()
    ep = torch.export.export(m, (torch.randn(3, 6), torch.tensor([2])))
    g, _ = to_graph(ep, options=CompileOptions(name="loop"))
    g, plan = finish(g)  # the plan is verified with the graph (ops.verify_plan over ir.schedule)
    ops = [n.op for n in walk(g)]
    assert ops.count("while_loop") == 1 and ops.count("cond") == 1
    loop = next(n for n in g.nodes if n.op == "while_loop")
    # every value a block computes has a buffer that no value live across the loop shares
    outer_live = {plan.root(v).name for v in loop.inputs + loop.outputs if not v.is_const}
    inner = {v.name for b in loop.blocks for n in walk(b) for v in n.outputs}
    for a in outer_live:
        ba = plan.buffers.get(a)
        for k in inner:
            bk = plan.buffers.get(k)
            if ba is not None and bk is not None and ba.kind == bk.kind == "arena":
                assert ba.offset + ba.nbytes <= bk.offset or bk.offset + bk.nbytes <= ba.offset, (a, k)
    x, n = torch.randn(3, 6), torch.tensor([5])
    assert_outputs_close(eval_graph(g, [x.numpy(), n.numpy()]), _eager(m, x, n), "reference interpreter")


def test_constant_predicate_compiles_only_the_taken_branch(tmp_path: Path) -> None:
    class Const(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("flag", torch.tensor(True))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.cond(self.flag, lambda t: t + 1.0, lambda t: t.exp(), (x,))

    ep = torch.export.export(Const(), (torch.randn(4),))
    g, _ = to_graph(ep)
    assert not any(n.blocks for n in g.nodes)
    x = torch.randn(4)
    art = pt2c.compile(ep, tmp_path / "out")
    np.testing.assert_allclose(build_and_run(art.out_dir, [x.numpy()])[0], (x + 1.0).numpy(), rtol=0, atol=0)


@pytest.mark.parametrize("shift", [-3.0, 3.0])
def test_verify_cond_model(shift: float) -> None:
    torch.manual_seed(1)
    x = torch.randn(1, 3, 5, 5) + shift
    assert verify(Branchy().eval(), example_inputs=(x,)).passed


class MapScan(torch.nn.Module):
    """map over the rows of a batch (a linear + an outer value per row) feeding a scan whose carry is a
    recurrent state (a tanh RNN cell) and whose per-step outputs are stacked."""

    def __init__(self) -> None:
        super().__init__()
        self.inp = torch.nn.Linear(4, 6)
        self.rec = torch.nn.Linear(6, 6)

    def forward(self, xs: torch.Tensor, h0: torch.Tensor, shift: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        from torch._higher_order_ops.map import map as hmap
        from torch._higher_order_ops.scan import scan

        u = hmap(lambda x, s: self.inp(x).relu() + s, xs, shift)  # [T, B, 6]

        def cell(h: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            n = torch.tanh(self.rec(h) + x)
            return n, n * 2.0

        h, ys = scan(cell, h0, u)
        return h, ys


def test_map_and_scan(tmp_path: Path) -> None:
    torch.manual_seed(0)
    m = MapScan().eval()
    example = (torch.randn(7, 3, 4), torch.randn(3, 6), torch.randn(6))
    lib = _compile_build(tmp_path, m, example)
    for seed in (1, 2):
        g = torch.Generator().manual_seed(seed)
        args = (torch.randn(7, 3, 4, generator=g), torch.randn(3, 6, generator=g), torch.randn(6, generator=g))
        assert_outputs_close(lib.run([a.numpy() for a in args]), _eager(m, *args), f"map + scan, seed {seed}")
    ep = torch.export.export(m, example)
    g, _ = to_graph(ep)
    assert [n.op for n in g.nodes if n.blocks] == ["scan", "scan"]  # map is a scan without a carry
    assert_outputs_close(eval_graph(g, [a.numpy() for a in example]), _eager(m, *example), "reference")
