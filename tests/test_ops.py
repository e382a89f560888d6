"""Op table tests in the style of tinygrad's ``helper_test_op``.

Each row is a small torch function plus input specs.  The session fixture exports every
row (``torch.export.export(Mod(fn), inputs, strict=False)``), compiles it with pt2c into its
own folder under a unique model name (``op_017``), and builds all the generated ``.c`` files
into a few shared libraries (one gcc call per batch, batches in parallel; the kernels are
static so many models link into one ``.so``).  Each row is then its own pytest item: load
the model from the shared library, run it, compare with eager PyTorch.

Tolerances (float): max abs err <= tol * max(1, max|ref|), tol = 1e-5 for elementwise and
shape ops, 1e-4 for matmul / conv / norms / softmax / attention.  Ints and bools: exact.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest
import torch
import torch.nn.functional as F

try:
    import pt2c
except ImportError:  # running from a checkout without installing the package
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))
    import pt2c

from pt2c.errors import UnsupportedDtypeError, UnsupportedError

EW, MM = 1e-5, 1e-4  # tolerance classes
X86 = platform.machine().lower() in ("x86_64", "amd64")
TARGET = "x86_64-v3" if X86 else "generic"
CFLAGS = ["-O1", "-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic"] + (["-march=x86-64-v3"] if X86 else [])
BATCH = 12  # .c files per gcc invocation


# ---------------------------------------------------------------------------- input specs

def Fl(*shape: int, lo: float = -2.0, hi: float = 2.0, dtype: torch.dtype = torch.float32) -> tuple:
    return ("float", shape, lo, hi, dtype)


def In(*shape: int, lo: int = -5, hi: int = 5, dtype: torch.dtype = torch.int64) -> tuple:
    return ("int", shape, lo, hi, dtype)


def Bo(*shape: int) -> tuple:
    return ("bool", shape)


def T(data: Any, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """A literal input tensor."""
    return torch.tensor(data, dtype=dtype)


def make_input(spec: Any, g: torch.Generator) -> torch.Tensor:
    if isinstance(spec, torch.Tensor):
        return spec.clone()
    kind, shape = spec[0], spec[1]
    if kind == "float":
        lo, hi, dt = spec[2], spec[3], spec[4]
        return (torch.rand(shape, generator=g, dtype=torch.float64) * (hi - lo) + lo).to(dt)
    if kind == "int":
        lo, hi, dt = spec[2], spec[3], spec[4]
        return torch.randint(lo, hi + 1, shape, generator=g, dtype=torch.int64).to(dt)
    return torch.rand(shape, generator=g) < 0.5


# ---------------------------------------------------------------------------- the table

@dataclass
class Case:
    id: str
    fn: Callable[..., Any]
    specs: tuple
    tol: float = EW
    xfail: str | None = None  # reason; strict xfail
    raises: type | None = None  # expected exception type for the xfail (None: any)


class Mod(torch.nn.Module):
    def __init__(self, fn: Callable[..., Any]):
        super().__init__()
        self.fn = fn

    def forward(self, *xs: torch.Tensor) -> Any:
        return self.fn(*xs)


CASES: list[Case] = []


def case(id: str, fn: Callable[..., Any], *specs: Any, tol: float = EW, xfail: str | None = None,
         raises: type | None = None) -> None:
    CASES.append(Case(id, fn, specs, tol, xfail, raises))


def unsupported(id: str, fn: Callable[..., Any], *specs: Any, why: str) -> None:
    case(id, fn, *specs, xfail=f"unsupported: {why}", raises=UnsupportedError)


torch.manual_seed(0)

# ---- unary float ops (every unary entry of FUNCS)
for _name, _fn, _spec in [
    ("neg", torch.neg, Fl(3, 5)),
    ("abs", torch.abs, Fl(3, 5)),
    ("exp", torch.exp, Fl(3, 5)),
    ("exp2", torch.exp2, Fl(3, 5)),
    ("expm1", torch.expm1, Fl(3, 5)),
    ("log", torch.log, Fl(3, 5, lo=0.05, hi=4)),
    ("log2", torch.log2, Fl(3, 5, lo=0.05, hi=4)),
    ("log10", torch.log10, Fl(3, 5, lo=0.05, hi=4)),
    ("log1p", torch.log1p, Fl(3, 5, lo=-0.9, hi=4)),
    ("sqrt", torch.sqrt, Fl(3, 5, lo=0, hi=4)),
    ("rsqrt", torch.rsqrt, Fl(3, 5, lo=0.1, hi=4)),
    ("reciprocal", torch.reciprocal, T([[0.25, -0.5, 1.0, -3.0, 7.5], [2.0, -0.3, 0.7, 11.0, -1.25]])),
    ("sin", torch.sin, Fl(3, 5, lo=-4, hi=4)),
    ("cos", torch.cos, Fl(3, 5, lo=-4, hi=4)),
    ("tan", torch.tan, Fl(3, 5, lo=-1.2, hi=1.2)),
    ("asin", torch.asin, Fl(3, 5, lo=-0.99, hi=0.99)),
    ("acos", torch.acos, Fl(3, 5, lo=-0.99, hi=0.99)),
    ("atan", torch.atan, Fl(3, 5, lo=-5, hi=5)),
    ("sinh", torch.sinh, Fl(3, 5)),
    ("cosh", torch.cosh, Fl(3, 5)),
    ("tanh", torch.tanh, Fl(3, 5, lo=-4, hi=4)),
    ("asinh", torch.asinh, Fl(3, 5, lo=-4, hi=4)),
    ("acosh", torch.acosh, Fl(3, 5, lo=1, hi=5)),
    ("atanh", torch.atanh, Fl(3, 5, lo=-0.9, hi=0.9)),
    ("erf", torch.erf, Fl(3, 5)),
    ("floor", torch.floor, Fl(3, 5, lo=-5, hi=5)),
    ("ceil", torch.ceil, Fl(3, 5, lo=-5, hi=5)),
    ("trunc", torch.trunc, Fl(3, 5, lo=-5, hi=5)),
    ("round", torch.round, Fl(3, 5, lo=-5, hi=5)),
    ("round_half_even", torch.round, T([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.5, 0.49])),
    ("sign", torch.sign, T([-2.0, -0.0, 0.0, 1.5, 3.0, -7.0])),
    ("sigmoid", torch.sigmoid, Fl(3, 5, lo=-6, hi=6)),
    ("relu", torch.relu, Fl(3, 5)),
    ("silu", F.silu, Fl(3, 5, lo=-6, hi=6)),
    ("hardswish", F.hardswish, Fl(3, 5, lo=-5, hi=5)),
    ("hardsigmoid", F.hardsigmoid, Fl(3, 5, lo=-5, hi=5)),
    ("square", torch.square, Fl(3, 5)),
    ("pow2", lambda x: x ** 2, Fl(3, 5)),
    ("pow_half", lambda x: x ** 0.5, Fl(3, 5, lo=0, hi=4)),
    ("pow3_cube", lambda x: x ** 3, Fl(3, 5)),  # x * x * x ("cube"), no powf
    ("pow3_cube_double", lambda x: x ** 3, Fl(3, 5, dtype=torch.float64)),
    ("scalar_pow", lambda x: 2.0 ** x, Fl(3, 5)),
    ("gelu", F.gelu, Fl(3, 5, lo=-4, hi=4)),
    ("gelu_tanh", lambda x: F.gelu(x, approximate="tanh"), Fl(3, 5, lo=-4, hi=4)),
    ("isnan", torch.isnan, T([1.0, float("nan"), float("inf"), -float("inf"), 0.0])),
    ("isinf", torch.isinf, T([1.0, float("nan"), float("inf"), -float("inf"), 0.0])),
    ("logical_not_f", torch.logical_not, T([1.0, 0.0, -2.0, 0.0])),
    ("nan_to_num", torch.nan_to_num, T([1.0, float("nan"), float("inf"), -float("inf"), 0.0])),
]:
    case(f"unary_{_name}", _fn, _spec)

# ---- unary int / bool
case("int_neg", torch.neg, In(4, 5))
case("int_abs", torch.abs, In(4, 5))
case("int_sign", torch.sign, In(4, 5))
case("int_square", torch.square, In(4, 5))
case("int_bitwise_not", torch.bitwise_not, In(4, 5))
case("bool_bitwise_not", torch.bitwise_not, Bo(4, 5))
case("bool_logical_not", torch.logical_not, Bo(4, 5))
case("int_logical_not", torch.logical_not, In(4, 5, lo=-1, hi=1))
case("int_sqrt", torch.sqrt, In(4, 5, lo=0, hi=20))
case("int_exp", torch.exp, In(4, 5, lo=-3, hi=3))
case("int_sigmoid", torch.sigmoid, In(4, 5))
case("int_floor", torch.floor, In(4, 5))
case("int_isnan", torch.isnan, In(4, 5))

# ---- binary float ops
A, B = Fl(3, 4), Fl(3, 4)
POS = Fl(3, 4, lo=0.5, hi=3)
NZ = T([[1.5, -2.0, 0.75, -0.5], [3.0, -1.25, 2.5, -4.0], [0.3, 0.9, -0.6, 1.1]])
for _name, _fn, _specs in [
    ("add", torch.add, (A, B)),
    ("sub", torch.sub, (A, B)),
    ("mul", torch.mul, (A, B)),
    ("div", torch.div, (A, NZ)),
    ("add_alpha", lambda x, y: torch.add(x, y, alpha=2.5), (A, B)),
    ("sub_alpha", lambda x, y: torch.sub(x, y, alpha=0.5), (A, B)),
    ("rsub", lambda x: 1.0 - x, (A,)),
    ("rsub_alpha", lambda x, y: torch.rsub(x, y, alpha=3), (A, B)),
    ("floor_divide", torch.floor_divide, (Fl(3, 4, lo=-6, hi=6), NZ)),
    ("div_trunc", lambda x, y: torch.div(x, y, rounding_mode="trunc"), (Fl(3, 4, lo=-6, hi=6), NZ)),
    ("div_floor", lambda x, y: torch.div(x, y, rounding_mode="floor"), (Fl(3, 4, lo=-6, hi=6), NZ)),
    ("remainder", torch.remainder, (Fl(3, 4, lo=-6, hi=6), NZ)),
    ("remainder_scalar", lambda x: torch.remainder(x, 1.5), (Fl(3, 4, lo=-6, hi=6),)),
    ("fmod", torch.fmod, (Fl(3, 4, lo=-6, hi=6), NZ)),
    ("fmod_scalar", lambda x: torch.fmod(x, -1.5), (Fl(3, 4, lo=-6, hi=6),)),
    ("atan2", torch.atan2, (A, B)),
    ("pow", torch.pow, (POS, B)),
    ("maximum", torch.maximum, (A, B)),
    ("minimum", torch.minimum, (A, B)),
    ("max_binary", torch.max, (A, B)),
    ("eq", torch.eq, (T([1.0, 2.5, -0.0, 3.0, float("nan")]), T([1.0, 2.0, 0.0, -3.0, float("nan")]))),
    ("eq_round", lambda x, y: torch.round(x) == torch.round(y), (A, B)),
    ("ne", lambda x, y: torch.round(x) != torch.round(y), (A, B)),
    ("lt", torch.lt, (A, B)),
    ("le", torch.le, (A, B)),
    ("gt", torch.gt, (A, B)),
    ("ge", torch.ge, (A, B)),
    ("gt_scalar", lambda x: x > 0.25, (A,)),
    ("eq_scalar", lambda x: torch.round(x) == 1, (A,)),
    ("logical_and_f", torch.logical_and, (torch.tensor([0.0, 1.0, 2.0, 0.0]), torch.tensor([0.0, 0.0, -1.0, 3.0]))),
    ("logical_or_f", torch.logical_or, (torch.tensor([0.0, 1.0, 2.0, 0.0]), torch.tensor([0.0, 0.0, -1.0, 3.0]))),
    ("logical_xor_f", torch.logical_xor, (torch.tensor([0.0, 1.0, 2.0, 0.0]), torch.tensor([0.0, 0.0, -1.0, 3.0]))),
    ("where", lambda c, x, y: torch.where(c, x, y), (Bo(3, 4), A, B)),
    ("where_scalar", lambda x: torch.where(x > 0, x, 0.5), (A,)),
    ("where_scalar_self", lambda x: torch.where(x > 0, -1.0, x), (A,)),
    ("masked_fill", lambda x, m: x.masked_fill(m, -7.0), (A, Bo(3, 4))),
    ("masked_fill_inf", lambda x, m: x.masked_fill(m, float("-inf")), (A, Bo(3, 4))),
    ("fused_chain", lambda x, y: torch.tanh(x * y + 1.0) - torch.exp(-x.abs()) / (y * y + 1), (A, B)),
    ("float64_add", torch.add, (Fl(3, 4, dtype=torch.float64), Fl(3, 4, dtype=torch.float64))),
    ("float64_exp", torch.exp, (Fl(3, 4, dtype=torch.float64),)),
]:
    case(f"bin_{_name}", _fn, *_specs)

# ---- binary int / bool
IA, IB = In(3, 4, lo=-9, hi=9), In(3, 4, lo=-9, hi=9)
INZ = T([[1, -2, 3, -4], [5, -1, 2, 7], [-3, 4, -6, 1]], torch.int64)
for _name, _fn, _specs in [
    ("add", torch.add, (IA, IB)),
    ("sub", torch.sub, (IA, IB)),
    ("mul", torch.mul, (IA, IB)),
    ("add_alpha", lambda x, y: torch.add(x, y, alpha=3), (IA, IB)),
    ("floor_divide", torch.floor_divide, (IA, INZ)),
    ("div_floor", lambda x, y: torch.div(x, y, rounding_mode="floor"), (IA, INZ)),
    ("div_trunc", lambda x, y: torch.div(x, y, rounding_mode="trunc"), (IA, INZ)),
    ("remainder", torch.remainder, (IA, INZ)),
    ("remainder_scalar", lambda x: x % 4, (IA,)),
    ("remainder_neg_scalar", lambda x: x % -3, (IA,)),
    ("floordiv_scalar", lambda x: x // 4, (IA,)),
    ("fmod", torch.fmod, (IA, INZ)),
    ("pow", torch.pow, (In(3, 4, lo=-3, hi=3), In(3, 4, lo=0, hi=4))),
    ("pow_scalar", lambda x: x ** 3, (IA,)),
    ("maximum", torch.maximum, (IA, IB)),
    ("minimum", torch.minimum, (IA, IB)),
    ("eq", torch.eq, (In(3, 4, lo=0, hi=2), In(3, 4, lo=0, hi=2))),
    ("ne", torch.ne, (In(3, 4, lo=0, hi=2), In(3, 4, lo=0, hi=2))),
    ("lt", torch.lt, (IA, IB)),
    ("le", torch.le, (In(3, 4, lo=0, hi=2), In(3, 4, lo=0, hi=2))),
    ("gt", torch.gt, (IA, IB)),
    ("ge", torch.ge, (In(3, 4, lo=0, hi=2), In(3, 4, lo=0, hi=2))),
    ("bitwise_and", torch.bitwise_and, (IA, IB)),
    ("bitwise_or", torch.bitwise_or, (IA, IB)),
    ("bitwise_xor", torch.bitwise_xor, (IA, IB)),
    ("bitwise_and_scalar", lambda x: x & 6, (IA,)),
    ("bool_and", torch.bitwise_and, (Bo(3, 4), Bo(3, 4))),
    ("bool_or", torch.bitwise_or, (Bo(3, 4), Bo(3, 4))),
    ("bool_xor", torch.bitwise_xor, (Bo(3, 4), Bo(3, 4))),
    ("logical_and", torch.logical_and, (Bo(3, 4), Bo(3, 4))),
    ("logical_or", torch.logical_or, (Bo(3, 4), Bo(3, 4))),
    ("logical_xor", torch.logical_xor, (Bo(3, 4), Bo(3, 4))),
    ("logical_and_int", torch.logical_and, (In(3, 4, lo=-1, hi=1), In(3, 4, lo=-1, hi=1))),
    ("bool_eq", torch.eq, (Bo(3, 4), Bo(3, 4))),
    ("where_int", lambda c, x, y: torch.where(c, x, y), (Bo(3, 4), IA, IB)),
    ("where_int_scalar", lambda x: torch.where(x > 0, x, 0), (IA,)),
    ("int32_add", torch.add, (In(3, 4, dtype=torch.int32), In(3, 4, dtype=torch.int32))),
    ("int32_mul_int64", torch.mul, (In(3, 4, dtype=torch.int32), IB)),
    ("uint8_add", torch.add, (In(3, 4, lo=0, hi=200, dtype=torch.uint8), In(3, 4, lo=0, hi=200, dtype=torch.uint8))),
]:
    case(f"int_{_name}", _fn, *_specs)

# ---- type promotion
case("promo_int_plus_float", torch.add, IA, A)
case("promo_float_plus_int", torch.add, A, IA)
case("promo_float_plus_scalar", lambda x: x + 2.5, A)
case("promo_int_plus_float_scalar", lambda x: x + 2.5, IA)
case("promo_int_times_int_scalar", lambda x: x * 3, IA)
case("promo_int_true_div", torch.div, IA, INZ)
case("promo_int_div_scalar", lambda x: x / 4, IA)
case("promo_bool_plus_int", torch.add, Bo(3, 4), IA)
case("promo_bool_plus_bool_scalar", lambda x: x + 1, Bo(3, 4))
case("promo_float_times_bool", torch.mul, A, Bo(3, 4))
case("promo_int32_plus_float_scalar", lambda x: x + 0.5, In(3, 4, dtype=torch.int32))
case("promo_f32_plus_0d_f64", torch.add, A, Fl(dtype=torch.float64))
case("promo_int_plus_0d_float", torch.add, IA, Fl())
case("promo_f32_plus_f64", torch.add, A, Fl(3, 4, dtype=torch.float64))
case("promo_int_lt_float", torch.lt, IA, Fl(3, 4, lo=-9, hi=9))
case("cast_float_to_int", lambda x: x.to(torch.int64), Fl(3, 4, lo=-9, hi=9))
case("cast_int_to_float", lambda x: x.float(), IA)
case("cast_float_to_bool", lambda x: x.bool(), T([0.0, -0.0, 1.0, -2.5, float("nan")]))
case("cast_bool_to_float", lambda x: x.float() * 2, Bo(3, 4))
case("cast_to_f64", lambda x: x.double() * 3, A)

# ---- broadcasting
case("bcast_scalar_input", torch.add, A, Fl())
case("bcast_0d_left", torch.mul, Fl(), A)
case("bcast_row", torch.add, A, Fl(4))
case("bcast_col", torch.sub, A, Fl(3, 1))
case("bcast_outer", torch.mul, Fl(3, 1), Fl(1, 4))
case("bcast_3d", torch.add, Fl(2, 3, 4), Fl(1, 3, 1))
case("bcast_rank_mismatch", torch.add, Fl(2, 3, 4), Fl(3, 1))
case("bcast_where", lambda c, x: torch.where(c, x, -x), Bo(3, 1), Fl(1, 4))
case("bcast_int", torch.add, In(2, 1, 4), In(3, 1))

# ---- activations
for _name, _fn in [
    ("clamp", lambda x: torch.clamp(x, -0.5, 0.75)),
    ("clamp_min", lambda x: torch.clamp(x, min=-0.5)),
    ("clamp_max", lambda x: torch.clamp(x, max=0.5)),
    ("clamp_min_method", lambda x: x.clamp_min(0.1)),
    ("hardtanh", F.hardtanh),
    ("hardtanh_args", lambda x: F.hardtanh(x, -0.3, 1.7)),
    ("relu6", F.relu6),
    ("leaky_relu", lambda x: F.leaky_relu(x, 0.2)),
    ("leaky_relu_default", F.leaky_relu),
    ("elu", F.elu),
    ("elu_alpha", lambda x: F.elu(x, alpha=0.7)),
    ("selu", F.selu),
    ("celu", lambda x: F.celu(x, alpha=1.3)),
    ("gelu", F.gelu),
    ("gelu_tanh", lambda x: F.gelu(x, approximate="tanh")),
    ("silu", F.silu),
    ("hardswish", F.hardswish),
    ("hardsigmoid", F.hardsigmoid),
    ("sigmoid", torch.sigmoid),
    ("tanh", torch.tanh),
    ("softplus", F.softplus),
    ("mish", F.mish),
    ("logsigmoid", F.logsigmoid),
    ("softsign", F.softsign),
    ("hardshrink", F.hardshrink),
]:
    case(f"act_{_name}", _fn, Fl(4, 6, lo=-6, hi=6))
case("act_clamp_tensor", lambda x, lo, hi: torch.clamp(x, lo, hi), Fl(3, 4), Fl(3, 4, lo=-1, hi=0), Fl(4, lo=0, hi=1))
case("act_clamp_int", lambda x: torch.clamp(x, -3, 4), IA)
case("act_relu_int", torch.relu, IA)
case("act_clamp_nan", lambda x: torch.clamp(x, -1, 1), T([float("nan"), 2.0, -2.0, 0.5]))
case("act_relu_nan", torch.relu, T([float("nan"), 2.0, -2.0, 0.5]))

# ---- shape ops
X = Fl(2, 3, 4)
for _name, _fn, _specs in [
    ("view", lambda x: x.view(6, 4) * 2, (X,)),
    ("view_infer", lambda x: x.view(-1, 2) + 1, (X,)),
    ("reshape", lambda x: x.reshape(4, 6), (X,)),
    ("reshape_of_permute", lambda x: x.permute(2, 0, 1).reshape(4, 6), (X,)),
    ("flatten", lambda x: torch.flatten(x, 1), (X,)),
    ("flatten_all", torch.flatten, (X,)),
    ("squeeze", lambda x: x.squeeze(), (Fl(2, 1, 3, 1),)),
    ("squeeze_dim", lambda x: x.squeeze(1), (Fl(2, 1, 3, 1),)),
    ("unsqueeze", lambda x: x.unsqueeze(1) * 3, (Fl(2, 3),)),
    ("unsqueeze_neg", lambda x: x.unsqueeze(-1), (Fl(2, 3),)),
    ("permute", lambda x: x.permute(2, 0, 1), (X,)),
    ("permute_4d", lambda x: x.permute(0, 2, 3, 1), (Fl(2, 3, 4, 5),)),
    ("transpose", lambda x: x.transpose(0, 2), (X,)),
    ("transpose_neg", lambda x: x.transpose(-1, -2) + 1, (X,)),
    ("t", lambda x: x.t(), (Fl(3, 5),)),
    ("mT", lambda x: x.mT, (X,)),
    ("expand", lambda x: x.expand(3, 4), (Fl(1, 4),)),
    ("expand_new_dims", lambda x: x.expand(2, 3, 4), (Fl(3, 1),)),
    ("expand_as_add", lambda x, y: x.expand_as(y) + y, (Fl(1, 4), Fl(3, 4))),
    ("slice", lambda x: x[:, 1:3], (X,)),
    ("slice_step", lambda x: x[:, :, ::2], (X,)),
    ("slice_step_start", lambda x: x[1:, ::2, 1::3], (Fl(3, 5, 7),)),
    ("slice_neg_start", lambda x: x[:, -2:], (X,)),
    ("slice_neg_stop", lambda x: x[..., 1:-1], (X,)),
    ("slice_contig", lambda x: x[1:], (X,)),
    ("slice_empty_full", lambda x: x[:, 0:100], (X,)),
    ("select", lambda x: x[1], (X,)),
    ("select_mid", lambda x: x[:, 2], (X,)),
    ("select_neg", lambda x: x[..., -1], (X,)),
    ("narrow", lambda x: torch.narrow(x, 2, 1, 2), (X,)),
    ("split", lambda x: torch.split(x, 2, dim=2), (X,)),
    ("split_uneven", lambda x: torch.split(x, [1, 3], dim=-1), (X,)),
    ("chunk", lambda x: torch.chunk(x, 3, dim=1), (X,)),
    ("chunk_uneven", lambda x: torch.chunk(x, 2, dim=1), (Fl(2, 5),)),
    ("unbind", lambda x: torch.unbind(x, 1), (X,)),
    ("unbind0", lambda x: torch.unbind(x), (X,)),
    ("cat", lambda x, y: torch.cat([x, y], 1), (Fl(2, 3), Fl(2, 5))),
    ("cat0", lambda x, y: torch.cat([x, y, x]), (Fl(2, 3), Fl(1, 3))),
    ("cat_last_3d", lambda x, y: torch.cat([x, y], -1), (X, Fl(2, 3, 2))),
    ("cat_int", lambda x, y: torch.cat([x, y], 0), (In(2, 3), In(1, 3))),
    ("cat_strided_inputs", lambda x: torch.cat([x.t(), x.t() * 2], 1), (Fl(3, 4),)),
    ("stack", lambda x, y: torch.stack([x, y]), (Fl(2, 3), Fl(2, 3))),
    ("stack_last", lambda x, y: torch.stack([x, y], -1), (Fl(2, 3), Fl(2, 3))),
    ("stack_mid", lambda x, y, z: torch.stack([x, y, z], 1), (Fl(2, 3), Fl(2, 3), Fl(2, 3))),
    ("repeat", lambda x: x.repeat(2, 3), (Fl(2, 3),)),
    ("repeat_new_dims", lambda x: x.repeat(2, 1, 2), (Fl(2, 3),)),
    ("repeat_interleave", lambda x: x.repeat_interleave(2, dim=1), (Fl(2, 3),)),
    ("tile", lambda x: x.tile((2,)), (Fl(2, 3),)),
    ("pad_constant", lambda x: F.pad(x, (1, 2)), (X,)),
    ("pad_constant_value", lambda x: F.pad(x, (1, 2, 0, 1), value=-1.5), (X,)),
    ("pad_negative", lambda x: F.pad(x, (-1, 1, 1, -1)), (X,)),
    ("pad_int", lambda x: F.pad(x, (2, 0), value=7), (In(2, 3),)),
    ("pad_4d", lambda x: F.pad(x, (1, 1, 1, 1)), (Fl(1, 2, 3, 3),)),
    ("index_select", lambda x, i: torch.index_select(x, 1, i), (X, In(5, lo=0, hi=2))),
    ("index_select_last", lambda x, i: torch.index_select(x, -1, i), (X, In(3, lo=0, hi=3))),
    ("index_select_int32_idx", lambda x, i: torch.index_select(x, 0, i), (X, In(3, lo=0, hi=1, dtype=torch.int32))),
    ("embedding", lambda i, w: F.embedding(i, w), (In(2, 3, lo=0, hi=9), Fl(10, 4))),
    ("embedding_mod", torch.nn.Embedding(10, 4), (In(2, 3, lo=0, hi=9),)),
    ("embedding_bag_sum", lambda i, w: F.embedding_bag(i, w, torch.tensor([0, 3, 3, 5]), mode="sum"),
     (In(8, lo=0, hi=9), Fl(10, 4))),  # an empty bag in the middle
    ("embedding_bag_mean_pad", lambda i, w: F.embedding_bag(i, w, torch.tensor([0, 4]), mode="mean", padding_idx=2),
     (In(9, lo=0, hi=5), Fl(6, 3))),
    ("embedding_bag_max_last", lambda i, w: F.embedding_bag(i, w, torch.tensor([0, 2, 7]), mode="max",
                                                             include_last_offset=True), (In(7, lo=0, hi=9), Fl(10, 5))),
    ("embedding_bag_weighted", lambda i, w, p: F.embedding_bag(i, w, torch.tensor([0, 1, 4]), mode="sum",
                                                               per_sample_weights=p), (In(6, lo=0, hi=9), Fl(10, 4), Fl(6))),
    ("embedding_bag_mod", torch.nn.EmbeddingBag(12, 6, mode="mean"), (In(3, 4, lo=0, hi=11),)),  # 2-d: bags of 4
    ("gather_by_index", lambda x, i: x[i], (X, In(4, lo=0, hi=1))),
    ("gather_by_index_2d", lambda x, i: x[i], (Fl(5, 3), In(2, 3, lo=0, hi=4))),
    ("gather_by_index_neg", lambda x, i: x[i], (Fl(5, 3), In(4, lo=-5, hi=4))),
    ("gather_by_index_dim1", lambda x, i: x[:, i], (X, In(4, lo=0, hi=2))),
    ("const_index_list", lambda x: x[[0, 2, 1, 2]], (Fl(3, 4),)),
    ("const_index_tensor", lambda x: x[:, torch.tensor([[3, 0], [1, 1]])], (Fl(3, 4),)),
    ("const_index_two", lambda x: x[[0, 2, 1], [3, 0, 1]], (Fl(3, 4),)),
    ("const_index_bcast", lambda x: x[torch.tensor([[0], [2]]), torch.tensor([1, 3])], (Fl(3, 4),)),
    ("flip", lambda x: torch.flip(x, [1]), (X,)),
    ("roll", lambda x: torch.roll(x, 1, 2), (X,)),
    ("tril", torch.tril, (Fl(4, 4),)),
    ("triu_diag", lambda x: torch.triu(x, 1), (Fl(4, 5),)),
    ("movedim", lambda x: torch.movedim(x, 0, -1), (X,)),
    ("unflatten", lambda x: x.unflatten(2, (2, 2)), (X,)),
    ("contiguous_clone", lambda x: x.t().contiguous().clone() + 0, (Fl(3, 4),)),
    ("diagonal", lambda x: torch.diagonal(x), (Fl(4, 4),)),
    ("fused_views_same_input", lambda x: x.t() * x.t().t().t() + x, (Fl(3, 3),)),
    ("fused_transpose_add", lambda x, y: x.t() + y, (Fl(4, 3), Fl(3, 4))),
    ("fused_step_slice_add", lambda x, y: x[::2] * y, (Fl(6, 4), Fl(3, 4))),
    ("fused_expand_mul", lambda x, y: x.expand(3, 4) * y.t(), (Fl(3, 1), Fl(4, 3))),
    ("reduce_of_transpose", lambda x: x.t().sum(0), (Fl(3, 4),)),
    ("softmax_of_transpose", lambda x: torch.softmax(x.t(), -1), (Fl(3, 4),)),
    ("cat_expanded", lambda x, y: torch.cat([x.expand(2, 3), y], 0), (Fl(1, 3), Fl(2, 3))),
    ("pad_all_negative", lambda x: F.pad(x, (-1, -1, -1, 0)), (X,)),
    ("select_then_view", lambda x: x[:, 1].reshape(-1) * 2, (X,)),
]:
    case(f"shape_{_name}", _fn, *_specs)
case("shape_gather_dim", lambda x, i: torch.gather(x, 1, i), Fl(3, 4), In(3, 2, lo=0, hi=3))
case("shape_bool_mask_index", lambda x, i, j: x[i, j], Fl(3, 4), In(2, lo=0, hi=2), In(2, lo=0, hi=3))
case("shape_index_two_bcast", lambda x, i, j: x[:, i, j], Fl(2, 3, 4, 5), In(3, 1, lo=-3, hi=2), In(2, lo=0, hi=3))

# ---- reductions
R = Fl(3, 4, 5)
for _name, _fn, _specs in [
    ("sum_all", torch.sum, (R,)),
    ("sum_dim", lambda x: x.sum(1), (R,)),
    ("sum_keepdim", lambda x: x.sum(-1, keepdim=True), (R,)),
    ("sum_nonadjacent", lambda x: x.sum((0, 2)), (R,)),
    ("sum_nonadjacent_keepdim", lambda x: x.sum((0, 2), keepdim=True), (R,)),
    ("sum_4d_nonadjacent", lambda x: x.sum((1, 3)), (Fl(2, 3, 4, 5),)),
    ("sum_int", lambda x: x.sum(1), (In(3, 4, 5),)),
    ("sum_bool", lambda x: x.sum(), (Bo(3, 4),)),
    ("sum_int32", lambda x: x.sum(0), (In(3, 4, dtype=torch.int32),)),
    ("sum_dtype", lambda x: x.sum(0, dtype=torch.float32), (In(3, 4),)),
    ("mean_all", torch.mean, (R,)),
    ("mean_dim", lambda x: x.mean(-1), (R,)),
    ("mean_keepdim", lambda x: x.mean(0, keepdim=True), (R,)),
    ("mean_nonadjacent", lambda x: x.mean((0, 2)), (R,)),
    ("amax", lambda x: x.amax(1), (R,)),
    ("amax_keepdim", lambda x: x.amax(-1, keepdim=True), (R,)),
    ("amax_multi", lambda x: x.amax((0, 2)), (R,)),
    ("amin", lambda x: x.amin(0), (R,)),
    ("amin_multi_keepdim", lambda x: x.amin((0, 2), keepdim=True), (R,)),
    ("amax_int", lambda x: x.amax(1), (In(3, 4, 5),)),
    ("max_all", torch.max, (R,)),
    ("min_all", torch.min, (R,)),
    ("max_dim", lambda x: torch.max(x, 1), (R,)),
    ("min_dim_keepdim", lambda x: torch.min(x, -1, keepdim=True), (R,)),
    ("max_dim_values", lambda x: torch.max(x, 2)[0], (R,)),
    ("prod", lambda x: x.prod(1), (Fl(3, 4, 5, lo=0.5, hi=1.5),)),
    ("prod_all", torch.prod, (Fl(3, 4, lo=0.5, hi=1.5),)),
    ("prod_int", lambda x: x.prod(-1), (In(3, 4, lo=-3, hi=3),)),
    ("argmax", lambda x: x.argmax(1), (R,)),
    ("argmax_all", torch.argmax, (R,)),
    ("argmax_keepdim", lambda x: x.argmax(-1, keepdim=True), (R,)),
    ("argmin", lambda x: x.argmin(0), (R,)),
    ("argmin_keepdim", lambda x: x.argmin(2, keepdim=True), (R,)),
    ("argmax_int", lambda x: x.argmax(1), (In(3, 40, lo=-1000, hi=1000),)),
    ("argmax_ties", lambda x: x.argmax(1), (T([[1.0, 3.0, 3.0, 0.0], [2.0, 2.0, 2.0, 2.0]]),)),
    ("any", lambda x: x.any(1), (Bo(3, 4, 5),)),
    ("any_all", torch.any, (Bo(3, 4),)),
    ("any_keepdim", lambda x: x.any(-1, keepdim=True), (Bo(3, 4, 5),)),
    ("any_float", lambda x: (x > 1.5).any(0), (R,)),
    ("all", lambda x: x.all(1), (T([[True, True], [True, False], [False, False]], torch.bool),)),
    ("all_all", torch.all, (T([[True, True], [True, True]], torch.bool),)),
    ("all_dims", lambda x: x.all((0, 2)), (Bo(3, 4, 5),)),
    ("all_int", lambda x: x.all(-1), (In(3, 4, lo=0, hi=3),)),
    ("var", lambda x: x.var(1), (R,)),
    ("std_keepdim", lambda x: x.std(-1, keepdim=True), (R,)),
    ("var_unbiased_false", lambda x: x.var((0, 2), unbiased=False), (R,)),
    ("logsumexp", lambda x: torch.logsumexp(x, -1), (R,)),
    ("norm", lambda x: torch.linalg.vector_norm(x, dim=-1), (R,)),
    ("count_nonzero", lambda x: torch.count_nonzero(x, 1), (In(3, 4, lo=0, hi=1),)),
]:
    case(f"red_{_name}", _fn, *_specs, tol=MM)

# ---- cumsum
case("cumsum_0", lambda x: torch.cumsum(x, 0), R, tol=MM)
case("cumsum_1", lambda x: torch.cumsum(x, 1), R, tol=MM)
case("cumsum_last", lambda x: torch.cumsum(x, -1), R, tol=MM)
case("cumsum_int", lambda x: torch.cumsum(x, 1), In(3, 4))
case("cumsum_bool", lambda x: torch.cumsum(x, -1), Bo(3, 4))
case("cumsum_int32", lambda x: torch.cumsum(x, -1), In(3, 4, dtype=torch.int32))
case("cumsum_dtype", lambda x: torch.cumsum(x, 0, dtype=torch.float32), In(3, 4))

# ---- softmax
for _name, _fn, _spec in [
    ("softmax_last", lambda x: torch.softmax(x, -1), R),
    ("softmax_0", lambda x: torch.softmax(x, 0), R),
    ("softmax_mid", lambda x: torch.softmax(x, 1), R),
    ("softmax_large", lambda x: torch.softmax(x * 30, -1), R),
    ("softmax_neg_inf", lambda x: torch.softmax(x.masked_fill(x < -1, float("-inf")), -1), R),
    ("log_softmax_last", lambda x: F.log_softmax(x, -1), R),
    ("log_softmax_mid", lambda x: F.log_softmax(x, 1), R),
    ("log_softmax_0", lambda x: F.log_softmax(x, 0), R),
    ("softmax_1d", lambda x: torch.softmax(x, 0), Fl(7)),
]:
    case(_name, _fn, _spec, tol=MM)


# ---- norms
def _ln(shape, affine=True, bias=True):
    m = torch.nn.LayerNorm(shape, elementwise_affine=affine, bias=bias)
    if affine:
        with torch.no_grad():
            m.weight.uniform_(0.5, 1.5)
            if m.bias is not None:
                m.bias.uniform_(-0.5, 0.5)
    return m


def _bn(kind, c):
    m = kind(c).eval()
    with torch.no_grad():
        m.weight.uniform_(0.5, 1.5)
        m.bias.uniform_(-0.5, 0.5)
        m.running_mean.uniform_(-0.5, 0.5)
        m.running_var.uniform_(0.5, 2.0)
    return m


def _rms(shape, affine=True):
    m = torch.nn.RMSNorm(shape, elementwise_affine=affine)
    if affine:
        with torch.no_grad():
            m.weight.uniform_(0.5, 1.5)
    return m


def _gn():
    m = torch.nn.GroupNorm(2, 4)
    with torch.no_grad():
        m.weight.uniform_(0.5, 1.5)
        m.bias.uniform_(-0.5, 0.5)
    return m


case("norm_layer_norm", _ln(8), Fl(2, 3, 8), tol=MM)
case("norm_layer_norm_2d", _ln((3, 8)), Fl(2, 3, 8), tol=MM)
case("norm_layer_norm_noaffine", _ln(8, affine=False), Fl(2, 3, 8), tol=MM)
case("norm_layer_norm_nobias", _ln(8, bias=False), Fl(2, 3, 8), tol=MM)
case("norm_layer_norm_fn", lambda x: F.layer_norm(x, (8,), eps=1e-3), Fl(4, 8, lo=3, hi=5), tol=MM)
case("norm_rms_norm", _rms(8), Fl(2, 3, 8), tol=MM)
case("norm_rms_norm_noaffine", _rms(8, affine=False), Fl(2, 3, 8), tol=MM)
case("norm_rms_norm_eps", lambda x: F.rms_norm(x, (8,), eps=1e-2), Fl(2, 3, 8), tol=MM)
case("norm_rms_norm_2d", _rms((3, 8)), Fl(2, 3, 8), tol=MM)
case("norm_batch_norm2d", _bn(torch.nn.BatchNorm2d, 3), Fl(2, 3, 4, 4), tol=MM)
case("norm_batch_norm1d", _bn(torch.nn.BatchNorm1d, 3), Fl(4, 3), tol=MM)
case("norm_batch_norm1d_3d", _bn(torch.nn.BatchNorm1d, 3), Fl(2, 3, 5), tol=MM)
case("norm_group_norm", _gn(), Fl(2, 4, 3, 3), tol=MM)
case("norm_instance_norm", torch.nn.InstanceNorm2d(3), Fl(2, 3, 4, 4), tol=MM)
case("norm_l2_normalize", lambda x: F.normalize(x, dim=-1), Fl(3, 8), tol=MM)


# ---- linear / matmul
def _lin(i, o, bias=True):
    return torch.nn.Linear(i, o, bias=bias)


for _name, _fn, _specs in [
    ("linear_1d", _lin(6, 5), (Fl(6),)),
    ("linear_2d", _lin(6, 5), (Fl(3, 6),)),
    ("linear_3d", _lin(6, 5), (Fl(2, 3, 6),)),
    ("linear_4d", _lin(6, 5), (Fl(2, 2, 3, 6),)),
    ("linear_nobias", _lin(6, 5, bias=False), (Fl(3, 6),)),
    ("linear_nobias_3d", _lin(6, 5, bias=False), (Fl(2, 3, 6),)),
    ("linear_fn_runtime_weight", lambda x, w, b: F.linear(x, w, b), (Fl(3, 6), Fl(5, 6), Fl(5))),
    ("linear_transposed_input", lambda x, w: F.linear(x.t(), w), (Fl(6, 3), Fl(5, 6))),
    ("matmul_2d", torch.matmul, (Fl(3, 6), Fl(6, 5))),
    ("matmul_1d_2d", torch.matmul, (Fl(6), Fl(6, 5))),
    ("matmul_2d_1d", torch.matmul, (Fl(3, 6), Fl(6))),
    ("matmul_1d_1d", torch.matmul, (Fl(6), Fl(6))),
    ("matmul_3d", torch.matmul, (Fl(2, 3, 6), Fl(2, 6, 5))),
    ("matmul_3d_2d", torch.matmul, (Fl(2, 3, 6), Fl(6, 5))),
    ("matmul_2d_3d", torch.matmul, (Fl(3, 6), Fl(2, 6, 5))),
    ("matmul_4d", torch.matmul, (Fl(2, 2, 3, 6), Fl(2, 2, 6, 5))),
    ("matmul_4d_bcast", torch.matmul, (Fl(2, 2, 3, 6), Fl(1, 2, 6, 5))),
    ("matmul_transposed", lambda x, y: x @ y.transpose(-1, -2), (Fl(2, 3, 6), Fl(2, 5, 6))),
    ("matmul_const_weight", lambda x: x @ torch.linspace(-1, 1, 30).reshape(6, 5), (Fl(3, 6),)),
    ("mm", torch.mm, (Fl(3, 6), Fl(6, 5))),
    ("bmm", torch.bmm, (Fl(2, 3, 6), Fl(2, 6, 5))),
    ("addmm", torch.addmm, (Fl(5), Fl(3, 6), Fl(6, 5))),
    ("addmm_beta_alpha", lambda b, x, y: torch.addmm(b, x, y, beta=0.5, alpha=2.0), (Fl(3, 5), Fl(3, 6), Fl(6, 5))),
    ("addmm_beta0", lambda b, x, y: torch.addmm(b, x, y, beta=0.0, alpha=1.5), (Fl(1, 5), Fl(3, 6), Fl(6, 5))),
    ("addmm_col_bias", lambda b, x, y: torch.addmm(b, x, y), (Fl(3, 1), Fl(3, 6), Fl(6, 5))),
    ("baddbmm", lambda b, x, y: torch.baddbmm(b, x, y, beta=0.5, alpha=2.0), (Fl(2, 3, 5), Fl(2, 3, 6), Fl(2, 6, 5))),
    ("einsum", lambda x, y: torch.einsum("bij,bjk->bik", x, y), (Fl(2, 3, 6), Fl(2, 6, 5))),
    ("matmul_larger", torch.matmul, (Fl(33, 70), Fl(70, 45))),
    ("mm_both_transposed", lambda x, y: x.t() @ y.t(), (Fl(6, 3), Fl(5, 6))),
    ("mm_select_operand", lambda x, y: x[:, 1] @ y, (Fl(3, 4, 6), Fl(6, 5))),
    ("mm_step_slice_operand", lambda x, y: x[:, ::2] @ y, (Fl(3, 12), Fl(6, 5))),
    ("mm_offset_slice_operand", lambda x, y: x[:, 1:] @ y, (Fl(3, 7), Fl(6, 5))),
    ("bmm_both_transposed", lambda x, y: x.transpose(1, 2) @ y.transpose(1, 2), (Fl(2, 6, 3), Fl(2, 5, 6))),
    ("bmm_permuted_heads", lambda q, k: q.permute(0, 2, 1, 3) @ k.permute(0, 2, 3, 1), (Fl(2, 5, 3, 4), Fl(2, 5, 3, 4))),
    ("linear_permuted_3d", lambda x, w: F.linear(x.transpose(0, 1), w), (Fl(3, 2, 6), Fl(5, 6))),
    ("linear_const_transposed_input", torch.nn.Sequential(Mod(lambda x: x.t()), _lin(6, 5)), (Fl(6, 3),)),
]:
    case(f"mm_{_name}", _fn, *_specs, tol=MM)
unsupported("mm_int", torch.matmul, In(3, 4), In(4, 2), why="integer matmul")


# ---- convolution
def _conv(cls, *args, **kw):
    torch.manual_seed(len(CASES))
    return cls(*args, **kw)


for _name, _mod, _spec in [
    ("conv1d", _conv(torch.nn.Conv1d, 3, 4, 3), Fl(2, 3, 10)),
    ("conv1d_stride_pad_dil", _conv(torch.nn.Conv1d, 3, 4, 3, stride=2, padding=2, dilation=2), Fl(2, 3, 11)),
    ("conv1d_groups_nobias", _conv(torch.nn.Conv1d, 4, 6, 3, groups=2, bias=False), Fl(1, 4, 9)),
    ("conv1d_depthwise", _conv(torch.nn.Conv1d, 4, 4, 3, groups=4, padding=1), Fl(2, 4, 9)),
    ("conv1d_unbatched", _conv(torch.nn.Conv1d, 3, 4, 3), Fl(3, 10)),
    ("conv2d", _conv(torch.nn.Conv2d, 3, 5, 3), Fl(2, 3, 8, 8)),
    ("conv2d_1x1", _conv(torch.nn.Conv2d, 8, 4, 1), Fl(1, 8, 5, 5)),
    ("conv2d_stride_pad", _conv(torch.nn.Conv2d, 3, 5, 3, stride=2, padding=1), Fl(2, 3, 9, 9)),
    ("conv2d_asym", _conv(torch.nn.Conv2d, 3, 4, (3, 2), stride=(2, 1), padding=(1, 0)), Fl(1, 3, 7, 6)),
    ("conv2d_dilation", _conv(torch.nn.Conv2d, 3, 4, 3, dilation=2, padding=2), Fl(1, 3, 9, 9)),
    ("conv2d_groups", _conv(torch.nn.Conv2d, 4, 6, 3, groups=2, padding=1), Fl(2, 4, 6, 6)),
    ("conv2d_depthwise", _conv(torch.nn.Conv2d, 6, 6, 3, groups=6, padding=1), Fl(2, 6, 7, 7)),
    ("conv2d_depthwise_stride", _conv(torch.nn.Conv2d, 4, 4, 3, groups=4, stride=2), Fl(1, 4, 9, 9)),
    ("conv2d_depthwise_mult", _conv(torch.nn.Conv2d, 3, 6, 3, groups=3, padding=1), Fl(1, 3, 6, 6)),
    ("conv2d_nobias", _conv(torch.nn.Conv2d, 3, 5, 3, bias=False), Fl(1, 3, 6, 6)),
    ("conv2d_unbatched", _conv(torch.nn.Conv2d, 3, 5, 3), Fl(3, 6, 6)),
    ("conv2d_same", _conv(torch.nn.Conv2d, 3, 4, 3, padding="same"), Fl(1, 3, 6, 6)),
    ("conv2d_big", _conv(torch.nn.Conv2d, 16, 32, 3, padding=1), Fl(1, 16, 12, 12)),
]:
    case(f"conv_{_name}", _mod, _spec, tol=MM)
case("conv_conv2d_relu_fused", torch.nn.Sequential(_conv(torch.nn.Conv2d, 3, 4, 3), torch.nn.ReLU()), Fl(1, 3, 6, 6), tol=MM)
case("conv_conv2d_bn", torch.nn.Sequential(_conv(torch.nn.Conv2d, 3, 4, 3), _bn(torch.nn.BatchNorm2d, 4)), Fl(1, 3, 6, 6), tol=MM)
case("conv_transpose2d", _conv(torch.nn.ConvTranspose2d, 3, 4, 3), Fl(1, 3, 5, 5), tol=MM)
case("conv_runtime_weight", lambda x, w: F.conv2d(x, w), Fl(1, 3, 5, 5), Fl(4, 3, 3, 3), tol=MM)
case("conv_runtime_weight_groups_bias", lambda x, w, b: F.conv2d(x, w, b, stride=2, padding=1, groups=2),
     Fl(2, 4, 6, 5), Fl(6, 2, 3, 3), Fl(6), tol=MM)
case("conv_runtime_weight_1d", lambda x, w: F.conv1d(x, w, padding=2, dilation=2), Fl(2, 3, 9), Fl(4, 3, 3), tol=MM)
case("more_max_pool2d_indices", lambda x: F.max_pool2d(x, 3, 2, 1, return_indices=True), Fl(2, 3, 7, 7), tol=MM)
case("more_max_pool1d_indices_ceil", lambda x: F.max_pool1d(x, 2, ceil_mode=True, return_indices=True), Fl(2, 3, 7), tol=MM)
case("more_layer_norm_stats", lambda x: torch.ops.aten.native_layer_norm(x, [4], None, None, 1e-5), Fl(2, 3, 4), tol=MM)
case("more_index_select_0d", lambda x, i: torch.index_select(x, 0, i), T(2.0), T(0, torch.int64))
unsupported("fft_rfft", lambda x: torch.fft.rfft(x).abs(), Fl(2, 8), why="FFTs (complex tensors)")
for _name, _fn, _specs in [
    ("conv3d", _conv(torch.nn.Conv3d, 2, 3, 2), (Fl(1, 2, 4, 4, 4),)),
    ("conv3d_groups_stride_pad_dil", _conv(torch.nn.Conv3d, 4, 6, (3, 2, 3), stride=(2, 1, 2), padding=(1, 0, 2),
                                           dilation=(1, 2, 1), groups=2), (Fl(2, 4, 5, 6, 7),)),
    ("conv3d_unbatched", _conv(torch.nn.Conv3d, 2, 3, 3, padding=1), (Fl(2, 4, 5, 3),)),
    ("conv3d_runtime_weight", lambda x, w, b: F.conv3d(x, w, b, padding=1), (Fl(1, 3, 4, 5, 4), Fl(2, 3, 3, 3, 3), Fl(2))),
    ("conv_transpose3d", _conv(torch.nn.ConvTranspose3d, 4, 6, 3, stride=2, padding=1, output_padding=1, groups=2),
     (Fl(1, 4, 3, 4, 3),)),
    ("max_pool3d_indices", lambda x: F.max_pool3d(x, 2, 1, 1, dilation=2, ceil_mode=True, return_indices=True),
     (Fl(2, 3, 5, 6, 5),)),
    ("avg_pool3d_ceil_nocount", lambda x: F.avg_pool3d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False),
     (Fl(1, 2, 6, 7, 5),)),
    ("avg_pool3d_divisor", lambda x: F.avg_pool3d(x, 2, divisor_override=3), (Fl(2, 4, 4, 6),)),
    ("adaptive_avg_pool3d", lambda x: F.adaptive_avg_pool3d(x, (3, 2, 4)), (Fl(1, 2, 7, 5, 6),)),
    ("grid_sample_bilinear_zeros", lambda x, g: F.grid_sample(x, g, align_corners=False),
     (Fl(2, 3, 5, 6), Fl(2, 4, 3, 2, lo=-1.3, hi=1.3))),
    ("grid_sample_nearest_border", lambda x, g: F.grid_sample(x, g, "nearest", "border", align_corners=True),
     (Fl(1, 2, 5, 6), Fl(1, 4, 5, 2, lo=-1.3, hi=1.3))),
    ("grid_sample_bicubic_reflection", lambda x, g: F.grid_sample(x, g, "bicubic", "reflection", align_corners=False),
     (Fl(1, 2, 5, 6), Fl(1, 4, 5, 2, lo=-1.5, hi=1.5))),
    ("col2im_fold", lambda x: F.fold(x, (7, 9), (2, 3), dilation=(2, 1), padding=(1, 2), stride=(2, 3)), (Fl(2, 18, 16),)),
    ("cdist_p2", torch.cdist, (Fl(2, 5, 3), Fl(2, 4, 3))),
    ("cdist_p1_bcast", lambda a, b: torch.cdist(a, b, p=1.0), (Fl(2, 5, 3), Fl(1, 4, 3))),
    ("pdist_p3", lambda x: F.pdist(x, p=3.0), (Fl(5, 4),)),
]:
    case(f"more_{_name}", _fn, *_specs, tol=MM)
for _name, _fn, _specs in [
    ("scatter_reduce_sum", lambda x, i, s: x.scatter_reduce(1, i, s, "sum", include_self=False),
     (Fl(3, 6), In(2, 4, lo=0, hi=5), Fl(2, 5))),
    ("scatter_reduce_mean", lambda x, i, s: x.scatter_reduce(1, i, s, "mean"), (Fl(3, 6), In(2, 4, lo=0, hi=5), Fl(2, 5))),
    ("scatter_reduce_mean_int", lambda x, i, s: x.scatter_reduce(0, i, s, "mean", include_self=False),
     (In(4, 3, lo=-20, hi=20), In(5, 3, lo=0, hi=3), In(5, 3, lo=-20, hi=20))),
    ("scatter_reduce_amax", lambda x, i, s: x.scatter_reduce(0, i, s, "amax", include_self=False),
     (Fl(4, 3), In(5, 3, lo=0, hi=3), Fl(5, 3))),
    ("scatter_reduce_amin_prod", lambda x, i, s: (x.scatter_reduce(0, i, s, "amin"), x.scatter_reduce(0, i, s, "prod")),
     (Fl(4, 3), In(5, 3, lo=0, hi=3), Fl(5, 3))),
    ("slice_scatter_step", lambda x, s: torch.slice_scatter(x, s, 1, 1, None, 2), (Fl(3, 7, 2), Fl(3, 3, 2))),
    ("select_scatter", lambda x, s: torch.select_scatter(x, s, 2, -1), (Fl(3, 4, 5), Fl(3, 4))),
    ("as_strided", lambda x: torch.as_strided(x, (3, 2, 2), (4, 1, 3), 1), (Fl(4, 4),)),
    ("masked_scatter_bcast", lambda x, m, s: torch.masked_scatter(x, m, s), (Fl(3, 4), Bo(3, 1), Fl(4, 4))),
    ("softmax_float64", lambda x: torch.softmax(x, 1, dtype=torch.float64), (Fl(3, 5),)),
    ("log_softmax_float64", lambda x: torch.log_softmax(x.double(), 0), (Fl(3, 5),)),
]:
    case(f"more_{_name}", _fn, *_specs)

# ---- pooling
for _name, _fn, _spec in [
    ("max_pool2d", lambda x: F.max_pool2d(x, 2), Fl(2, 3, 8, 8)),
    ("max_pool2d_k3s2p1", lambda x: F.max_pool2d(x, 3, 2, 1), Fl(2, 3, 9, 9)),
    ("max_pool2d_ceil", lambda x: F.max_pool2d(x, 3, 2, ceil_mode=True), Fl(1, 3, 8, 8)),
    ("max_pool2d_ceil_pad", lambda x: F.max_pool2d(x, 3, 2, 1, ceil_mode=True), Fl(1, 2, 10, 7)),
    ("max_pool2d_dilation", lambda x: F.max_pool2d(x, 2, 1, dilation=2), Fl(1, 2, 7, 7)),
    ("max_pool2d_rect", lambda x: F.max_pool2d(x, (2, 3), (1, 2)), Fl(1, 2, 6, 7)),
    ("max_pool2d_unbatched", lambda x: F.max_pool2d(x, 2), Fl(3, 6, 6)),
    ("avg_pool2d", lambda x: F.avg_pool2d(x, 2), Fl(2, 3, 8, 8)),
    ("avg_pool1d_ceil_nocount", lambda x: F.avg_pool1d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False),
     Fl(3, 10)),
    ("adaptive_avg_pool1d_unbatched", lambda x: F.adaptive_avg_pool1d(x, 4), Fl(3, 10)),
    ("avg_pool2d_pad", lambda x: F.avg_pool2d(x, 3, 2, 1), Fl(1, 3, 9, 9)),
    ("avg_pool2d_no_count_pad", lambda x: F.avg_pool2d(x, 3, 2, 1, count_include_pad=False), Fl(1, 3, 9, 9)),
    ("avg_pool2d_ceil", lambda x: F.avg_pool2d(x, 3, 2, ceil_mode=True), Fl(1, 3, 8, 8)),
    ("avg_pool2d_ceil_pad_nocount", lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False),
     Fl(1, 2, 8, 7)),
    ("avg_pool2d_divisor", lambda x: F.avg_pool2d(x, 2, divisor_override=3), Fl(1, 2, 6, 6)),
    ("avg_pool2d_unbatched", lambda x: F.avg_pool2d(x, 2), Fl(3, 6, 6)),
    ("adaptive_avg_1", lambda x: F.adaptive_avg_pool2d(x, 1), Fl(2, 3, 7, 5)),
    ("adaptive_avg_divisible", lambda x: F.adaptive_avg_pool2d(x, (2, 4)), Fl(1, 3, 8, 8)),
    ("adaptive_avg_nondivisible", lambda x: F.adaptive_avg_pool2d(x, (3, 2)), Fl(2, 3, 7, 5)),
    ("adaptive_avg_upsample", lambda x: F.adaptive_avg_pool2d(x, (4, 6)), Fl(1, 2, 3, 4)),
    ("adaptive_max_nondivisible", lambda x: F.adaptive_max_pool2d(x, (3, 2)), Fl(2, 3, 7, 5)),
    ("adaptive_max_1", lambda x: F.adaptive_max_pool2d(x, 1), Fl(1, 3, 5, 5)),
    ("adaptive_avg_unbatched", lambda x: F.adaptive_avg_pool2d(x, (2, 3)), Fl(3, 5, 7)),
    ("adaptive_avg1d", lambda x: F.adaptive_avg_pool1d(x, 3), Fl(2, 3, 7)),
    ("max_pool1d", lambda x: F.max_pool1d(x, 2), Fl(2, 3, 8)),
    ("avg_pool1d", lambda x: F.avg_pool1d(x, 3, 2, 1), Fl(2, 3, 9)),
]:
    case(f"pool_{_name}", _fn, _spec, tol=MM)

# ---- attention
Q, K, V = Fl(2, 3, 5, 8), Fl(2, 3, 7, 8), Fl(2, 3, 7, 6)
QS = Fl(2, 3, 5, 8)
for _name, _fn, _specs in [
    ("sdpa", F.scaled_dot_product_attention, (Q, K, V)),
    ("sdpa_self", F.scaled_dot_product_attention, (QS, QS, QS)),
    ("sdpa_causal", lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True), (QS, Fl(2, 3, 5, 8), Fl(2, 3, 5, 8))),
    ("sdpa_causal_rect", lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True), (Q, K, V)),
    ("sdpa_float_mask", lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m), (Q, K, V, Fl(2, 3, 5, 7))),
    ("sdpa_float_mask_bcast", lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m), (Q, K, V, Fl(5, 7))),
    ("sdpa_bool_mask", lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m | (torch.arange(7) == 0)),
     (Q, K, V, Bo(2, 1, 5, 7))),
    ("sdpa_bool_mask_bcast", lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m | (torch.arange(7) == 0)),
     (Q, K, V, Bo(1, 1, 1, 7))),
    ("sdpa_scale", lambda q, k, v: F.scaled_dot_product_attention(q, k, v, scale=0.3), (Q, K, V)),
    ("sdpa_gqa", lambda q, k, v: F.scaled_dot_product_attention(q, k, v, enable_gqa=True), (Fl(1, 4, 5, 8), Fl(1, 2, 7, 8), Fl(1, 2, 7, 8))),
    ("sdpa_mqa_bcast", F.scaled_dot_product_attention, (Fl(2, 4, 5, 8), Fl(2, 1, 7, 8), Fl(2, 1, 7, 6))),
    ("sdpa_kv_batch_bcast", F.scaled_dot_product_attention, (Fl(2, 4, 5, 8), Fl(1, 4, 7, 8), Fl(1, 1, 7, 6))),
    ("sdpa_3d_kv_bcast", F.scaled_dot_product_attention, (Fl(3, 5, 8), Fl(1, 7, 8), Fl(3, 7, 6))),
    ("sdpa_3d", F.scaled_dot_product_attention, (Fl(3, 5, 8), Fl(3, 7, 8), Fl(3, 7, 8))),
    ("mha", torch.nn.MultiheadAttention(8, 2, batch_first=True).eval(), (Fl(2, 5, 8), Fl(2, 5, 8), Fl(2, 5, 8))),
]:
    case(f"attn_{_name}", _fn, *_specs, tol=MM)

# ---- creation ops used with an input
for _name, _fn, _specs in [
    ("arange_add", lambda x: x + torch.arange(4), (Fl(3, 4),)),
    ("arange_float_step", lambda x: x * torch.arange(0.5, 2.5, 0.5), (Fl(3, 4),)),
    ("arange_int", lambda x: x * torch.arange(1, 5), (In(3, 4),)),
    ("arange_causal_mask", lambda x: x.masked_fill(torch.arange(4)[None, :] > torch.arange(4)[:, None], 0.0), (Fl(4, 4),)),
    ("full", lambda x: x + torch.full((3, 4), 2.5), (Fl(3, 4),)),
    ("full_like", lambda x: torch.full_like(x, 3.0) * x, (Fl(3, 4),)),
    ("zeros_like", lambda x: torch.zeros_like(x) + x, (Fl(3, 4),)),
    ("ones_like_int", lambda x: torch.ones_like(x) - x, (In(3, 4),)),
    ("ones", lambda x: torch.ones(3, 4) * x, (Fl(3, 4),)),
    ("zeros_cat", lambda x: torch.cat([x, torch.zeros(2, 4)]), (Fl(3, 4),)),
    ("new_full", lambda x: x.new_full((4,), 7.0) + x, (Fl(3, 4),)),
    ("new_zeros", lambda x: x.new_zeros((3, 4)) - x, (Fl(3, 4),)),
    ("eye", lambda x: x @ torch.eye(4), (Fl(3, 4),)),
    ("linspace", lambda x: x + torch.linspace(0, 1, 4), (Fl(3, 4),)),
    ("big_fill", lambda x: x + torch.full((128, 160), 0.25), (Fl(128, 160),)),
    ("empty_fill", lambda x: torch.empty_like(x).fill_(2.0) * x, (Fl(3, 4),)),
    ("scalar_tensor", lambda x: x * torch.tensor(3.0), (Fl(3, 4),)),
]:
    case(f"create_{_name}", _fn, *_specs)


# ---- more core ATen ops (pt2c/ops/extra.py)
case("more_flip_multi", lambda x: torch.flip(x, [0, 2]), Fl(2, 3, 4))
case("more_flip_fused", lambda x, y: torch.flip(x, [-1]) * y + 1, Fl(3, 4), Fl(3, 4))
case("more_flip_int", lambda x: torch.flip(x, [0]), In(3, 4))
case("more_fliplr", torch.fliplr, Fl(3, 4))
case("more_diagonal_offset", lambda x: torch.diagonal(x, 1), Fl(4, 5))
case("more_diagonal_neg_dims", lambda x: torch.diagonal(x, -1, 1, 2), Fl(2, 4, 3))
case("more_diag_embed_trace", lambda x: torch.trace(x), Fl(4, 4))
case("more_var_all", lambda x: x.var(), Fl(3, 4, 5), tol=MM)
case("more_std_correction", lambda x: torch.std(x, 1, correction=0), Fl(3, 4, 5), tol=MM)
case("more_var_mean", lambda x: torch.var_mean(x, -1), Fl(3, 4, 5), tol=MM)
case("more_std_mean", lambda x: torch.std_mean(x, (0, 1)), Fl(3, 4, 5), tol=MM)
case("more_norm_l1", lambda x: torch.linalg.vector_norm(x, 1, dim=(0, 2)), Fl(3, 4, 5), tol=MM)
case("more_norm_inf", lambda x: torch.linalg.vector_norm(x, float("inf"), dim=1, keepdim=True), Fl(3, 4, 5), tol=MM)
case("more_norm_p3", lambda x: torch.linalg.vector_norm(x, 3), Fl(3, 4, 5), tol=MM)
case("more_norm_fro", lambda x: torch.norm(x), Fl(3, 4), tol=MM)
case("more_group_norm_noaffine", lambda x: F.group_norm(x, 3), Fl(2, 6, 5), tol=MM)
case("more_group_norm_1group", lambda x: F.group_norm(x, 1), Fl(2, 4, 3, 3), tol=MM)
case("more_instance_norm_affine", torch.nn.InstanceNorm1d(3, affine=True), Fl(2, 3, 7), tol=MM)
case("more_batch_norm_train_nostats", lambda x: F.batch_norm(x, None, None, training=True), Fl(4, 3, 5), tol=MM)
case("more_topk", lambda x: torch.topk(x, 2), Fl(3, 5))
case("more_topk_smallest_dim0", lambda x: torch.topk(x, 2, dim=0, largest=False), Fl(4, 3))
case("more_topk_int", lambda x: torch.topk(x, 3).values, In(3, 6, lo=-50, hi=50))
case("more_sort", lambda x: torch.sort(x), Fl(3, 5))
case("more_sort_desc_dim0", lambda x: torch.sort(x, 0, descending=True), Fl(4, 3))
case("more_sort_nan", lambda x: torch.sort(x), T([3.0, float("nan"), -1.0, 2.0, float("nan"), 0.5]))
case("more_argsort", lambda x: torch.argsort(x, -1), Fl(2, 3, 6))
case("more_gather_dim0", lambda x, i: torch.gather(x, 0, i), Fl(3, 4), In(2, 4, lo=0, hi=2))
case("more_gather_3d", lambda x, i: torch.gather(x, -1, i), Fl(2, 3, 4), In(2, 3, 2, lo=0, hi=3))
case("more_take_along_dim", lambda x: torch.take_along_dim(x, torch.argsort(x, 1), 1), Fl(3, 5))
case("more_scatter", lambda x, i, s: torch.scatter(x, 1, i, s), Fl(3, 4), T([[0, 2], [3, 1], [1, 0]], torch.int64), Fl(3, 2))
case("more_scatter_value", lambda x, i: torch.scatter(x, 0, i, 2.5), Fl(3, 4), T([[2, 0, 1, 2]], torch.int64))
case("more_scatter_add", lambda x, i, s: torch.scatter_add(x, 1, i, s), Fl(3, 4), In(3, 5, lo=0, hi=3), Fl(3, 5))
case("more_index_put", lambda x, i, v: x.index_put((i,), v), Fl(5, 4), T([4, 0, 2], torch.int64), Fl(3, 4))
case("more_index_put_acc", lambda x, i, v: x.index_put((i,), v, accumulate=True), Fl(5, 4), In(6, lo=0, hi=4), Fl(4))
case("more_index_put_2idx", lambda x, i, j, v: x.index_put((i, j), v), Fl(3, 4), T([0, 2], torch.int64),
     T([3, 1], torch.int64), Fl(2))
case("more_index_add", lambda x, i, s: x.index_add(0, i, s), Fl(5, 3), In(4, lo=0, hi=4), Fl(4, 3))
case("more_interp_nearest", lambda x: F.interpolate(x, scale_factor=2, mode="nearest"), Fl(1, 2, 3, 3))
case("more_interp_nearest_size", lambda x: F.interpolate(x, size=(5, 7), mode="nearest"), Fl(2, 2, 3, 4))
case("more_interp_nearest_frac", lambda x: F.interpolate(x, scale_factor=1.5, mode="nearest"), Fl(1, 2, 3, 5))
case("more_interp_bilinear", lambda x: F.interpolate(x, scale_factor=2, mode="bilinear"), Fl(1, 2, 3, 3), tol=MM)
case("more_interp_bilinear_ac", lambda x: F.interpolate(x, size=(5, 6), mode="bilinear", align_corners=True),
     Fl(1, 2, 3, 4), tol=MM)
case("more_interp_bilinear_down", lambda x: F.interpolate(x, size=(3, 2), mode="bilinear"), Fl(1, 2, 7, 5), tol=MM)
case("more_interp_nearest1d", lambda x: F.interpolate(x, scale_factor=3, mode="nearest"), Fl(1, 2, 4))
case("more_interp_linear1d", lambda x: F.interpolate(x, size=7, mode="linear"), Fl(1, 2, 4), tol=MM)
case("more_upsample_module", torch.nn.Upsample(scale_factor=2, mode="bilinear", align_corners=True), Fl(1, 3, 4, 4), tol=MM)
case("more_conv_transpose2d_s2", _conv(torch.nn.ConvTranspose2d, 4, 3, 3, stride=2, padding=1, output_padding=1),
     Fl(2, 4, 4, 5), tol=MM)
case("more_conv_transpose2d_groups", _conv(torch.nn.ConvTranspose2d, 4, 6, 2, stride=2, groups=2, bias=False),
     Fl(1, 4, 3, 3), tol=MM)
case("more_conv_transpose2d_dil", _conv(torch.nn.ConvTranspose2d, 2, 3, 3, dilation=2), Fl(1, 2, 4, 4), tol=MM)
case("more_conv_transpose1d", _conv(torch.nn.ConvTranspose1d, 3, 4, 3, stride=2), Fl(2, 3, 5), tol=MM)
case("more_conv_transpose1d_unbatched", _conv(torch.nn.ConvTranspose1d, 3, 2, 4, stride=3, padding=1), Fl(3, 5), tol=MM)
case("more_sdpa_3d_mask", lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m),
     Fl(3, 5, 8), Fl(3, 7, 8), Fl(3, 7, 8), Fl(3, 5, 7), tol=MM)
case("more_sdpa_3d_causal", lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
     Fl(2, 5, 8), Fl(2, 5, 8), Fl(2, 5, 4), tol=MM)
case("more_max_pool1d_pad", lambda x: F.max_pool1d(x, 3, 2, 1), Fl(2, 3, 9), tol=MM)
case("more_avg_pool1d_ceil", lambda x: F.avg_pool1d(x, 2, ceil_mode=True), Fl(2, 3, 7), tol=MM)
case("more_clamp_tensor", lambda x, lo, hi: torch.clamp(x, lo, hi), Fl(3, 4), Fl(3, 4, lo=-2, hi=0), Fl(4, lo=0, hi=2))
case("more_clamp_tensor_min", lambda x, lo: torch.clamp(x, min=lo), Fl(3, 4), Fl(3, 1))
case("more_where_scalars", lambda c: torch.where(c, 1.5, -2.0), Bo(3, 4))
case("more_where_int_scalars", lambda x: torch.where(x > 0, 1, 0), In(3, 4))
case("more_masked_fill_tensor", lambda x, m, v: x.masked_fill(m, v), Fl(3, 4), Bo(3, 4), Fl())
case("more_masked_scatter_like", lambda x, m: torch.where(m, x * 2, torch.zeros_like(x)).sum(-1), Fl(3, 4), Bo(3, 4))
case("more_rms_norm_3d", _rms((2, 3, 4)), Fl(2, 2, 3, 4), tol=MM)
case("more_cummax_like_sorted", lambda x: torch.sort(x.flatten(), descending=True).values[:3], Fl(3, 4))

# ---- misc: ops expected to be unsupported
unsupported("misc_rand_like", lambda x: x + torch.rand_like(x), Fl(3, 4), why="random ops have no C lowering (policy)")
unsupported("misc_dropout_train", lambda x: F.dropout(x, 0.5, training=True), Fl(3, 4),
            why="dropout in training mode (random)")
unsupported("misc_randn", lambda x: x + torch.randn(3, 4), Fl(3, 4), why="random ops have no C lowering (policy)")


# ---------------------------------------------------------------------------- xfails for known bugs
# (filled in below, keyed by case id)
_U = UnsupportedError
KNOWN: dict[str, tuple[str, type | None]] = {
}

for _c in CASES:
    if _c.id in KNOWN:
        _c.xfail, _c.raises = KNOWN[_c.id]

_ids = [c.id for c in CASES]
assert len(set(_ids)) == len(_ids), "duplicate case ids"


# ---------------------------------------------------------------------------- the shared build

@dataclass
class Built:
    name: str
    dir: Path
    inputs: list[np.ndarray] = field(default_factory=list)
    ref: list[np.ndarray] = field(default_factory=list)
    error: tuple | None = None  # (exception type name, message, problems, traceback) from export / compile
    lib: Path | None = None
    build_error: str | None = None


def _flatten(out: Any) -> list[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out]
    res: list[torch.Tensor] = []
    for o in out:
        res += _flatten(o)
    return res


def _prepare(i: int, root: Path) -> Built:
    """Inputs, eager reference, export and pt2c compile of CASES[i] into root/op_<i>."""
    import traceback

    c = CASES[i]
    g = torch.Generator().manual_seed(1000 + i)
    inputs = [make_input(s, g) for s in c.specs]
    name = f"op_{i:03d}"
    b = Built(name, root / name, [t.numpy() for t in inputs])
    mod = Mod(c.fn).eval()
    try:
        with torch.no_grad():
            b.ref = [t.detach().numpy().copy() for t in _flatten(mod(*[t.clone() for t in inputs]))]
        ep = torch.export.export(mod, tuple(t.clone() for t in inputs), strict=False)
        pt2c.compile(ep, b.dir, target=TARGET, name=name)
    except Exception as e:  # reported by the case's own test item (exceptions may not pickle: keep the text)
        b.error = (type(e).__name__, str(e), getattr(e, "problems", None), traceback.format_exc())
    return b


def _prepare_chunk(idx: list[int], root: str) -> list[Built]:
    import warnings

    warnings.filterwarnings("ignore")
    return [_prepare(i, Path(root)) for i in idx]


def _raise(err: tuple) -> None:
    tname, msg, problems, tb = err
    if tname == "UnsupportedError":
        raise UnsupportedError(problems)
    if tname == "UnsupportedDtypeError":
        raise UnsupportedDtypeError(problems)
    raise RuntimeError(f"{tname}: {msg}\n--- worker traceback ---\n{tb}")


def _gcc(files: list[Path], lib: Path) -> str | None:
    cmd = [os.environ.get("CC", "gcc"), "-shared", "-fPIC", *CFLAGS, "-o", str(lib), *map(str, files), "-lm"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    return None if p.returncode == 0 else (p.stderr or p.stdout)[-6000:]


def _build_batch(k: int, batch: list[Built], root: Path) -> None:
    batch = [b for b in batch if b.error is None]
    if not batch:
        return
    lib = root / f"batch_{k:02d}.so"
    err = _gcc([b.dir / f"{b.name}.c" for b in batch], lib)
    if err is None:
        for b in batch:
            b.lib = lib
        return
    for b in batch:  # isolate the failing file(s)
        one = root / f"{b.name}.so"
        e1 = _gcc([b.dir / f"{b.name}.c"], one)
        if e1 is None:
            b.lib = one
        else:
            b.build_error = e1


@pytest.fixture(scope="session")
def built(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Built]:
    """Export + compile the selected cases in worker processes (torch.export's decomposition
    dominates), gcc each finished chunk as one batch while the workers go on."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    if shutil.which(os.environ.get("CC", "gcc")) is None:
        pytest.skip("no C compiler")
    root = tmp_path_factory.mktemp("ops")
    wanted = {item.callspec.id for item in request.session.items
              if getattr(item, "originalname", "") == "test_op" and hasattr(item, "callspec")}
    idx = [i for i, c in enumerate(CASES) if c.id in wanted]
    chunks = [idx[k:k + BATCH] for k in range(0, len(idx), BATCH)]
    ncpu = max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
    workers = int(os.environ.get("PT2C_TEST_WORKERS", min(ncpu, len(chunks)) or 1))
    t0 = time.time()
    res: dict[str, Built] = {}
    with ThreadPoolExecutor(max_workers=ncpu) as cc:
        builds = []
        if workers <= 1:
            for k, ch in enumerate(chunks):
                done = _prepare_chunk(ch, str(root))
                res.update({CASES[i].id: b for i, b in zip(ch, done)})
                builds.append(cc.submit(_build_batch, k, done, root))
        else:
            ctx = multiprocessing.get_context("spawn")
            with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
                futs = {pool.submit(_prepare_chunk, ch, str(root)): (k, ch) for k, ch in enumerate(chunks)}
                for f in as_completed(futs):
                    k, ch = futs[f]
                    done = f.result()
                    res.update({CASES[i].id: b for i, b in zip(ch, done)})
                    builds.append(cc.submit(_build_batch, k, done, root))
        for f in builds:
            f.result()
    print(f"\ntest_ops: {len(idx)} cases built in {time.time() - t0:.1f}s ({len(chunks)} batches, "
          f"{workers} workers)", file=sys.stderr)
    return res


