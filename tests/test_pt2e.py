"""PT2E-quantized programs (torchao's prepare_pt2e / convert_pt2e; issue #31): the quantize / dequantize ops
around each quantized op run as elementwise code, the float ops in between in float32, as eager runs the same
converted graph.

Tolerances, against eager on the same program: the MLP exactly (bit for bit); the CNN within 1e-6 of the
output's scale (a convolution's float32 sums in another order may move a value across a quantization step's
rounding boundary: one LSB of that activation, which the float layers after it shrink).
"""

from __future__ import annotations

import warnings

import pytest
import torch

import pt2c
from pt2c import zoo
from pt2c.errors import UnsupportedError
from pt2c.runtime.verify import verify

pt2e = pytest.importorskip("torchao.quantization.pt2e.quantize_pt2e")
CFLAGS = "-O1 -std=c99"


class _CNN(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 16, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(16)
        self.conv2 = torch.nn.Conv2d(16, 16, 3, stride=2, padding=1, groups=4)
        self.fc = torch.nn.Linear(16 * 8 * 8, 10)

    def forward(self, x):
        y = torch.relu(self.bn(self.conv(x)))
        y = torch.nn.functional.max_pool2d(torch.relu(self.conv2(y)), 1)
        return self.fc(y.flatten(1))


def _quantized(model: torch.nn.Module, xs: tuple, scheme: str, dynamic: bool = False):
    from torchao.quantization.pt2e.quantizer.arm_inductor_quantizer import (
        ArmInductorQuantizer, get_default_arm_inductor_quantization_config)
    from torchao.quantization.pt2e.quantizer.x86_inductor_quantizer import (
        X86InductorQuantizer, get_default_x86_inductor_quantization_config)

    if scheme == "x86":  # uint8 activations (asymmetric), int8 weights per channel
        q = X86InductorQuantizer().set_global(get_default_x86_inductor_quantization_config(is_dynamic=dynamic))
    else:  # int8 activations (symmetric), int8 weights per channel
        q = ArmInductorQuantizer().set_global(get_default_arm_inductor_quantization_config(is_dynamic=dynamic))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = pt2e.prepare_pt2e(torch.export.export(model.eval(), xs).module(), q)
        m(*xs)  # calibration
        return torch.export.export(pt2e.convert_pt2e(m), xs)


@pytest.mark.parametrize("scheme", ["x86"])  # (the Arm quantizer: test_pt2e_cnn)
def test_pt2e_mlp_exact(tmp_path, scheme):
    m, xs = zoo.mlp("tiny")
    ep = _quantized(m, xs, scheme)
    ops = {str(n.target) for n in ep.graph.nodes}
    assert "quantized_decomposed.quantize_per_tensor.default" in ops
    report = verify(ep, tmp_path / "out", target="x86_64-v3", tol=0.0, cflags=CFLAGS)
    assert report.passed, report.outputs
    if scheme == "x86":  # the file route: the loader defines quantized_decomposed::* before reading the program
        torch.export.save(ep, tmp_path / "q.pt2")
        assert verify(tmp_path / "q.pt2", target="x86_64-v3", tol=0.0, cflags=CFLAGS).passed


@pytest.mark.parametrize("scheme", ["x86", "arm"])
def test_pt2e_cnn(tmp_path, scheme):
    torch.manual_seed(0)
    m = _CNN()
    with torch.no_grad():
        m.bn.running_mean.uniform_(-0.5, 0.5)
        m.bn.running_var.uniform_(0.5, 2.0)
    xs = (torch.randn(2, 3, 16, 16),)
    ep = _quantized(m, xs, scheme)
    report = verify(ep, tmp_path / "out", target="x86_64-v3", tol=1e-6, cflags=CFLAGS)
    assert report.passed, report.outputs
    # the quantization is really there: the float32 model differs by far more than the tolerance
    with torch.no_grad():
        err = (m(*xs) - ep.module()(*xs)).abs().max().item()
    assert err > 100 * 1e-6 * max(1.0, report.outputs[0].ref_scale)


def test_pt2e_dynamic_quantization_is_a_clear_error(tmp_path):
    m, xs = zoo.mlp("tiny")
    ep = _quantized(m, xs, "x86", dynamic=True)
    with pytest.raises(UnsupportedError, match="quantization scheme pt2c does not implement yet") as e:
        pt2c.compile(ep, tmp_path / "out", target="x86_64-v3")
    assert "choose_qparams" in str(e.value) and "is_dynamic=False" in str(e.value)


class _PerChannel(torch.nn.Module):
    """quantize / dequantize of an activation per channel (axis 1) and per tensor, as the ops define them."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("scales", torch.tensor([0.02, 0.05, 0.1, 0.013]))
        self.register_buffer("zps", torch.tensor([0, 3, -7, 1]))

    def forward(self, x):
        qd = torch.ops.quantized_decomposed
        q = qd.quantize_per_channel(x, self.scales, self.zps, 1, -128, 127, torch.int8)
        y = qd.dequantize_per_channel(q, self.scales, self.zps, 1, -128, 127, torch.int8)
        q2 = qd.quantize_per_tensor(x * 3, 0.037, 128, 0, 255, torch.uint8)
        return y, q, qd.dequantize_per_tensor(q2, 0.037, 128, 0, 255, torch.uint8)


def test_quantize_dequantize_ops_exact(tmp_path):
    """Both ops, per channel and per tensor, int8 and uint8, on run-time values (clamped at both ends, ties of
    the rounding included): bit for bit with eager, the integer outputs too."""
    x = torch.randn(3, 4, 5, 6) * 4
    x[0, 0, 0, :4] = torch.tensor([0.01, 0.03, -0.01, -0.03])  # exact ties of scale 0.02 at zero point 0
    report = verify(torch.export.export(_PerChannel(), (x,)), tmp_path / "out", target="x86_64-v3", tol=0.0,
                    cflags=CFLAGS)
    assert report.passed, report.outputs
    assert [o.dtype for o in report.outputs] == ["float32", "int8", "float32"]
