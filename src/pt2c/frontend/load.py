"""Getting an ExportedProgram: from memory, from a .pt2 file, or from a module + inputs.
Version checks happen here, before anything else reads the program."""

from __future__ import annotations

import json
import os
import zipfile
import zlib
from pathlib import Path
from typing import Any

from pt2c.errors import InputError

# Export schema majors this pt2c reads (torch 2.13 writes 8.x).
SUPPORTED_SCHEMA_MAJOR = (8,)
# torch releases this pt2c is tested with (major, minor), inclusive.
SUPPORTED_TORCH = ((2, 13), (2, 13))


def torch_version_tuple(v: str) -> tuple[int, int]:
    parts = v.split("+")[0].split(".")
    return int(parts[0]), int(parts[1])


def check_torch_version() -> str:
    import torch

    v = torch.__version__
    lo, hi = SUPPORTED_TORCH
    if not (lo <= torch_version_tuple(v) <= hi) and not os.environ.get("PT2C_ALLOW_UNTESTED_TORCH"):
        raise InputError(
            f"pt2c supports torch {lo[0]}.{lo[1]} to {hi[0]}.{hi[1]}, but torch {v} is installed.\n"
            f"What to try: install a supported torch (pip install 'torch=={hi[0]}.{hi[1]}.*'), or set "
            "PT2C_ALLOW_UNTESTED_TORCH=1 to try anyway (see docs/compatibility.md).")
    return v


def read_pt2_header(path: Path) -> dict[str, Any]:
    """Schema and torch version recorded in a .pt2 archive, without unpickling anything."""
    if not path.exists():
        raise InputError(f"{path}: no such file.\nWhat to try: check the path; write one with torch.export.save(ep, '{path.name}').")
    corrupt = f"{path}: corrupt .pt2 archive ({{}}).\nWhat to try: re-export with torch.export.save."
    try:
        is_zip = zipfile.is_zipfile(path)
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as e:  # e.g. a damaged zip64 locator
        raise InputError(corrupt.format(e)) from None
    if not is_zip:
        raise InputError(f"{path}: not a .pt2 archive (not a zip file; is it truncated or a different format?).\n"
                         "What to try: re-export with torch.export.save(ep, path).")
    try:
        with zipfile.ZipFile(path) as z:
            models = [n for n in z.namelist() if n.endswith("models/model.json")]
            if not models:
                raise InputError(f"{path}: no serialized ExportedProgram (models/model.json) in the archive.\n"
                                 "What to try: write it with torch.export.save (AOTInductor packages are not accepted).")
            with z.open(models[0]) as f:
                head = json.load(f)
        sv = head.get("schema_version") or {}
        schema = (int(sv.get("major", -1)), int(sv.get("minor", -1)))
        torch_version = head.get("torch_version")
    # Damaged archives surface as many types (bit flips in sizes, flags, compression
    # method, names, JSON): zlib.error and UnicodeDecodeError are ValueError /
    # Exception subclasses covered here; RuntimeError: "encrypted" flag;
    # NotImplementedError: unknown compression; AttributeError/TypeError: JSON of the wrong shape.
    except (zipfile.BadZipFile, json.JSONDecodeError, OSError, EOFError, ValueError, KeyError, RuntimeError,
            NotImplementedError, AttributeError, TypeError, OverflowError, zlib.error) as e:
        raise InputError(corrupt.format(f"{type(e).__name__}: {e}")) from None
    return {"schema_version": schema, "torch_version": torch_version}


def check_schema(schema: tuple[int, int], where: str) -> None:
    from torch._export.serde.schema import SCHEMA_VERSION

    major, minor = schema
    if major not in SUPPORTED_SCHEMA_MAJOR or (major, minor) > tuple(SCHEMA_VERSION):
        raise InputError(
            f"{where}: export schema {major}.{minor} is not supported; this pt2c reads schema "
            f"{', '.join(map(str, SUPPORTED_SCHEMA_MAJOR))}.x up to {SCHEMA_VERSION[0]}.{SCHEMA_VERSION[1]} "
            f"(the installed torch's).\nWhat to try: export with a torch this pt2c supports "
            f"({SUPPORTED_TORCH[1][0]}.{SUPPORTED_TORCH[1][1]}), or upgrade pt2c.")


def load_program(src: Any, example_inputs: tuple | None = None) -> tuple[Any, dict[str, Any]]:
    """Return (ExportedProgram, provenance) from a path, an ExportedProgram, or a module + inputs."""
    import torch

    torch_v = check_torch_version()
    from torch._export.serde.schema import SCHEMA_VERSION

    if isinstance(src, (str, os.PathLike)):
        path = Path(src)
        head = read_pt2_header(path)
        check_schema(head["schema_version"], str(path))
        try:
            ep = torch.export.load(path)
        except Exception as e:  # torch raises many types here; all mean "unreadable"
            raise InputError(f"{path}: torch.export.load failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}\n"
                             "What to try: re-export the model with the installed torch.") from None
        prov = {"source": path.name, "exported_with_torch": head["torch_version"],
                "schema_version": "%d.%d" % head["schema_version"]}
    elif isinstance(src, torch.export.ExportedProgram):
        ep = src
        prov = {"source": "<ExportedProgram>", "exported_with_torch": torch_v, "schema_version": "%d.%d" % tuple(SCHEMA_VERSION)}
    elif isinstance(src, torch.nn.Module):
        if example_inputs is None:
            raise InputError("an nn.Module needs example inputs: pt2c.compile(model, example_inputs=(x,), ...)")
        ep = torch.export.export(src.eval(), tuple(example_inputs), strict=False)
        prov = {"source": type(src).__name__, "exported_with_torch": torch_v, "schema_version": "%d.%d" % tuple(SCHEMA_VERSION)}
    else:
        raise InputError(f"cannot compile a {type(src).__name__}: pass a .pt2 path, an ExportedProgram, or an nn.Module with example inputs")
    prov["torch_version"] = torch_v
    return ep, prov


def keep_ops() -> list[Any]:
    """Higher-level ops we keep out of the default decomposition: our kernels beat their pieces."""
    import torch

    aten = torch.ops.aten
    return [aten.scaled_dot_product_attention.default, aten.silu.default, aten.hardswish.default,
            aten.hardsigmoid.default, aten.rms_norm.default, aten.linear.default,
            aten.col2im.default]  # col2im: its decomposition is an index_put with leading None indices


def decompose(ep: Any) -> Any:
    import torch

    table = torch.export.default_decompositions()
    for op in keep_ops():
        table.pop(op, None)
    return ep.run_decompositions(table)
