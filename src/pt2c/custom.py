"""Users' own C kernels for custom ops (``torch.library.custom_op`` and other non-ATen operators).

A custom op ``ns::op`` (overload ``default``) is implemented by one C function, ``ns_op`` (other
overloads: ``ns_op_<overload>``), in one C file with this fixed prototype::

    int ns_op(const pt2c_tensor *out, const pt2c_tensor *in, const pt2c_arg *args,
              void *scratch, size_t scratch_bytes);

``in``: the op's tensor arguments in schema order (a ``Tensor[]`` argument contributes each element,
an absent ``Tensor?`` an entry with ``data == NULL``); ``out``: its tensor results, their sizes and
dtypes taken from the export's metadata, the buffers already allocated; ``args``: its other arguments
(numbers, bools, lists, strings) in schema order, as the export recorded them; ``scratch``: a
64-byte-aligned region of ``scratch_bytes`` bytes (NULL and 0 unless the kernel asks for scratch).
Return 0, or any other value to make the model's run return ``<NAME>_ERR_CUSTOM_OP``.  The types
are in ``pt2c_custom_op.h`` (:func:`header_path`), which the kernel file may ``#include``.

Scratch: ``register_kernel(..., scratch=...)`` takes a number of bytes, a Python function of
``(inputs, outputs, args)``, or an expression string; a kernel file states its own with a comment
line ``pt2c: scratch = <expression>``.  Expressions use ``inputs[i]`` / ``outputs[i]`` (with
``.numel``, ``.nbytes``, ``.itemsize``, ``.ndim`` and ``.shape[d]``), ``args[i]`` (numbers), integer
arithmetic (``+ - * // %``) and ``max`` / ``min``; they are evaluated by pt2c (never ``eval``).

The kernel's source is copied into the artifact (``custom_ops/``) and included in the model's
translation unit after a ``static`` declaration of the prototype: the C compiler checks the
definition against it, and each code path of a multi-versioned artifact gets its own copy of the
kernel, compiled for its instruction set.  So helper functions in a kernel file must be ``static``.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from pt2c.errors import Pt2cError

__all__ = ["KernelError", "KernelSpec", "register_kernel", "unregister_kernel", "load_kernel_dir", "function_name",
           "prototype", "header_path", "resolve_kernels"]

HEADER = "pt2c_custom_op.h"
PARAMS = (("const pt2c_tensor *", "out"), ("const pt2c_tensor *", "in"), ("const pt2c_arg *", "args"),
          ("void *", "scratch"), ("size_t", "scratch_bytes"))
MAX_SOURCE_BYTES = 4 << 20


class KernelError(Pt2cError, ValueError):
    """A user kernel that cannot be used: a missing or wrong prototype, a bad scratch size, a bad name."""


@dataclass(frozen=True)
class KernelSpec:
    """A C implementation of one custom op: the C function (``ns_op``), its source, its scratch size (bytes,
    a function of (inputs, outputs, args), or an expression) and the op's qualified name (``"ns::op"``;
    empty for a file of a --kernels folder until a program's op matches the function name)."""

    function: str
    source: str
    scratch: int | str | Callable[..., int] = 0
    origin: str = "<register_kernel>"  # where the source came from (a file path), for error messages
    qualname: str = ""