def _param(c: Case) -> Any:
    marks = []
    if c.xfail:
        marks.append(pytest.mark.xfail(strict=True, reason=c.xfail, raises=c.raises))
    return pytest.param(c, id=c.id, marks=marks)


def _check(c: Case, b: Built) -> None:
    if b.error is not None:
        _raise(b.error)
    if b.build_error is not None:
        raise AssertionError(f"generated C does not compile:\n{b.build_error}")
    model = pt2c.load(b.dir, lib=b.lib)
    outs = model.run(b.inputs)
    assert len(outs) == len(b.ref), f"{len(outs)} outputs, expected {len(b.ref)}"
    for k, (got, ref) in enumerate(zip(outs, b.ref)):
        r = ref
        assert got.dtype == r.dtype, f"output {k}: dtype {got.dtype}, expected {r.dtype}"
        assert got.shape == r.shape, f"output {k}: shape {got.shape}, expected {r.shape}"
        if r.dtype.kind == "f":
            fin = np.isfinite(r)
            assert np.array_equal(np.isnan(got), np.isnan(r)), f"output {k}: NaN mismatch\n got {got}\n ref {r}"
            assert np.array_equal(got[~fin & ~np.isnan(r)], r[~fin & ~np.isnan(r)]), f"output {k}: inf mismatch"
            if fin.any():
                scale = max(1.0, float(np.abs(r[fin]).max()))
                err = float(np.abs(got[fin].astype(np.float64) - r[fin]).max())
                assert err <= c.tol * scale, (f"output {k}: max abs err {err:.3g} > {c.tol:g} * {scale:.3g}\n"
                                              f" got {got.ravel()[:12]}\n ref {r.ravel()[:12]}")
        else:
            assert np.array_equal(got, r), f"output {k}: mismatch\n got {got.ravel()[:16]}\n ref {r.ravel()[:16]}"


