"""Shared fixtures and helpers for the end-to-end tests.

* ``zoo_cache`` (session): exports + compiles each tiny zoo family once, lazily,
  into a session tmp dir (target ``x86_64-v3``), and builds it with gcc once.
* ``build_and_run``: builds an artifact with a given compiler/flags and runs it
  through the runner on a private copy of the library (so rebuilding the same
  folder never hands back a stale, already-dlopen'ed library).
* ``eager``: the PyTorch reference outputs as numpy arrays.
* ``assert_outputs_close``: the tolerance rule: float outputs pass when
  ``max|out - ref| <= 1e-4 * max(1, max|ref|)``; other dtypes must be equal.
"""

from __future__ import annotations

import itertools
import os
import shutil
import sys
import tempfile
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest

try:
    import pt2c
except ImportError:  # running from a checkout without installing the package
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))
    import pt2c

import torch

from pt2c import zoo

TARGET = "x86_64-v3"
STRICT_CFLAGS = "-std=c99 -Wall -Wextra -Werror -pedantic"
GCC_CFLAGS = "-O2 " + STRICT_CFLAGS
CLANG_CFLAGS = "-O2 " + STRICT_CFLAGS
RTOL = 1e-4

FAMILIES = sorted(zoo.FAMILIES)

_lib_counter = itertools.count()


# --------------------------------------------------------------------------- helpers


def to_numpy_inputs(inputs: Any) -> list[np.ndarray]:
    return [np.ascontiguousarray(x.detach().cpu().numpy()) for x in inputs]


def eager(model: torch.nn.Module, inputs: Any) -> list[np.ndarray]:
    """Run the model in PyTorch; returns every output as a numpy array."""
    with torch.no_grad():
        out = model(*inputs)
    if isinstance(out, torch.Tensor):
        out = [out]
    return [o.detach().cpu().numpy() for o in out]


def max_abs_err(out: np.ndarray, ref: np.ndarray) -> float:
    return float(np.max(np.abs(out.astype(np.float64) - ref.astype(np.float64)))) if ref.size else 0.0


def assert_outputs_close(outs: list[np.ndarray], refs: list[np.ndarray], what: str = "") -> None:
    """The tolerance rule: floats within 1e-4 * max(1, max|ref|) (absolute), others exact."""
    assert len(outs) == len(refs), f"{what}: {len(outs)} outputs, expected {len(refs)}"
    for i, (o, r) in enumerate(zip(outs, refs)):
        assert o.shape == r.shape, f"{what} output {i}: shape {o.shape}, expected {r.shape}"
        assert o.dtype == r.dtype, f"{what} output {i}: dtype {o.dtype}, expected {r.dtype}"
        if np.issubdtype(r.dtype, np.floating):
            assert np.isfinite(o).all(), f"{what} output {i}: non-finite values"
            scale = max(1.0, float(np.max(np.abs(r))) if r.size else 0.0)
            err = max_abs_err(o, r)
            assert err <= RTOL * scale, f"{what} output {i}: max|out-ref| = {err:.3g} > {RTOL * scale:.3g}"
        else:
            np.testing.assert_array_equal(o, r, err_msg=f"{what} output {i}")


def private_lib_copy(lib: Path) -> Path:
    """Copy a built library to a unique path: dlopen caches by path, so loading a rebuilt
    library from the same path would return the old one."""
    d = Path(tempfile.mkdtemp(prefix="pt2c-lib-"))
    dst = d / f"{lib.stem}_{next(_lib_counter)}{lib.suffix}"
    shutil.copy2(lib, dst)
    return dst


def build_and_run(out_dir: Any, inputs: list[np.ndarray], cc: str = "gcc", cflags: str = GCC_CFLAGS,
                  openmp: bool = True) -> list[np.ndarray]:
    """Build the artifact in out_dir with cc/cflags and run it on numpy inputs through the runner."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # "no OpenMP" fallback warning
        lib = pt2c.build(out_dir, cc=cc, cflags=cflags, openmp=openmp)
    model = pt2c.load(out_dir, lib=private_lib_copy(Path(lib)))
    return model.run(list(inputs))


def copy_artifact(src: Path, dst: Path) -> Path:
    """Copy an artifact folder without its build outputs."""
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("build", "build-*"))
    return dst


def export(model: torch.nn.Module, inputs: Any) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.export.export(model, tuple(inputs), strict=False)


# --------------------------------------------------------------------------- session cache


@dataclass
class Compiled:
    family: str
    model: torch.nn.Module
    inputs: tuple
    ep: Any
    artifact: Any
    out_dir: Path
    np_inputs: list[np.ndarray]
    refs: list[np.ndarray]
    _gcc_lib: Path | None = field(default=None, repr=False)
    _gcc_outs: list[np.ndarray] | None = field(default=None, repr=False)

    @property
    def name(self) -> str:
        return self.artifact.name

    def gcc_lib(self) -> Path:
        """The library built once with gcc -O2 strict flags (OpenMP on), as a private copy."""
        if self._gcc_lib is None:
            lib = pt2c.build(self.out_dir, cc="gcc", cflags=GCC_CFLAGS, openmp=True)
            self._gcc_lib = private_lib_copy(Path(lib))
        return self._gcc_lib

    def gcc_outputs(self) -> list[np.ndarray]:
        if self._gcc_outs is None:
            self._gcc_outs = pt2c.load(self.out_dir, lib=self.gcc_lib()).run(self.np_inputs)
        return self._gcc_outs


class ZooCache:
    def __init__(self, root: Path):
        self.root = root
        self._items: dict[str, Compiled] = {}

    def get(self, family: str) -> Compiled:
        if family not in self._items:
            model, inputs = zoo.FAMILIES[family]("tiny")
            ep = export(model, inputs)
            out_dir = self.root / family
            art = pt2c.compile(ep, out_dir, target=TARGET, name=family)
            self._items[family] = Compiled(family, model, tuple(inputs), ep, art, Path(art.out_dir),
                                           to_numpy_inputs(inputs), eager(model, inputs))
        return self._items[family]


@pytest.fixture(scope="session")
def zoo_cache(tmp_path_factory: pytest.TempPathFactory) -> ZooCache:
    return ZooCache(tmp_path_factory.mktemp("zoo"))


@pytest.fixture(scope="session")
def mlp_compiled(zoo_cache: ZooCache) -> Compiled:
    return zoo_cache.get("mlp")
