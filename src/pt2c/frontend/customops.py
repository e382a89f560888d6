"""Custom ops of a .pt2 that are not registered in this process, declared from the archive itself.

A program that calls ``mylib::op`` records, for every call, the arguments by name and kind
(``as_tensor``, ``as_float`` ...) and the size and dtype of every tensor.  That is enough to declare
the operator (``torch.library``: a schema built from those kinds, never text from the file) with a
fake implementation that answers, for the argument sizes and values the program recorded, the result
sizes and dtypes it recorded.  torch's deserializer and decompositions then work as if the op's
library were imported; the compiler lowers the op to the user's C kernel (pt2c/custom.py).  Running
the op for real (eager PyTorch, ``pt2c verify``) needs its actual implementation: import the library.
"""

from __future__ import annotations

import re
from typing import Any

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# serialized argument kind -> schema type
_ARG_TYPES = {"as_tensor": "Tensor", "as_tensors": "Tensor[]", "as_optional_tensors": "Tensor?[]", "as_int": "int",
              "as_ints": "int[]", "as_float": "float", "as_floats": "float[]", "as_bool": "bool",
              "as_bools": "bool[]", "as_string": "str", "as_strings": "str[]", "as_none": "Tensor?"}

# qualname "ns::op.overload" -> (torch.library.Library, schema, {key: [(sizes, dtype), ...]}) of ops pt2c declared
_DECLARED: dict[str, tuple[Any, str, dict[Any, list[tuple[tuple[int, ...], Any]]]]] = {}


class _Undeclarable(Exception):
    pass


def _tensor_meta(name: Any, values: dict[str, Any]) -> tuple[tuple[int, ...], Any]:
    from torch._export.serde.schema import ScalarType
    from torch._export.serde.serialize import _SERIALIZE_TO_TORCH_DTYPE

    meta = values.get(name) if isinstance(name, str) else None
    if not isinstance(meta, dict):
        raise _Undeclarable("a tensor without recorded metadata")
    sizes = []
    for s in meta.get("sizes", []):
        if not (isinstance(s, dict) and type(s.get("as_int")) is int and s["as_int"] >= 0):
            raise _Undeclarable("a tensor with a symbolic size")
        sizes.append(s["as_int"])
    try:
        dtype = _SERIALIZE_TO_TORCH_DTYPE[ScalarType(meta.get("dtype"))]
    except (ValueError, KeyError, TypeError):
        raise _Undeclarable("a tensor of an unknown dtype") from None
    return tuple(sizes), dtype


def _plain(kind: str, v: Any) -> Any:
    """A serialized non-tensor argument as the Python value the fake implementation will see."""
    if kind == "as_none":
        return None
    if kind in ("as_int", "as_float", "as_bool", "as_string"):
        if type(v) not in {"as_int": (int,), "as_float": (int, float), "as_bool": (bool,), "as_string": (str,)}[kind]:
            raise _Undeclarable(f"a malformed {kind} argument")
        return float(v) if kind == "as_float" else v
    if kind in ("as_ints", "as_floats", "as_bools", "as_strings") and isinstance(v, list):
        return tuple(float(x) if kind == "as_floats" else x for x in v)
    raise _Undeclarable(f"an argument of kind {kind}")


def _key(tensors: list[Any], values: list[Any]) -> tuple:
    return (tuple(tensors), tuple(values))


def _signature(node: dict[str, Any], tvals: dict[str, Any]) -> tuple[list[tuple[str, str, bool]], list[str], tuple, list]:
    """(arguments (name, type, keyword-only), return types, fake-table key, recorded results) of one call."""
    args: list[tuple[str, str, bool]] = []
    tensors: list[Any] = []
    values: list[Any] = []
    for inp in node.get("inputs") or []:
        if not isinstance(inp, dict) or not isinstance(inp.get("arg"), dict) or len(inp["arg"]) != 1:
            raise _Undeclarable("a malformed argument")
        name = inp.get("name")
        if not (isinstance(name, str) and _IDENT.fullmatch(name) and len(name) <= 64):
            raise _Undeclarable("an argument name that is not an identifier")
        (kind, v), = inp["arg"].items()
        if kind not in _ARG_TYPES:
            raise _Undeclarable(f"argument '{name}' of kind {kind}")
        args.append((name, _ARG_TYPES[kind], inp.get("kind") == 2))
        if kind == "as_tensor":
            tensors.append(_tensor_meta(v.get("name") if isinstance(v, dict) else None, tvals))
        elif kind in ("as_tensors", "as_optional_tensors"):
            if not isinstance(v, list):
                raise _Undeclarable(f"a malformed {kind} argument")
            for t in v:
                t = t.get("as_tensor", t) if isinstance(t, dict) else t
                tensors.append(_tensor_meta(t.get("name") if isinstance(t, dict) else None, tvals)
                               if isinstance(t, dict) and "name" in t else None)
        else:
            values.append(_plain(kind, v))
    rets: list[str] = []
    results: list[Any] = []
    for out in node.get("outputs") or []:
        if isinstance(out, dict) and isinstance(out.get("as_tensor"), dict):
            rets.append("Tensor")
            results.append(_tensor_meta(out["as_tensor"].get("name"), tvals))
        elif isinstance(out, dict) and isinstance(out.get("as_tensors"), list):
            rets.append("Tensor[]")
            results.append([_tensor_meta(t.get("name") if isinstance(t, dict) else None, tvals)
                            for t in out["as_tensors"]])
        else:
            raise _Undeclarable("a result that is not a tensor")
    if not rets:
        raise _Undeclarable("no results")
    return args, rets, _key(tensors, values), results