@pytest.mark.parametrize("c", [_param(c) for c in CASES])
def test_op(c: Case, built: dict[str, Built]) -> None:
    _check(c, built[c.id])


def test_table_covers_funcs() -> None:
    """Every scalar function in the elementwise FUNCS table is reachable from some row."""
    from pt2c.ops.elementwise import FUNCS

    text = Path(__file__).read_text()
    internal = {"copy", "truncdiv", "floordiv", "clamp_min", "clamp_max", "gelu_tanh", "fmod", "isinf",
                "round_bf16", "round_f16"}  # (the roundings of reduced-precision models: test_reduced_precision.py)
    missing = [f for f in FUNCS if f not in internal and f not in text]
    assert not missing, f"FUNCS without a test row: {missing}"


def test_pool1d_lowerings_without_decomposition(tmp_path, monkeypatch):
    """aten.avg_pool1d / adaptive_avg_pool1d are core ops that torch's decompositions turn into the 2-d
    ones before pt2c sees them; a program that keeps them (no decomposition) is lowered directly."""
    import pt2c.compiler
    from conftest import assert_outputs_close, build_and_run

    class M(torch.nn.Module):
        def forward(self, x):
            return (F.avg_pool1d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False)
                    + F.adaptive_avg_pool1d(x, 5) + F.avg_pool1d(x, 2, 2)[..., :5].sum())

    x = torch.randn(2, 3, 9)
    ep = torch.export.export(M(), (x,))
    assert "aten.avg_pool1d.default" in {str(n.target) for n in ep.graph.nodes}
    monkeypatch.setattr(pt2c.compiler, "decompose", lambda ep, *_: ep)
    pt2c.compile(ep, tmp_path / "p", target=TARGET, name="p1d")
    with torch.no_grad():
        ref = [M()(x).numpy()]
    assert_outputs_close(build_and_run(tmp_path / "p", [x.numpy()]), ref, "pool1d lowerings")
