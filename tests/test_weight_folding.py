"""Weights computed from parameters in forward() are folded at compile time whatever their size, so the
convs and linears that read them keep their pre-packed fast paths (no run-time conv_direct loop or weight
GEMM); results made by repeating values (expand) or without tensor inputs stay run-time ops above 1 MiB."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

import pt2c
from conftest import assert_outputs_close


class _StdConv(torch.nn.Conv2d):
    """timm's StdConv2d: the weight standardised per output channel by a training-mode batch_norm."""

    def forward(self, x):
        w = F.batch_norm(self.weight.reshape(1, self.out_channels, -1), None, None, training=True, momentum=0.0,
                         eps=1e-6).reshape_as(self.weight)
        return F.conv2d(x, w, self.bias, self.stride, self.padding, self.dilation, self.groups)


class _Derived(torch.nn.Module):
    def __init__(self):
        super().__init__()
        nn = torch.nn
        self.std = _StdConv(64, 512, 3, padding=1)                                          # 1.2 MB weight
        self.wn = nn.utils.parametrizations.weight_norm(nn.Conv2d(512, 128, 3, padding=1))  # 2.4 MB
        self.lin = nn.Linear(1024, 1024)
        self.lora_a = nn.Parameter(torch.randn(8, 1024) * 0.05)
        self.lora_b = nn.Parameter(torch.randn(1024, 8) * 0.05)
        self.proj = nn.Parameter(torch.randn(1024, 512) * 0.03)                             # used transposed
        self.bias_row = nn.Parameter(torch.randn(1, 512))

    def forward(self, x):
        y = F.relu(self.wn(F.relu(self.std(x))))                                  # [1, 128, 8, 8]
        t = y.reshape(1, 8, 1024)
        t = F.linear(t, self.lin.weight + 0.5 * (self.lora_b @ self.lora_a), self.lin.bias)  # merged LoRA, 4 MB
        t = t @ self.proj                                                          # [1, 8, 512]: proj^T as weight
        big = self.bias_row.expand(1024, 512)                                      # 2 MB of one repeated row
        return t, (big * t.mean()).amax(0)


def test_parameter_derived_weights_fold_and_match_eager(tmp_path):
    torch.manual_seed(0)
    model = _Derived().eval()
    x = torch.randn(1, 64, 8, 8)
    ep = torch.export.export(model, (x,), strict=False)
    art = pt2c.compile(ep, tmp_path / "d", target="generic")
    counts = art.manifest["op_counts"]
    assert "conv_direct" not in counts and counts["conv2d"] == 2, counts
    # the run-time matmuls: the LoRA linear and x @ proj only (neither B @ A nor a weight sum at run time)
    assert counts["matmul"] == 2, counts
    # the expand of a parameter row to 2 MB is not folded into the blob
    assert art.manifest["weights"]["bytes"] < 12 * 2**20, art.manifest["weights"]
    pt2c.build(tmp_path / "d", cflags="-O2 -std=c99 -Wall -Wextra -Werror -pedantic", openmp=False)
    outs = pt2c.load(tmp_path / "d").run([x.numpy()])
    with torch.no_grad():
        refs = [r.numpy() for r in model(x)]
    assert_outputs_close([np.asarray(o) for o in outs], refs, "parameter-derived weights")
