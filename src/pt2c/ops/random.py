"""Random ops: a compile-time error naming the op, since pt2c has no RNG (dropout in eval mode is its input)."""

from __future__ import annotations

from typing import Any

import numpy as np

from pt2c.ops.context import LowerCtx
from pt2c.ops.registry import lowers


# ---------------------------------------------------------------- random ops: a documented compile-time error

RANDOM_OPS = ("aten.rand.default", "aten.rand_like.default", "aten.randn.default", "aten.randn_like.default",
              "aten.randint.default", "aten.randint.low", "aten.randint_like.default", "aten.randint_like.low_dtype",
              "aten.randperm.default", "aten.bernoulli.default", "aten.bernoulli.p", "aten.normal.Tensor_Tensor",
              "aten.normal.float_Tensor", "aten.normal.Tensor_float", "aten.normal.float_float",
              "aten.uniform.default", "aten.multinomial.default", "aten.native_dropout.default",
              "aten.exponential.default", "aten.poisson.default")


@lowers(*RANDOM_OPS)
def _lower_random(ctx: LowerCtx, a: dict[str, Any]) -> Any:
    if ctx.target == "aten.native_dropout.default" and not a.get("train", True):
        x = a["input"]
        outs = ctx.outs()
        mask = outs[1]
        if mask is not None:
            mask.data = np.ones(mask.shape, bool)
        return (x, mask)
    ctx.fail(f"random op {ctx.target}: pt2c compiles deterministic inference programs and has no RNG "
             "(dropout: call model.eval() before torch.export; noise: pass it in as an input)")