def split_qualname(qualname: str) -> tuple[str, str, str]:
    """"ns::op" / "ns::op.overload" / "torch.ops.ns.op.overload" -> (ns, op, overload)."""
    q = qualname.strip()
    if q.startswith("torch.ops."):
        parts = q.split(".")[2:]
        ns, op, overload = (parts + ["default"])[:3] if len(parts) in (2, 3) else ("", "", "")
    else:
        ns, _, rest = q.partition("::")
        op, _, overload = rest.partition(".")
        overload = overload or "default"
    if not all(re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", p or "") for p in (ns, op, overload)):
        raise KernelError(f"'{qualname}' is not an operator name: write it as 'namespace::op' "
                          "(or 'namespace::op.overload')")
    return ns, op, overload


def function_name(qualname: str) -> str:
    """The C function (and file stem) that implements an op: ns_op, or ns_op_<overload>."""
    ns, op, overload = split_qualname(qualname)
    return f"{ns}_{op}" if overload == "default" else f"{ns}_{op}_{overload}"


def canonical(qualname: str) -> str:
    ns, op, overload = split_qualname(qualname)
    return f"{ns}::{op}.{overload}"


def c_prototype(function: str) -> str:
    params = ", ".join(f"{t}{n}" if t.endswith("*") else f"{t} {n}" for t, n in PARAMS)
    return f"int {function}({params})"


def prototype(qualname: str) -> str:
    """The C prototype of the op's kernel."""
    return c_prototype(function_name(qualname))


def header_path() -> Path:
    """pt2c_custom_op.h, the header of the kernel types (also written into every artifact that uses it)."""
    return Path(str(resources.files("pt2c.kernels") / HEADER))


# ------------------------------------------------------------------ the registry

_REGISTRY: dict[str, KernelSpec] = {}


def register_kernel(qualname: str, source: str | None = None, *, path: Any = None,
                    scratch: int | str | Callable[..., int] | None = None) -> KernelSpec:
    """Give pt2c a C implementation of the custom op ``qualname`` for every later compile in this process.

    source: the C text (or path=: a file holding it); scratch: bytes, a function of (inputs, outputs, args)
    returning bytes, or an expression (see the module docstring; default: the file's ``pt2c: scratch =``
    line, else 0).  The prototype is checked now (KernelError with the expected one)."""
    if (source is None) == (path is None):
        raise KernelError("register_kernel takes the C source (source=...) or a file (path=...), not both")
    origin = "<register_kernel>"
    if path is not None:
        source, origin = _read_source(Path(path)), str(path)
    spec = _make_spec(qualname, source, scratch, origin)
    _REGISTRY[canonical(qualname)] = spec
    return spec


def unregister_kernel(qualname: str) -> None:
    _REGISTRY.pop(canonical(qualname), None)


def _read_source(p: Path) -> str:
    try:
        if p.stat().st_size > MAX_SOURCE_BYTES:
            raise KernelError(f"{p}: larger than {MAX_SOURCE_BYTES >> 20} MiB; not a kernel file")
        return p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise KernelError(f"cannot read the kernel file {p}: {e}") from None


def _make_spec(qualname: str, source: str, scratch: Any, origin: str) -> KernelSpec:
    canonical(qualname)  # the name is checked first
    if not isinstance(source, str):
        raise KernelError(f"{origin}: the kernel source must be a str, not {type(source).__name__}")
    check_prototype(source, qualname, origin)
    if scratch is None:
        scratch = _scratch_line(source, origin)
    if isinstance(scratch, str):
        _parse_expr(scratch, origin)
    elif not (callable(scratch) or (type(scratch) is int and scratch >= 0)):
        raise KernelError(f"{origin}: scratch must be bytes (an int >= 0), a function or an expression string")
    return KernelSpec(function_name(qualname), source, scratch, origin, canonical(qualname))


def load_kernel_dir(path: Any) -> list[KernelSpec]:
    """Every kernel file in a folder: one C file per op, its kernel function named after the op (``ns_op``
    implements ``ns::op``); the op it serves is matched when a program calls it."""
    d = Path(path)
    if not d.is_dir():
        raise KernelError(f"--kernels {d}: not a folder (it should hold one C file per custom op)")
    specs = []
    for f in sorted(d.glob("*.c")):
        src = _read_source(f)
        fns = _defined_kernels(src)
        if len(fns) != 1:
            raise KernelError(f"{f}: expected one kernel function with the pt2c prototype, found "
                              f"{len(fns)}{': ' + ', '.join(fns) if fns else ''}.\nExpected (for the op ns::op):\n"
                              f"    {c_prototype('ns_op')}\n(types in {HEADER}; see docs/custom-ops.md)")
        check_prototype(src, "", str(f), fns[0])
        specs.append(KernelSpec(fns[0], src, _scratch_line(src, str(f)), str(f)))
    return specs


def _scratch_line(source: str, origin: str) -> int | str:
    m = re.search(r"pt2c:\s*scratch\s*=\s*([^\n]*?)\s*(?:\*/|$)", source, re.M)
    if not m:
        return 0
    _parse_expr(m.group(1), origin)
    return m.group(1)


def resolve_kernels(kernels: Sequence[Any] | None) -> dict[str, KernelSpec]:
    """The kernels a compile may use, keyed by C function name: the process-wide registry, then the given
    folders (str / Path) and KernelSpec objects (later ones win)."""
    out = {s.function: s for s in _REGISTRY.values()}
    for k in kernels or ():
        if isinstance(k, KernelSpec):
            out[k.function] = k
        elif isinstance(k, (str, Path)):
            out.update({s.function: s for s in load_kernel_dir(k)})
        else:
            raise KernelError(f"kernels: expected folders or pt2c.custom.KernelSpec objects, got {type(k).__name__}")
    return out


def kernel_for(qualname: str, kernels: dict[str, KernelSpec]) -> KernelSpec | None:
    """The kernel of an op, its prototype checked (a folder's file was matched by function name only)."""
    fn = function_name(qualname)
    spec = kernels.get(fn)
    if spec is None:
        return None
    check_prototype(spec.source, qualname, spec.origin)
    return KernelSpec(fn, spec.source, spec.scratch, spec.origin, canonical(qualname))


# ------------------------------------------------------------------ reading the C source (no compiler)

def _strip_c(source: str) -> str:
    """The source with comments, string and character literals blanked (same length)."""
    pat = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)
    return pat.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), source)


