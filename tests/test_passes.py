"""Pass tests: the optimized graph has the expected shape and the reference interpreter
(eval_graph) still reproduces PyTorch eager."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn as nn

from pt2c.compiler import to_graph
from pt2c.ops import eval_graph, verify
from pt2c.passes.memory import plan_memory


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
    g, _ = to_graph(torch.export.export(m, (x,)), name="blk")
    assert _ops(g) == ["conv2d"]
    conv = g.nodes[0]
    assert conv.attrs["has_bias"] and conv.attrs["has_residual"] and conv.attrs["act"] == "relu"
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
    g, _ = to_graph(torch.export.export(m, (x,)), name="lin")
    assert "ew" not in _ops(g), _ops(g)
    mm = next(n for n in g.nodes if n.op == "matmul")
    assert mm.attrs["has_residual"] and mm.attrs["act"] == "gelu"
    (got,) = eval_graph(g, [x.numpy()])
    np.testing.assert_allclose(got, m(x).detach().numpy(), atol=1e-5)


def test_elementwise_chain_with_permute_is_one_loop():
    x, y = torch.randn(3, 5), torch.randn(5, 3)
    g, _ = to_graph(torch.export.export(EwChain(), (x, y)), name="ew")
    assert _ops(g) == ["ew"]
    assert g.nodes[0].attrs.get("views"), "the permute should be read in place, not copied"
    (got,) = eval_graph(g, [x.numpy(), y.numpy()])
    np.testing.assert_allclose(got, EwChain()(x, y).numpy(), atol=1e-6)


def test_unoptimized_graph_matches_too():
    torch.manual_seed(0)
    m = ConvBlock().eval()
    x = torch.randn(1, 4, 6, 6)
    g, _ = to_graph(torch.export.export(m, (x,)), name="blk", opt_level=0)
    verify(g)
    assert "channel_affine" in _ops(g)
    (got,) = eval_graph(g, [x.numpy()])
    np.testing.assert_allclose(got, m(x).detach().numpy(), atol=1e-5)


def test_memory_plan_reuses_buffers_and_reports_lower_bound():
    m = nn.Sequential(*[nn.Linear(64, 64) for _ in range(6)]).eval()
    x = torch.randn(8, 64)
    g, _ = to_graph(torch.export.export(m, (x,)), name="seq")
    plan = plan_memory(g)
    # six 2 KiB intermediates, at most two alive at once (the last writes the output buffer)
    assert plan.lower_bound == 2 * 8 * 64 * 4
    assert plan.arena_bytes == plan.lower_bound
    arena = {s.offset for s in plan.storage.values() if s.kind == "arena"}
    assert len(arena) == 2