def _schema(op: str, overload: str, args: list[tuple[str, str, bool]], rets: list[str]) -> str:
    pos = [f"{t} {n}" for n, t, kw in args if not kw]
    kws = [f"{t} {n}" for n, t, kw in args if kw]
    params = ", ".join(pos + (["*"] + kws if kws else []))
    ret = rets[0] if len(rets) == 1 else "(" + ", ".join(rets) + ")"
    name = op if overload == "default" else f"{op}.{overload}"
    return f"{name}({params}) -> {ret}"


def _fake(qualname: str, table: dict[Any, Any]) -> Any:
    import torch

    def fake(*args: Any, **kwargs: Any) -> Any:
        tensors: list[Any] = []
        values: list[Any] = []
        for a in list(args) + list(kwargs.values()):
            if isinstance(a, torch.Tensor):
                tensors.append((tuple(int(s) for s in a.shape), a.dtype))
            elif isinstance(a, (list, tuple)) and a and all(isinstance(t, torch.Tensor) or t is None for t in a):
                tensors.extend((tuple(int(s) for s in t.shape), t.dtype) if t is not None else None for t in a)
            else:
                values.append(tuple(a) if isinstance(a, list) else a)
        key = _key(tensors, values)
        if key not in table:
            raise RuntimeError(f"{qualname}: called with sizes or arguments the .pt2 did not record")
        dev = next((a.device for a in args if isinstance(a, torch.Tensor)), None)

        def make(r: Any) -> Any:
            return [make(x) for x in r] if isinstance(r, list) else torch.empty(r[0], dtype=r[1], device=dev)

        res = [make(r) for r in table[key]]
        return res[0] if len(res) == 1 else tuple(res)

    return fake


def declare_missing(calls: dict[str, list[dict[str, Any]]], tvals: dict[str, Any]) -> list[tuple[str, str, str]]:
    """Declare each custom op the program calls that this process lacks (target "torch.ops.ns.op.overload"
    -> its serialized nodes).  Returns (target, where, why) for the ops that cannot be declared."""
    import torch

    problems: list[tuple[str, str, str]] = []
    for target, nodes in calls.items():
        _, _, ns, op, overload = (target.split(".") + ["default"])[:5]
        qual = f"{ns}::{op}.{overload}"
        where = f"node '{str(nodes[0].get('name'))[:80]}'"
        try:
            sigs = [_signature(n, tvals) for n in nodes]
            schemas = {_schema(op, overload, a, r) for a, r, _, _ in sigs}
            if len(schemas) != 1:
                raise _Undeclarable("its calls disagree on the argument kinds")
            schema = schemas.pop()
            if qual in _DECLARED:
                lib, had, table = _DECLARED[qual]
                if had != schema:
                    raise _Undeclarable(f"an earlier program declared it as {ns}::{had}")
            else:
                lib = torch.library.Library(ns, "FRAGMENT")
                lib.define(schema)
                table = {}
                torch.library.register_fake(f"{ns}::{op}" + ("" if overload == "default" else f".{overload}"),
                                            _fake(qual, table), lib=lib)
                _DECLARED[qual] = (lib, schema, table)
            for _, _, key, results in sigs:
                if table.setdefault(key, results) != results:
                    raise _Undeclarable("two calls with the same arguments record different result sizes")
        except _Undeclarable as e:
            problems.append((target, where, f"operator not registered in this process, and pt2c cannot declare it "
                                            f"from the archive ({e}); import the library that defines it"))
        except RuntimeError as e:  # torch refused the schema
            problems.append((target, where, f"operator not registered in this process, and its recorded schema "
                                            f"is not valid ({str(e).splitlines()[0][:160]})"))
    return problems


def declared_ops() -> list[str]:
    """The ops pt2c declared in this process ("ns::op.overload")."""
    return sorted(_DECLARED)