_DEF = re.compile(r"\b([A-Za-z_][A-Za-z0-9_]*)\s*\(([^()]*)\)\s*\{")


def _defined_kernels(source: str) -> list[str]:
    """Names of functions defined in source whose first parameter is a pt2c_tensor pointer."""
    return [m.group(1) for m in _DEF.finditer(_strip_c(source)) if "pt2c_tensor" in m.group(2).split(",")[0]]


def _norm_param(p: str) -> str:
    p = re.sub(r"\s+", " ", p.strip())
    p = re.sub(r"\[\s*\]$", "", p) + (" *" if re.search(r"\[\s*\]$", p.strip()) else "")
    p = re.sub(r"\brestrict\b|\b__restrict__\b|\b__restrict\b", "", p)
    p = re.sub(r"\s*\*\s*", " * ", p)
    words = p.split()
    # drop the parameter name (the last identifier, when there is more than the type)
    if len(words) > 1 and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", words[-1]) and words[-1] not in ("size_t", "*"):
        words = words[:-1]
    return " ".join(words).replace(" *", "*").replace("* ", "*")


def check_prototype(source: str, qualname: str, origin: str, fn: str | None = None) -> None:
    """The source defines the op's function (or fn) with the fixed prototype, else KernelError printing it."""
    fn = fn or function_name(qualname)
    want = c_prototype(fn)
    text = _strip_c(source)
    hits = [m for m in _DEF.finditer(text) if m.group(1) == fn]
    where = f"{origin}: kernel " + (f"for {canonical(qualname).replace('.default', '')}" if qualname else fn)
    if not hits:
        raise KernelError(f"{where}: no definition of {fn}(...) found.\nExpected prototype:\n    {want}\n"
                          f"(types in {HEADER}; see docs/custom-ops.md)")
    m = hits[0]
    before = text[:m.start()].rstrip()
    ret = re.search(r"([A-Za-z_][A-Za-z0-9_ ]*)$", before)
    ret_words = [w for w in (ret.group(1).split() if ret else []) if w not in ("static", "inline")]
    params = [_norm_param(p) for p in m.group(2).split(",")] if m.group(2).strip() else []
    expected = [_norm_param(t + " x") for t, _ in PARAMS]
    if ret_words[-1:] != ["int"] or params != expected:
        got = re.sub(r"\s+", " ", f"{' '.join(ret_words)} {fn}({m.group(2).strip()})").strip()
        raise KernelError(f"{where}: {fn} has the wrong prototype:\n    {got}\nExpected prototype:\n    {want}\n"
                          f"(types in {HEADER}; see docs/custom-ops.md)")


