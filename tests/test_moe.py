"""Mixture-of-experts layers (passes/gathered.py, kernels/gathered_gemm.c): a batched matmul whose weights
are gathered from constants by a run-time index becomes one gathered_matmul that groups the rows by
weight.  Both operand orders, negative and repeated indices and experts no row chose, compared with eager
(tolerance: conftest's rule); an index out of range is an error status, as eager raises."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

import pt2c
from pt2c.compiler import to_graph
from pt2c.runtime.runner import RunError

from conftest import assert_outputs_close, build_and_run


class Experts(torch.nn.Module):
    """transformers' batched experts in both layouts: W [E, N, K] applied as W x, and V [E, K, N] as x V."""

    def __init__(self, E: int = 6, K: int = 24, N: int = 40) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(E, N, K) * 0.2)
        self.v = torch.nn.Parameter(torch.randn(E, N, K) * 0.2)

    def forward(self, x: torch.Tensor, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = torch.bmm(self.w[ids], x.unsqueeze(-1)).squeeze(-1).relu()  # [S, N]
        y = torch.bmm(h.unsqueeze(1), self.v[ids]).squeeze(1)  # [S, K]
        return h, y * 2.0


def test_gathered_matmul_matches_eager(tmp_path: Path) -> None:
    torch.manual_seed(0)
    m = Experts().eval()
    x = torch.randn(10, 24)
    ids = torch.tensor([0, 3, -1, 3, 3, 1, -6, 2, 0, 3])  # negative, repeated; expert 4 unused
    ep = torch.export.export(m, (x, ids))
    g, _ = to_graph(ep)
    assert [n.op for n in g.nodes].count("gathered_matmul") == 2 and not any(n.op == "gather" for n in g.nodes)
    pt2c.compile(ep, tmp_path / "out", target="x86_64-v3")
    with torch.no_grad():
        refs = [t.numpy() for t in m(x, ids)]
    assert_outputs_close(build_and_run(tmp_path / "out", [x.numpy(), ids.numpy()]), refs, "gathered matmul")
    with pytest.raises(RunError, match="index"):
        build_and_run(tmp_path / "out", [x.numpy(), np.array([0, 1, 2, 6, 0, 0, 0, 0, 0, 0])])
