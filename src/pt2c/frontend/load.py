"""Getting an ExportedProgram: from memory, from a .pt2 file, or from a module + inputs.
Version checks happen here, before anything else reads the program."""

from __future__ import annotations

import os
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
    from pt2c.frontend.archive import Archive

    with Archive(Path(path)) as arc:
        head = arc.header()
    return {"schema_version": head["schema_version"], "torch_version": head["torch_version"]}


def check_schema(schema: tuple[int, int], where: str) -> None:
    from torch._export.serde.schema import SCHEMA_VERSION

    major, minor = schema
    if major not in SUPPORTED_SCHEMA_MAJOR or (major, minor) > tuple(SCHEMA_VERSION):
        raise InputError(
            f"{where}: export schema {major}.{minor} is not supported; this pt2c reads schema "
            f"{', '.join(map(str, SUPPORTED_SCHEMA_MAJOR))}.x up to {SCHEMA_VERSION[0]}.{SCHEMA_VERSION[1]} "
            f"(the installed torch's).\nWhat to try: export with a torch this pt2c supports "
            f"({SUPPORTED_TORCH[1][0]}.{SUPPORTED_TORCH[1][1]}), or upgrade pt2c.")


def load_program(src: Any, example_inputs: tuple | None = None, sample_inputs: bool = False,
                 example_kwargs: dict | None = None) -> tuple[Any, dict[str, Any]]:
    """Return (ExportedProgram, provenance) from a path, an ExportedProgram, or a module + inputs.

    sample_inputs: also read a .pt2's sample inputs into ``ep.example_inputs`` (pt2c verify)."""
    import torch

    torch_v = check_torch_version()
    from torch._export.serde.schema import SCHEMA_VERSION

    if isinstance(src, (str, os.PathLike)):
        import torch.ao.quantization.fx._decomposed  # noqa: F401  (defines quantized_decomposed::*: PT2E programs)

        from pt2c.frontend.archive import Archive

        path = Path(src)
        with Archive(path) as arc:  # never torch.export.load: it unpickles and evaluates archive contents
            head = arc.header()
            check_schema(head["schema_version"], str(path))
            ep = arc.exported_program(head, sample_inputs=sample_inputs)
        prov = {"source": path.name, "exported_with_torch": head["torch_version"],
                "schema_version": "%d.%d" % head["schema_version"]}
    elif isinstance(src, torch.export.ExportedProgram):
        ep = src
        prov = {"source": "<ExportedProgram>", "exported_with_torch": torch_v, "schema_version": "%d.%d" % tuple(SCHEMA_VERSION)}
    elif isinstance(src, torch.nn.Module):
        if example_inputs is None:
            raise InputError("an nn.Module needs example inputs: pt2c.compile(model, example_inputs=(x,), ...)")
        ep = torch.export.export(src.eval(), tuple(example_inputs), dict(example_kwargs or {}), strict=False)
        prov = {"source": type(src).__name__, "exported_with_torch": torch_v, "schema_version": "%d.%d" % tuple(SCHEMA_VERSION)}
    else:
        raise InputError(f"cannot compile a {type(src).__name__}: pass a .pt2 path, an ExportedProgram, or an nn.Module with example inputs")
    prov["torch_version"] = torch_v
    check_dtypes(ep)
    prov["specialized"] = specialized_dims(ep)
    return ep, prov


def specialized_dims(ep: Any) -> list[dict[str, Any]]:
    """The user inputs' dims the export declared dynamic (a SymInt in the placeholder's example value), each with
    its symbol, the range the export allows and the example's size, which pt2c compiles."""
    import torch

    ranges = {str(k): v for k, v in (getattr(ep, "range_constraints", None) or {}).items()}
    user = {s.arg.name for s in ep.graph_signature.input_specs if s.kind.name == "USER_INPUT"}
    out = []
    for node in ep.graph.nodes:
        val = node.meta.get("val") if node.op == "placeholder" and node.name in user else None
        if not isinstance(val, torch.Tensor):
            continue
        for d, n in enumerate(val.shape):
            if isinstance(n, torch.SymInt):
                sym = str(n.node.expr)
                if sym not in ranges and len(ranges) == 1:  # (a .pt2 read back may carry the size, not the symbol)
                    sym = next(iter(ranges))
                r = ranges.get(sym)
                lo, hi = (r.lower, r.upper) if r is not None else ("?", "?")
                out.append({"input": node.name, "dim": d, "symbol": sym, "min": str(lo), "max": str(hi),
                            "size": int(n.node.hint) if n.node.hint is not None else None})
    return out