# ------------------------------------------------------------------ scratch sizes

@dataclass(frozen=True)
class TensorInfo:
    """What a scratch function or expression sees of a tensor."""

    shape: tuple[int, ...]
    dtype: str
    itemsize: int

    @property
    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    @property
    def nbytes(self) -> int:
        return self.numel * self.itemsize

    @property
    def ndim(self) -> int:
        return len(self.shape)


_ATTRS = ("numel", "nbytes", "itemsize", "ndim", "shape")
_BINOPS = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
           ast.FloorDiv: lambda a, b: a // b, ast.Mod: lambda a, b: a % b}


def _parse_expr(expr: str, origin: str) -> ast.Expression:
    try:
        tree = ast.parse(expr.strip(), mode="eval")
    except SyntaxError:
        raise KernelError(f"{origin}: scratch expression {expr!r} does not parse") from None
    for n in ast.walk(tree):
        ok = isinstance(n, (ast.Expression, ast.BinOp, ast.Constant, ast.Name, ast.Attribute, ast.Subscript,
                            ast.Call, ast.Load, ast.UnaryOp, ast.USub)) or type(n) in _BINOPS
        if isinstance(n, ast.Constant):
            ok = type(n.value) is int
        elif isinstance(n, ast.Name):
            ok = n.id in ("inputs", "outputs", "args", "max", "min")
        elif isinstance(n, ast.Attribute):
            ok = n.attr in _ATTRS
        elif isinstance(n, ast.Call):
            ok = isinstance(n.func, ast.Name) and n.func.id in ("max", "min") and not n.keywords
        if not ok:
            raise KernelError(f"{origin}: scratch expression {expr!r}: '{ast.unparse(n)}' is not allowed (use "
                              "inputs[i] / outputs[i] .numel .nbytes .itemsize .ndim .shape[d], args[i], integers, "
                              "+ - * // %, max, min)")
    return tree


def _eval(n: ast.AST, env: dict[str, Any]) -> Any:
    if isinstance(n, ast.Expression):
        return _eval(n.body, env)
    if isinstance(n, ast.Constant):
        return n.value
    if isinstance(n, ast.Name):
        return env[n.id]
    if isinstance(n, ast.Attribute):
        return getattr(_eval(n.value, env), n.attr)
    if isinstance(n, ast.Subscript):
        return _eval(n.value, env)[_eval(n.slice, env)]
    if isinstance(n, ast.UnaryOp):
        return -_eval(n.operand, env)
    if isinstance(n, ast.BinOp):
        return _BINOPS[type(n.op)](_eval(n.left, env), _eval(n.right, env))
    if isinstance(n, ast.Call):
        return env[n.func.id](*(_eval(a, env) for a in n.args))  # type: ignore[attr-defined]
    raise KernelError(f"scratch expression: unexpected {type(n).__name__}")


def scratch_bytes(spec: KernelSpec, inputs: list[TensorInfo], outputs: list[TensorInfo], args: list[Any]) -> int:
    """The scratch bytes a kernel asks for at these sizes (KernelError unless a non-negative int)."""
    s = spec.scratch
    try:
        if isinstance(s, str):
            env = {"inputs": inputs, "outputs": outputs, "args": args, "max": max, "min": min}
            n = _eval(_parse_expr(s, spec.origin), env)
        elif callable(s):
            n = s(inputs, outputs, args)
        else:
            n = s
    except KernelError:
        raise
    except Exception as e:
        raise KernelError(f"{spec.origin}: the scratch size of {spec.qualname} failed: {type(e).__name__}: {e}") from None
    if type(n) is not int or n < 0 or n > 1 << 40:
        raise KernelError(f"{spec.origin}: the scratch size of {spec.qualname} is {n!r}, not a number of bytes")
    return n
