"""Folding, end to end through the built C library against eager.

Weights computed from parameters in forward() are folded at compile time whatever their size, so the
convs and linears that read them keep their pre-packed fast paths (no weights packed at every run, no weight
GEMM); results made by repeating values (expand) or without tensor inputs stay run-time ops above 1 MiB.
Zero pads before convs (TF "same" padding, asymmetric at stride 2) become the convs' padding."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

import pt2c
from conftest import TARGET, assert_outputs_close, build_and_run


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
    assert counts["conv2d"] == 2, counts
    assert "pt2c_conv2d_rt(" not in (tmp_path / "d" / "model.c").read_text()
    # the run-time matmuls: the LoRA linear and x @ proj only (neither B @ A nor a weight sum at run time)
    assert counts["matmul"] == 2, counts
    # the expand of a parameter row to 2 MB is not folded into the blob
    assert art.manifest["weights"]["bytes"] < 12 * 2**20, art.manifest["weights"]
    pt2c.build(tmp_path / "d", cflags="-O2 -std=c99 -Wall -Wextra -Werror -pedantic", openmp=False)
    outs = pt2c.load(tmp_path / "d").run([x.numpy()])
    with torch.no_grad():
        refs = [r.numpy() for r in model(x)]
    assert_outputs_close([np.asarray(o) for o in outs], refs, "parameter-derived weights")


class _TfSame(torch.nn.Module):
    """TF "same" padding written out before each conv, as transformers' MobileNetV2 (tf_padding=True) does:
    symmetric at stride 1, (0, 1) at stride 2 on even sizes, (1, 2) for a 5x5 at stride 2; every conv path:
    im2col (with its padded copy), Winograd, few pixels, depthwise strips and bands, the fused 1x1 +
    depthwise pair, and a conv with run-time weights."""

    def __init__(self):
        super().__init__()
        nn = torch.nn
        self.stem = nn.Conv2d(3, 16, 3, stride=2)
        self.expand = nn.Conv2d(16, 96, 1)
        self.dw = nn.Conv2d(96, 96, 3, stride=2, groups=96)
        self.dw1 = nn.Conv2d(96, 96, 3, groups=96)
        self.c5 = nn.Conv2d(96, 32, 5, stride=2)
        self.c3 = nn.Conv2d(32, 32, 3)
        self.tail = nn.Conv2d(32, 24, 3, stride=2)

    def forward(self, x, w):
        def same(t, k, s):
            n = t.shape[-1]
            total = max(k - s, 0) if n % s == 0 else max(k - n % s, 0)
            return F.pad(t, (total // 2, total - total // 2, total // 2, total - total // 2))

        y = F.relu6(self.stem(same(x, 3, 2)))                       # 224 -> 112: (0, 1)
        y = F.relu6(self.dw(same(F.relu6(self.expand(y)), 3, 2)))  # 1x1 + depthwise stride 2: (0, 1)
        y = F.relu6(self.dw1(same(y, 3, 1)))                        # depthwise stride 1: (1, 1)
        y = F.relu(self.c5(same(y, 5, 2)))                          # 5x5 stride 2: (1, 2)
        y = F.relu(self.c3(same(y, 3, 1))) + y                      # Winograd-sized 3x3: (1, 1)
        y = self.tail(same(y, 3, 2))                                # 28 -> 14: (0, 1)
        return y, F.conv2d(same(y, 3, 2), w, stride=2)              # run-time weights: packed at run time


def test_tf_same_pads_fold_and_match_eager(tmp_path):
    torch.manual_seed(0)
    model = _TfSame().eval()
    x, w = torch.randn(1, 3, 224, 224), torch.randn(8, 24, 3, 3) * 0.1
    ep = torch.export.export(model, (x, w), strict=False)
    art = pt2c.compile(ep, tmp_path / "tf", target=TARGET)
    counts = art.manifest["op_counts"]
    assert "pad" not in counts and counts.get("conv2d_pw_dw") == 1, counts
    assert (tmp_path / "tf" / "model.c").read_text().count("pt2c_conv2d_rt(") == 1
    outs = build_and_run(tmp_path / "tf", [x.numpy(), w.numpy()])
    with torch.no_grad():
        refs = [r.numpy() for r in model(x, w)]
    assert_outputs_close(outs, refs, "TF same padding folded into the convs")


class _Shared(torch.nn.Module):
    """ALBERT's pattern: one layer's weights run several times, and an output projection tied to the
    embedding (read transposed)."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(500, 256)
        self.layer = torch.nn.Linear(256, 256)

    def forward(self, ids):
        h = self.emb(ids)
        for _ in range(6):
            h = torch.tanh(self.layer(h)) + h
        return h @ self.emb.weight.t()


def test_shared_weights_are_stored_once(tmp_path):
    torch.manual_seed(0)
    model, ids = _Shared().eval(), torch.randint(0, 500, (1, 16))
    art = pt2c.compile(torch.export.export(model, (ids,), strict=False), tmp_path / "s", target=TARGET)
    params = sum(p.numel() * 4 for p in model.parameters())  # 0.77 MB: embedding, its packed transpose, layer
    assert art.manifest["weights"]["bytes"] < 2.2 * params, (art.manifest["weights"]["bytes"], params)
    outs = build_and_run(tmp_path / "s", [ids.numpy()])
    with torch.no_grad():
        ref = model(ids).numpy()
    assert_outputs_close(outs, [ref], "shared weights")