def size_value(d: Any) -> int:
    """A size's value at the example, without guarding on it (int() of a SymInt would make it static)."""
    import sympy
    import torch

    if not isinstance(d, torch.SymInt):
        return int(d)
    env = d.node.shape_env
    vals = getattr(env, "backed_var_to_val", None) or env.var_to_val
    val = d.node.expr.xreplace({k: v for k, v in vals.items() if k.is_Symbol})
    if not isinstance(val, sympy.Integer) or (d.node.hint is not None and int(val) != int(d.node.hint)):
        raise ValueError(f"the size {d.node.expr} is {val} at the example, and its hint says {d.node.hint}")
    return int(val)


def check_dtypes(ep: Any) -> None:
    """One clear error listing every input, weight and node whose dtype pt2c does not compute
    (float16, bfloat16, complex, float8, ...), before anything is lowered or run; and an InputError
    for sizes that do not evaluate to integers (a .pt2 whose shape expressions contradict their hints)."""
    import torch

    from pt2c.errors import UnsupportedDtypeError
    from pt2c.frontend.archive import quiet_torch
    from pt2c.frontend.lower import origin_of
    from pt2c.ir import DTYPES

    sig = {s.arg.name: s for s in ep.graph_signature.input_specs if hasattr(s.arg, "name")}
    problems: list[tuple[str, str]] = []
    for node in ep.graph.nodes:
        if node.op not in ("placeholder", "call_function"):
            continue
        val = node.meta.get("val")
        vals = val if isinstance(val, (list, tuple)) else [val]
        for v in vals:
            if isinstance(v, torch.Tensor):
                with quiet_torch():
                    try:
                        [size_value(d) for d in v.shape]
                    except Exception as e:  # torch's symbolic shapes: AssertionError, RuntimeError, ...
                        raise InputError(f"node '{node.name}': its size does not evaluate to integers "
                                         f"({type(e).__name__}); the program's shape expressions "
                                         "contradict their hints.\nWhat to try: re-export the model.") from None
        bad = sorted({str(v.dtype).replace("torch.", "") for v in vals if isinstance(v, torch.Tensor)} - set(DTYPES))
        if not bad:
            continue
        if node.op == "placeholder":
            spec = sig.get(node.name)
            kind = spec.kind.name.lower().replace("_", " ") if spec is not None else "input"
            target = getattr(spec, "target", None) or node.name
            where = f"{'input' if kind == 'user input' else kind} '{target}'"
        else:
            where = origin_of(node).describe()
        problems.append((", ".join(bad), where))
    if problems:
        raise UnsupportedDtypeError(problems)


def keep_ops() -> list[Any]:
    """Higher-level ops we keep out of the default decomposition: our kernels beat their pieces."""
    import torch

    aten = torch.ops.aten
    return [aten.scaled_dot_product_attention.default, aten.silu.default, aten.hardswish.default,
            aten.hardsigmoid.default, aten.rms_norm.default, aten.linear.default,
            aten.col2im.default]  # col2im: its decomposition is an index_put with leading None indices


def python_decomposition(qualname: str) -> tuple[Any, Any]:
    """(op overload, its Python decomposition) for ``--decompose ns::op``: a decomposition registered with
    torch._decomp, else a torch.library.custom_op's own Python implementation (traced into ATen ops)."""
    import torch
    import torch._library.custom_ops as custom_ops

    from pt2c.custom import split_qualname

    ns, name, overload = split_qualname(qualname)
    try:
        op = getattr(getattr(getattr(torch.ops, ns), name), overload)
    except (AttributeError, RuntimeError):
        raise InputError(f"--decompose {qualname}: no such operator in this process (import the library that "
                         "defines it)") from None
    fn = torch._decomp.decomposition_table.get(op)
    opdef = custom_ops.OPDEFS.get(f"{ns}::{name}")
    if fn is None and opdef is not None and overload == "default":
        fn = opdef._init_fn
    if fn is None:
        raise InputError(f"--decompose {qualname}: the operator has no Python decomposition or implementation "
                         "pt2c can trace (torch.library.custom_op functions and torch._decomp registrations "
                         "can be); give it a C kernel instead (docs/custom-ops.md)")
    return op, fn


def decompose(ep: Any, decompose_ops: Any = ()) -> Any:
    import torch

    from pt2c.frontend.archive import quiet_torch

    table = torch.export.default_decompositions()
    for op in keep_ops():
        table.pop(op, None)
    for q in decompose_ops:
        op, fn = python_decomposition(q)
        table[op] = fn
    with quiet_torch():
        try:
            return ep.run_decompositions(table)
        except Exception as e:  # torch's own failure: summarised, never its traceback
            msg = str(e).strip().splitlines()[0][:300] if str(e).strip() else ""
            raise InputError(f"torch could not decompose the program to core ATen ops: {type(e).__name__}: {msg}"
                             "\nWhat to try: check that the program runs in eager (ep.module()(*inputs)), or "
                             "re-export it with the installed torch.") from None
