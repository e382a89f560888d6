"""A small library of custom ops (torch.library.custom_op), the PyTorch side of examples/custom_ops.

Each op has a Python implementation (what eager PyTorch runs, and the reference `pt2c verify` checks the C
kernels in kernels/ against) and a fake implementation (sizes only, for torch.export).

    mylib::scaled_gelu(x, scale)   elementwise, a float argument
    mylib::rms_norm(x, weight, eps) a fused RMS norm over the last dim (used inside a transformers model)
    mylib::median_rows(x)          the lower median of each row: the kernel sorts a copy of the row in scratch
    mylib::minmax(x)               two results: each row's minimum and maximum
"""

from __future__ import annotations

import torch
from torch import Tensor


@torch.library.custom_op("mylib::scaled_gelu", mutates_args=())
def scaled_gelu(x: Tensor, scale: float) -> Tensor:
    return torch.nn.functional.gelu(x) * scale


@scaled_gelu.register_fake
def _(x: Tensor, scale: float) -> Tensor:
    return torch.empty_like(x)


@torch.library.custom_op("mylib::rms_norm", mutates_args=())
def rms_norm(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    x32 = x.float()
    return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps) * weight).to(x.dtype)


@rms_norm.register_fake
def _(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    return torch.empty_like(x)


@torch.library.custom_op("mylib::median_rows", mutates_args=())
def median_rows(x: Tensor) -> Tensor:
    return x.median(dim=-1).values


@median_rows.register_fake
def _(x: Tensor) -> Tensor:
    return x.new_empty(x.shape[:-1])


@torch.library.custom_op("mylib::minmax", mutates_args=())
def minmax(x: Tensor) -> tuple[Tensor, Tensor]:
    return x.amin(-1), x.amax(-1)


@minmax.register_fake
def _(x: Tensor) -> tuple[Tensor, Tensor]:
    return x.new_empty(x.shape[:-1]), x.new_empty(x.shape[:-1])


class RMSNorm(torch.nn.Module):
    """A drop-in for a transformers model's RMSNorm (weight + variance_epsilon) that calls mylib::rms_norm."""

    def __init__(self, norm: torch.nn.Module):
        super().__init__()
        self.weight = norm.weight
        self.eps = float(getattr(norm, "variance_epsilon", getattr(norm, "eps", 1e-6)))

    def forward(self, x: Tensor) -> Tensor:
        return torch.ops.mylib.rms_norm(x, self.weight, self.eps)


def use_fused_rms_norm(model: torch.nn.Module) -> int:
    """Replace every *RMSNorm module of a transformers model by RMSNorm above; returns how many."""
    names = [n for n, m in model.named_modules() if type(m).__name__.endswith("RMSNorm")]
    for name in names:
        parent, _, attr = name.rpartition(".")
        owner = model.get_submodule(parent) if parent else model
        setattr(owner, attr, RMSNorm(getattr(owner, attr)))
    return len(names)
