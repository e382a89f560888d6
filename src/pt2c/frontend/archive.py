"""Reading a ``.pt2`` archive without running anything that is in it.

A ``.pt2`` is untrusted input: people compile files they did not write.  ``torch.export.load``
unpickles several members (weights or constants flagged as pickled, the sample inputs, custom
objects), runs ``sympy.sympify`` (an ``eval``) on shape expressions, resolves node targets by
walking attributes of ``torch`` (``torch.os.system`` is a valid walk) and, in ``ep.module()``,
``exec``s the archive's guard code.  So pt2c reads the archive itself:

- the file must be a regular file (no FIFO, device or symlink to one), opened without blocking;
- every member is checked against caps (count, size, compression ratio) before it is read, and
  a member is read at most to its declared size, so memory is bounded by the tensor bytes the
  archive declares (plus capped JSON);
- JSON members are parsed with ``json``; tensor members are raw bytes turned into tensors with
  ``torch.frombuffer`` from the dtype / sizes / strides in the JSON, every extent checked;
- nothing is unpickled: a weight or constant flagged ``use_pickle``, a custom or opaque object,
  or a legacy pickled state dict is refused with an error naming the member;
- before torch's deserializer sees ``model.json``, every node target must be a registered
  operator (``torch.ops.<ns>.<op>.<overload>``) or one of a few pure Python functions, every
  shape expression must consist of symbols, integers, operators and an allow-list of sympy
  function names, and the guard code is dropped (pt2c checks shapes itself);
- the sample inputs (only for ``pt2c verify``) are a pickle stream; they are read by a small
  interpreter over ``pickletools.genops`` (which only parses) that understands tuples, lists,
  dicts, numbers, strings and tensors rebuilt from raw storages, and refuses everything else.
"""

from __future__ import annotations

import io
import json
import keyword
import logging
import math
import os
import pickletools
import re
import stat
import warnings
import zipfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from pt2c.errors import InputError, UnsupportedError

# caps on what an archive may declare (a 1B-parameter float32 model is 4 GiB of tensors)
MAX_MEMBERS = 200_000
MAX_JSON_BYTES = 1 << 30  # model.json of the largest transformers models is tens of MiB
MAX_RATIO = 100  # uncompressed / compressed size of a deflated member (torch stores members uncompressed)
MAX_EXPR_CHARS = 4096
MAX_SAMPLE_INPUT_BYTES = 1 << 30

WEIGHTS_DIR = "data/weights/"
CONSTANTS_DIR = "data/constants/"
MODEL_JSON = "models/{}.json"
WEIGHTS_CONFIG = "data/weights/{}_weights_config.json"
CONSTANTS_CONFIG = "data/constants/{}_constants_config.json"
SAMPLE_INPUTS = "data/sample_inputs/{}.pt"

# Python functions an exported graph may call besides registered operators (symbolic sizes).
PY_TARGETS = {f"_operator.{f}" for f in (
    "getitem", "add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "neg", "pos", "abs",
    "eq", "ne", "lt", "le", "gt", "ge", "and_", "or_", "xor", "not_", "invert", "lshift", "rshift")} | {
    f"math.{f}" for f in ("ceil", "floor", "sqrt", "trunc")} | {
    f"torch.{f}" for f in ("sym_float", "sym_int", "sym_max", "sym_min", "sym_not", "sym_ite", "sym_sqrt",
                           "_sym_sqrt", "sym_sum", "sym_fresh_size")}

# Higher-order operators a program may call (the rest, e.g. ones that launch kernels or delegates,
# are refused).
HIGHER_ORDER = {"cond", "while_loop", "map_impl", "scan", "associative_scan", "invoke_subgraph",
                "wrap_with_set_grad_enabled", "wrap_with_autocast", "auto_functionalized", "auto_functionalized_v2",
                "with_effects", "flex_attention", "out_dtype"}
# Operators that read the compiling machine's files.
DENIED_OPS = {"from_file"}
_CONTROL = re.compile(r"[\x00-\x09\x0b-\x1f\x7f\u2028\u2029\x85]")  # all but \n

# Names a shape expression may use (what str() of torch's sympy expressions contains).
EXPR_FUNCTIONS = {
    "FloorDiv", "ModularIndexing", "Where", "PythonMod", "Mod", "CleanDiv", "CeilToInt", "FloorToInt",
    "CeilDiv", "LShift", "RShift", "PowByNatural", "FloatPow", "FloatTrueDiv", "IntTrueDiv",
    "IsNonOverlappingAndDenseIndicator", "TruncToFloat", "TruncToInt", "RoundToInt", "RoundDecimal",
    "ToFloat", "Identity", "Max", "Min", "Abs", "floor", "ceiling", "Eq", "Ne", "Lt", "Le", "Gt", "Ge",
    "And", "Or", "Not", "True", "False", "oo", "Piecewise", "ITE", "sqrt",
    # sympy.srepr, which torch's serializer writes: Add(Symbol('s77', positive=True, integer=True), Integer(2))
    "Symbol", "Integer", "Rational", "Float", "Add", "Mul", "Pow", "StrictLessThan", "LessThan",
    "StrictGreaterThan", "GreaterThan", "Equality", "Unequality", "true", "false", "int_oo", "nan", "zoo",
}
# keyword arguments in srepr (Symbol's assumptions: =True / =False; Float's precision=53)
EXPR_KEYWORDS = {"positive", "negative", "nonnegative", "nonpositive", "nonzero", "zero", "integer", "real",
                 "finite", "infinite", "rational", "even", "odd", "commutative", "extended_real",
                 "extended_positive", "extended_negative", "extended_nonnegative", "extended_nonpositive",
                 "precision"}
_EXPR_TOKEN = re.compile(r"\s+|(?P<num>\d+(?:\.\d+)?(?:e[+-]?\d+)?)|(?P<name>[A-Za-z_][A-Za-z0-9_]*)"
                         r"|(?P<str>'[^'\\\n]{0,64}')"
                         r"|(?P<op>\*\*|//|==|!=|<=|>=|[-+*/%(),<>&|~=])")
_SYMBOL = re.compile(r"[a-z]{1,4}\d{1,9}")  # s0, u12, ps3, zuf0 ...
_EXPONENT = re.compile(r"e([-+]?\d+)")
# a quoted string: a symbol name (Symbol('s0')) or a decimal number (Float('1.5')); sympy functions
# sympify string arguments, so nothing else may be quoted
_QUOTED = re.compile(r"'(?:[a-z]{1,4}\d{1,9}|[-+]?(?:\d+(?:\.\d*)?(?:e[-+]?\d+)?|inf|nan))'")


def _corrupt(path: Any, what: str) -> InputError:
    return InputError(f"{path}: corrupt or malformed .pt2 archive ({what}).\n"
                      "What to try: re-export the model with torch.export.save.")


def _refused(path: Any, member: str, why: str) -> InputError:
    return InputError(f"{path}: member '{member}' {why}; pt2c never unpickles or runs anything from a .pt2.\n"
                      "What to try: re-export with torch.export.save from plain tensors (no tensor subclasses, "
                      "custom objects or pickled payloads).")


def check_expr(expr: str, where: str) -> None:
    """Refuse a shape expression that is more than symbols, numbers and allowed functions (it reaches
    sympy.sympify, which evaluates its argument as Python)."""
    if not isinstance(expr, str) or len(expr) > MAX_EXPR_CHARS:
        raise InputError(f"{where}: shape expression is not a string of at most {MAX_EXPR_CHARS} characters")
    tokens: list[tuple[str, str]] = []
    pos = 0
    while pos < len(expr):
        m = _EXPR_TOKEN.match(expr, pos)
        if not m:
            raise InputError(f"{where}: shape expression {expr[:80]!r} contains {expr[pos]!r}; refused "
                             "(only symbols, integers, operators and sympy function names are allowed)")
        pos = m.end()
        if m.lastgroup:
            tokens.append((m.lastgroup, m.group(m.lastgroup)))

    def refuse(why: str) -> InputError:
        return InputError(f"{where}: shape expression {expr[:80]!r} {why}; refused")

    def text_at(j: int) -> str:
        return tokens[j][1] if 0 <= j < len(tokens) else ""

    def group(j: int, step: int) -> int:
        """Index of the parenthesis matching the one at j (step 1: j is '(', -1: j is ')')."""
        depth = 0
        while 0 <= j < len(tokens):
            depth += {"(": 1, ")": -1}.get(text_at(j), 0) * step
            if depth == 0:
                return j
            j += step
        raise refuse("has unbalanced parentheses")

    def has_power(lo: int, hi: int) -> bool:
        return any(text_at(j) in ("**", "Pow") for j in range(lo, hi + 1))

    def small_int(j: int) -> int:
        """Index after a literal integer of at most 64 (optionally negative, optionally Integer(...)) at j, or -1."""
        wrapped = text_at(j) == "Integer" and text_at(j + 1) == "("
        j += 2 if wrapped else 0
        j += text_at(j) == "-"
        if not (tokens[j:j + 1] and tokens[j][0] == "num" and text_at(j).isdigit() and int(text_at(j)) <= 64):
            return -1
        return j + 1 + wrapped if not wrapped or text_at(j + 1) == ")" else -1

    for i, (kind, text) in enumerate(tokens):
        if kind == "name" and text not in EXPR_FUNCTIONS and not _SYMBOL.fullmatch(text) and not (
                text in EXPR_KEYWORDS and text_at(i + 1) == "="):
            raise refuse(f"uses the name {text!r} (only size symbols such as s0 and sympy function names are "
                         "allowed)")
        if kind in ("num", "str") and (len(text.strip("'")) > 24
                                       or abs(int(_EXPONENT.search(text + "e0").group(1))) > 400):
            raise refuse("has a number too long or too large (floor(1e999999) would not finish)")
        if kind == "str" and not (_QUOTED.fullmatch(text) and text_at(i - 2) in ("Symbol", "Float")
                                  and text_at(i - 1) == "(" and text_at(i + 1) in (",", ")")):
            raise refuse(f"quotes {text[:40]!r} (only Symbol('s0') and Float('1.5') may quote)")
        if text == "=":  # keyword=True / False; precision=<bits> (a huge precision would not finish)
            nxt = text_at(i + 1)
            ok = (nxt.isdigit() and int(nxt) <= 1024) if text_at(i - 1) == "precision" else nxt in ("True", "False")
            if tokens[i - 1:i] == [] or tokens[i - 1][1] not in EXPR_KEYWORDS or not ok:
                raise refuse("has a keyword argument that is not an assumption (=True / =False) or a small precision")
        # x ** k and Pow(x, k): k a small literal, x without a power in it ((9**64)**64)**64 would not finish)
        if text == "**":
            nxt = tokens[i + 1] if i + 1 < len(tokens) else ("", "")
            if nxt[0] != "num" or not nxt[1].isdigit() or int(nxt[1]) > 64 or text_at(i + 2) == "**":
                raise refuse("'**' must be followed by a small integer")
            if text_at(i - 1) == ")" and has_power(group(i - 1, -1), i - 1):
                raise refuse("raises a power to a power")
        if text == "Pow":
            if text_at(i + 1) != "(":
                raise refuse("uses Pow without arguments")
            end = group(i + 1, 1)
            depth, comma = 0, -1
            for j in range(i + 2, end):
                depth += {"(": 1, ")": -1}.get(text_at(j), 0)
                if depth == 0 and text_at(j) == ",":
                    comma = j
                    break
            exp_end = small_int(comma + 1) if comma > 0 else -1
            if text_at(comma + 1) == "Rational" and text_at(comma + 2) == "(":  # Rational(1, 2): a root
                k = small_int(comma + 3)
                exp_end = small_int(k + 1) + 1 if k > 0 and text_at(k) == "," and small_int(k + 1) > 0 \
                    and text_at(small_int(k + 1)) == ")" else -1
            if comma < 0 or exp_end != end or has_power(i + 2, comma):
                raise refuse("uses Pow with an exponent that is not a small integer or ratio, or on a power")


def _identifier(path: Any, name: Any, what: str) -> None:
    """torch pastes these names into Python source it exec()s: only identifiers pass."""
    if not (isinstance(name, str) and name.isidentifier() and name.isascii() and not keyword.iskeyword(name)):
        raise InputError(f"{path}: {what} {str(name)[:80]!r} is not a Python identifier; refused")


def _kwarg_names(path: Any, spec: str) -> list[Any]:
    """Keyword-argument names in a serialized input tree spec (``[version, {type, context, children_spec}]``)."""
    try:
        tree = json.loads(spec)
        root = tree[1] if isinstance(tree, list) and len(tree) == 2 else tree
        kids = root.get("children_spec") or []
        if root.get("type") != "builtins.tuple" or len(kids) != 2 or kids[1].get("type") != "builtins.dict":
            return []
        names = json.loads(kids[1].get("context") or "[]")
    except (ValueError, TypeError, AttributeError, IndexError, RecursionError):
        raise _corrupt(path, "the input tree spec is malformed") from None
    return names if isinstance(names, list) else [names]


class Archive:
    """An open ``.pt2``: the zip's members under its root folder, checked before anything is read."""

    def __init__(self, path: Path):
        self.path = path
        try:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
        except FileNotFoundError:
            raise InputError(f"{path}: no such file.\nWhat to try: check the path; write one with "
                             f"torch.export.save(ep, '{path.name}').") from None
        except OSError as e:
            raise InputError(f"{path}: cannot open ({e.strerror}).") from None
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            kind = ("a folder" if stat.S_ISDIR(st.st_mode) else "a FIFO" if stat.S_ISFIFO(st.st_mode)
                    else "a device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode) else "not a regular file")
            raise InputError(f"{path} is {kind}, not a .pt2 file; pt2c reads only regular files.")
        os.set_blocking(fd, True)
        self.size = st.st_size
        self.file = os.fdopen(fd, "rb")
        try:
            self.zip = zipfile.ZipFile(self.file)
        except zipfile.BadZipFile:
            self.file.close()
            raise InputError(f"{path}: not a .pt2 archive (not a zip file; is it truncated or a different format?).\n"
                             "What to try: re-export with torch.export.save(ep, path).") from None
        except (OSError, ValueError, EOFError, OverflowError, NotImplementedError) as e:
            self.file.close()
            raise _corrupt(path, f"{type(e).__name__}: {e}") from None
        infos = self.zip.infolist()
        if len(infos) > MAX_MEMBERS:
            self.close()
            raise InputError(f"{path}: {len(infos)} members; pt2c reads archives of at most {MAX_MEMBERS}")
        models = [i.filename for i in infos if re.fullmatch(r"[^/]*/?models/[^/]+\.json", i.filename)]
        if not models:
            self.close()
            raise InputError(f"{path}: no serialized ExportedProgram (models/model.json) in the archive.\n"
                             "What to try: write it with torch.export.save (AOTInductor packages are not accepted).")
        first = next((m for m in models if m.endswith("models/model.json")), models[0])
        self.root = first[:-len(first.split("/", 1)[-1])] if first.count("/") > 1 else ""
        self.model = first[len(self.root) + len("models/"):-len(".json")]
        self.members = {i.filename[len(self.root):]: i for i in infos if i.filename.startswith(self.root)}

    def close(self) -> None:
        self.zip.close()
        self.file.close()

    def __enter__(self) -> Archive:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def has(self, name: str) -> bool:
        return name in self.members

    def read(self, name: str, limit: int | None = None) -> bytes:
        """A member's bytes, checked against the caps first and read at most to its declared size."""
        info = self.members.get(name)
        if info is None:
            raise _corrupt(self.path, f"missing member '{name}'")
        if info.is_dir():
            raise _corrupt(self.path, f"'{name}' is a folder")
        if info.compress_type == zipfile.ZIP_STORED:
            if info.file_size != info.compress_size or info.header_offset + info.compress_size > self.size:
                raise _corrupt(self.path, f"member '{name}' declares {info.file_size} bytes, more than the file holds")
        elif info.file_size > MAX_RATIO * max(info.compress_size, 1) + (1 << 16):
            raise InputError(f"{self.path}: member '{name}' inflates {info.compress_size} bytes to {info.file_size} "
                             f"(more than {MAX_RATIO}x); refused as a likely zip bomb")
        if limit is not None and info.file_size > limit:
            raise InputError(f"{self.path}: member '{name}' is {info.file_size} bytes; pt2c reads at most {limit}")
        buf = bytearray(info.file_size)
        try:
            with self.zip.open(info) as f:
                if f.readinto(buf) != info.file_size:
                    raise _corrupt(self.path, f"member '{name}' is shorter or longer than declared")
        except InputError:
            raise
        except (zipfile.BadZipFile, OSError, EOFError, ValueError, RuntimeError, NotImplementedError, OverflowError) as e:
            raise _corrupt(self.path, f"member '{name}': {type(e).__name__}: {e}") from None
        return bytes(buf) if limit is not None else buf  # type: ignore[return-value]

    def json(self, name: str) -> Any:
        data = self.read(name, MAX_JSON_BYTES)
        try:
            return json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError) as e:
            raise _corrupt(self.path, f"member '{name}' is not valid JSON: {type(e).__name__}: {str(e)[:120]}") from None

    # ------------------------------------------------------------------ header

    def header(self) -> dict[str, Any]:
        """Schema and torch version recorded in model.json."""
        head = self.json(MODEL_JSON.format(self.model))
        if not isinstance(head, dict):
            raise _corrupt(self.path, "model.json is not a JSON object")
        sv = head.get("schema_version") or {}
        try:
            schema = (int(sv.get("major", -1)), int(sv.get("minor", -1)))
        except (AttributeError, TypeError, ValueError, OverflowError):
            raise _corrupt(self.path, "schema_version is malformed") from None
        tv = head.get("torch_version")
        return {"schema_version": schema, "torch_version": tv if isinstance(tv, str) else "", "json": head}

    # ------------------------------------------------------------------ tensors

    def _tensor(self, data: Any, meta: dict, where: str) -> Any:
        """A strided tensor over `data` (a flat tensor) as `meta` (a serialized TensorMeta) describes it."""
        import torch

        def ints(key: str) -> list[int]:
            vals = meta.get(key)
            vals = vals if isinstance(vals, list) else [vals]
            out = []
            for v in vals:
                if not (isinstance(v, dict) and type(v.get("as_int")) is int):
                    raise InputError(f"{self.path}: {where}: {key} must be integers (symbolic sizes are not "
                                     "supported for weights)")
                out.append(v["as_int"])
            return out

        sizes, strides, offsets = ints("sizes"), ints("strides"), ints("storage_offset")
        if (len(sizes) != len(strides) or len(offsets) != 1 or len(sizes) > 64
                or not all(0 <= v < 1 << 62 for v in sizes + strides + offsets)):  # torch takes int64s
            raise _corrupt(self.path, f"{where}: bad sizes/strides/offset")
        offset = offsets[0]
        if 0 not in sizes:
            extent = offset + sum((n - 1) * s for n, s in zip(sizes, strides)) + 1
            if extent > data.numel():
                raise _corrupt(self.path, f"{where}: tensor of sizes {sizes} strides {strides} offset {offset} needs "
                                          f"{extent} elements, its data holds {data.numel()}")
        if math.prod(sizes) > 1 << 40:
            raise _corrupt(self.path, f"{where}: tensor too large")
        try:
            return torch.as_strided(data, sizes, strides, offset)
        except (RuntimeError, ValueError, TypeError, OverflowError) as e:
            raise _corrupt(self.path, f"{where}: {type(e).__name__}: {str(e)[:120]}") from None

    def _payloads(self, config_name: str, directory: str, kind: str) -> dict[str, Any]:
        """Tensors of a weights / constants config: raw bytes only; pickled payloads refused."""
        import torch
        from torch._export.serde.serialize import _SERIALIZE_TO_TORCH_DTYPE
        from torch._export.serde.schema import Layout, ScalarType

        legacy = f"{directory}{self.model}.pt"
        if self.has(legacy):
            raise _refused(self.path, self.root + legacy, f"is a pickled {kind} dictionary (legacy format)")
        if not self.has(config_name):
            return {}
        cfg = self.json(config_name)
        entries = cfg.get("config") if isinstance(cfg, dict) else None
        if not isinstance(entries, dict):
            raise _corrupt(self.path, f"'{config_name}' has no config object")
        files: dict[str, Any] = {}
        out: dict[str, Any] = {}
        for fqn, p in entries.items():
            if not isinstance(p, dict) or not isinstance(p.get("path_name"), str):
                raise _corrupt(self.path, f"{kind} '{fqn}': malformed entry")
            member = directory + p["path_name"]
            if p.get("use_pickle") or not p["path_name"].startswith(("tensor_", "weight_")):
                what = ("is a custom object (pickled)" if p["path_name"].startswith("custom_obj_") else
                        "is an opaque object (pickled)" if p["path_name"].startswith("opaque_obj_") else
                        "is pickled (a tensor subclass or other Python object)" if p.get("use_pickle") else
                        "is of an unknown kind")
                raise _refused(self.path, self.root + member, f"({kind} '{fqn}') {what}")
            meta = p.get("tensor_meta")
            if not isinstance(meta, dict):
                raise _corrupt(self.path, f"{kind} '{fqn}': no tensor_meta")
            try:
                dtype = _SERIALIZE_TO_TORCH_DTYPE[ScalarType(meta.get("dtype"))]
                layout = Layout(meta.get("layout", Layout.Strided))
            except (ValueError, KeyError, TypeError):
                raise _corrupt(self.path, f"{kind} '{fqn}': unknown dtype or layout") from None
            if layout != Layout.Strided:
                raise InputError(f"{self.path}: {kind} '{fqn}' has layout {layout.name}; pt2c reads dense tensors only")
            key = (member, dtype)
            if key not in files:
                raw = self.read(member)
                itemsize = torch.empty((), dtype=dtype).element_size()
                if len(raw) % itemsize:
                    raise _corrupt(self.path, f"member '{member}': {len(raw)} bytes is not a whole number of {dtype}")
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    files[key] = torch.frombuffer(raw, dtype=dtype) if raw else torch.empty(0, dtype=dtype)
            t = self._tensor(files[key], meta, f"{kind} '{fqn}'")
            if p.get("is_param"):
                t = torch.nn.Parameter(t, requires_grad=bool(meta.get("requires_grad")) and t.is_floating_point())
            out[fqn] = t
        return out

    # ------------------------------------------------------------------ the program

    def check_target(self, t: Any, where: str, unknown: list[tuple[str, str, str]],
                     missing: dict[str, list[Any]] | None = None, node: Any = None) -> None:
        """A call target (or operator argument) must be a registered operator overload, an allowed
        higher-order operator, or one of PY_TARGETS: torch's deserializer resolves it by walking
        attributes of torch, operator and math, and tracing then calls it."""
        import torch

        if not isinstance(t, str):
            raise _corrupt(self.path, f"{where}: target is not a string")
        if t in PY_TARGETS:
            return
        parts = t.split(".")
        if (len(parts) not in (4, 5) or parts[:2] != ["torch", "ops"]
                or not all(re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", p) for p in parts)
                or any(p.startswith("__") for i, p in enumerate(parts) if i != 3)):  # aten.__and__ is an op
            raise InputError(f"{self.path}: {where} calls '{t[:120]}', which is not an operator; refused "
                             "(a .pt2 may only call registered torch.ops operators)")
        if parts[2] == "higher_order" and parts[3] not in HIGHER_ORDER:
            unknown.append((t, where, "this higher-order operator is not supported"))
            return
        if parts[3] in DENIED_OPS:
            raise InputError(f"{self.path}: {where} calls '{t}', which reads files on the compiling machine; refused")
        op: Any = torch.ops
        try:
            for p in parts[2:]:
                op = getattr(op, p)
        except (AttributeError, RuntimeError):
            op = None
        if op is None and missing is not None and node is not None and parts[2] not in ("aten", "prims"):
            missing.setdefault(t, []).append(node)  # a custom op: declared from its recorded calls
        elif op is None:
            unknown.append((t, where, "operator not registered in this process (a custom op? import the "
                                      "library that defines it)"))
        elif not isinstance(op, (torch._ops.OpOverload, torch._ops.HigherOrderOperator)):
            raise InputError(f"{self.path}: {where} calls '{t[:120]}', which is not an operator overload; refused")

    def check_program_json(self, obj: Any) -> None:
        """Everything in model.json that torch's deserializer would evaluate, call or paste into the
        Python code it generates and exec()s is checked first: node targets and operator arguments
        (check_target), shape expressions (check_expr), subgraph names, forward argument names and
        keyword names (identifiers), custom objects (refused).  Control characters in free text
        (stack traces, module stacks) become spaces."""
        unknown: list[tuple[str, str, str]] = []
        missing: dict[str, list[Any]] = {}  # custom op target -> its nodes
        tensor_values: dict[str, Any] = {}
        stack = [obj]
        while stack:
            x = stack.pop()
            if isinstance(x, list):
                stack.extend(x)
                continue
            if not isinstance(x, dict):
                continue
            if "target" in x and "inputs" in x and "outputs" in x:
                self.check_target(x["target"], f"node '{str(x.get('name'))[:80]}'", unknown, missing, x)
            if isinstance(x.get("tensor_values"), dict):
                tensor_values.update(x["tensor_values"])
            for k, v in x.items():
                if k == "expr_str":
                    check_expr(v, f"{self.path}: shape expression")
                elif k == "as_operator":
                    self.check_target(v, "an operator argument", unknown)
                elif k in ("as_custom_obj", "as_custom_objs"):
                    raise InputError(f"{self.path}: the program uses a custom (torchbind) object; pt2c does not "
                                     "load custom objects")
                elif k == "as_graph" and isinstance(v, dict):
                    _identifier(self.path, v.get("name"), "subgraph name")
                    stack.append(v)
                elif k == "forward_arg_names" and isinstance(v, list):
                    for name in v:
                        _identifier(self.path, name, "forward argument name")
                elif k == "in_spec" and isinstance(v, str):
                    for name in _kwarg_names(self.path, v):
                        _identifier(self.path, name, "keyword argument name")
                elif k == "metadata" and isinstance(v, dict):
                    for mk, mv in v.items():
                        if isinstance(mv, str):
                            v[mk] = _CONTROL.sub(" ", mv)
                elif isinstance(v, (dict, list)):
                    stack.append(v)
        if missing and not unknown:
            from pt2c.frontend.customops import declare_missing

            unknown += declare_missing(missing, tensor_values)
        if unknown:
            raise UnsupportedError(unknown)

    def exported_program(self, head: dict[str, Any], sample_inputs: bool = False) -> Any:
        """The ExportedProgram, built without unpickling or evaluating anything from the archive."""
        from torch._export.serde import schema
        from torch._export.serde.serialize import ExportedProgramDeserializer, _dict_to_dataclass

        fmt = self.read("archive_format", 64) if self.has("archive_format") else b"pt2"
        if fmt.strip() != b"pt2":
            raise InputError(f"{self.path}: archive_format is {fmt[:16]!r}, not 'pt2'")
        if self.has("byteorder") and self.read("byteorder", 64).strip() not in (b"little", b""):
            raise InputError(f"{self.path}: big-endian archive; pt2c reads little-endian .pt2 files only")
        obj = head["json"]
        self.check_program_json(obj)
        state = self._payloads(WEIGHTS_CONFIG.format(self.model), WEIGHTS_DIR, "weight")
        consts = self._payloads(CONSTANTS_CONFIG.format(self.model), CONSTANTS_DIR, "constant")
        try:
            sep = _dict_to_dataclass(schema.ExportedProgram, obj)
        except (AssertionError, TypeError, KeyError, IndexError, ValueError, AttributeError, OverflowError,
                RecursionError) as e:
            raise _corrupt(self.path, f"model.json does not match the export schema: {type(e).__name__}: {str(e)[:160]}") from None
        sep.guards_code = []  # exec()'d by ep.module(); pt2c checks shapes itself
        with quiet_torch():
            try:
                ep = ExportedProgramDeserializer(None).deserialize(sep, state, consts, None)
            except (InputError, UnsupportedError):
                raise
            except Exception as e:  # torch raises many types for a malformed program
                msg = str(e).strip().splitlines()[0][:200] if str(e).strip() else ""
                raise _corrupt(self.path, f"the program does not deserialize: {type(e).__name__}: {msg}") from None
        if sample_inputs:
            name = SAMPLE_INPUTS.format(self.model)
            if self.has(name):
                value = SafeUnpickler(self.path, self.root + name).load(self.read(name, MAX_SAMPLE_INPUT_BYTES))
                if not (isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], tuple)
                        and isinstance(value[1], dict)):
                    raise InputError(f"{self.path}: member '{self.root + name}' is not (args, kwargs)")
                try:
                    ep.example_inputs = value
                except Exception as e:
                    raise InputError(f"{self.path}: the sample inputs do not match the program's inputs "
                                     f"({type(e).__name__}).\nWhat to try: pass inputs with -i NAME=FILE.npy") from None
        return ep


@contextmanager
def quiet_torch() -> Iterator[None]:
    """torch's log output (its own handlers print warnings and errors, some with tracebacks) and
    Python warnings are silenced while torch reads or transforms the program: the user sees pt2c's
    one message.  logging.disable is process-wide; pt2c holds it only for these steps."""
    old = logging.root.manager.disable
    logging.disable(logging.CRITICAL)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logging.disable(old)


# ---------------------------------------------------------------------------- sample inputs

_STORAGES = {"FloatStorage": "float32", "DoubleStorage": "float64", "HalfStorage": "float16",
             "BFloat16Storage": "bfloat16", "LongStorage": "int64", "IntStorage": "int32", "ShortStorage": "int16",
             "CharStorage": "int8", "ByteStorage": "uint8", "BoolStorage": "bool"}
_GLOBALS = {("torch._utils", "_rebuild_tensor_v2"), ("torch._utils", "_rebuild_parameter"),
            ("collections", "OrderedDict")} | {("torch", s) for s in _STORAGES}
_MARK = object()


class SafeUnpickler:
    """Reads a ``torch.save`` zip (a pickle of tuples / dicts / tensors + raw storages) by interpreting
    the opcodes that ``pickletools.genops`` parses; no object from the stream is ever called."""

    def __init__(self, path: Any, member: str):
        self.path, self.member = path, member

    def refuse(self, why: str) -> InputError:
        return _refused(self.path, self.member, f"(the sample inputs) {why}")

    def load(self, data: bytes) -> Any:
        try:
            z = zipfile.ZipFile(io.BytesIO(data))
            names = z.namelist()
            pkl = next((n for n in names if n.endswith("data.pkl")), None)
            if pkl is None:
                raise self.refuse("holds no data.pkl")
            self.zip, self.prefix = z, pkl[:-len("data.pkl")]
            if sum(i.file_size for i in z.infolist()) > max(100 * len(data), 1 << 20):
                raise self.refuse("inflates too far")
            return self.run(z.read(pkl))
        except InputError:
            raise
        except (zipfile.BadZipFile, ValueError, KeyError, IndexError, TypeError, EOFError, OverflowError,
                RecursionError, AttributeError, OSError, RuntimeError, NotImplementedError) as e:
            raise self.refuse(f"cannot be read as tensors ({type(e).__name__}: {str(e)[:120]})") from None

    def storage(self, pid: Any) -> Any:
        import torch

        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage" and isinstance(pid[1], tuple)
                and pid[1][0] == "global" and isinstance(pid[2], str) and isinstance(pid[4], int)):
            raise self.refuse("has a persistent id that is not a tensor storage")
        dtype = getattr(torch, _STORAGES[pid[1][2]])
        raw = bytearray(self.zip.read(f"{self.prefix}data/{pid[2]}"))
        n = pid[4]
        itemsize = torch.empty((), dtype=dtype).element_size()
        if len(raw) != n * itemsize:
            raise self.refuse(f"storage {pid[2]!r} holds {len(raw)} bytes, not {n} x {itemsize}")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return torch.frombuffer(raw, dtype=dtype) if n else torch.empty(0, dtype=dtype)

    def call(self, fn: Any, args: Any) -> Any:
        import torch

        if fn == ("global", "collections", "OrderedDict") and args == ():
            return {}
        if fn == ("global", "torch._utils", "_rebuild_tensor_v2") and isinstance(args, tuple) and len(args) >= 4:
            data, offset, size, stride = args[:4]
            if not (isinstance(data, torch.Tensor) and type(offset) is int and isinstance(size, tuple)
                    and isinstance(stride, tuple) and all(type(v) is int and v >= 0 for v in (*size, *stride, offset))
                    and len(size) == len(stride)):
                raise self.refuse("rebuilds a tensor from malformed arguments")
            if 0 not in size and offset + sum((a - 1) * b for a, b in zip(size, stride)) >= data.numel():
                raise self.refuse("rebuilds a tensor past the end of its storage")
            return torch.as_strided(data, size, stride, offset)
        if fn == ("global", "torch._utils", "_rebuild_parameter") and isinstance(args, tuple) and args \
                and isinstance(args[0], torch.Tensor):
            return args[0]
        raise self.refuse(f"calls {fn[1]}.{fn[2]}" if isinstance(fn, tuple) and len(fn) == 3 else "calls an object")

    def run(self, pkl: bytes) -> Any:
        stack: list[Any] = []
        memo: dict[int, Any] = {}

        def pop_mark() -> list[Any]:
            i = len(stack) - 1
            while stack[i] is not _MARK:
                i -= 1
            items = stack[i + 1:]
            del stack[i:]
            return items

        for op, arg, _ in pickletools.genops(pkl):
            name = op.name
            if name in ("PROTO", "FRAME"):
                continue
            if name == "STOP":
                if len(stack) != 1:
                    raise self.refuse("ends with a malformed stack")
                return stack[0]
            if name == "MARK":
                stack.append(_MARK)
            elif name in ("BINUNICODE", "SHORT_BINUNICODE", "BINUNICODE8", "UNICODE", "BININT", "BININT1", "BININT2",
                          "LONG1", "BINFLOAT", "SHORT_BINBYTES", "BINBYTES"):
                if name == "LONG1" and abs(arg).bit_length() > 64:
                    raise self.refuse("holds an integer too large")
                stack.append(arg)
            elif name in ("NONE", "NEWTRUE", "NEWFALSE"):
                stack.append({"NONE": None, "NEWTRUE": True, "NEWFALSE": False}[name])
            elif name == "EMPTY_TUPLE":
                stack.append(())
            elif name in ("TUPLE1", "TUPLE2", "TUPLE3"):
                n = int(name[-1])
                items = stack[-n:]
                del stack[-n:]
                stack.append(tuple(items))
            elif name == "TUPLE":
                stack.append(tuple(pop_mark()))
            elif name == "EMPTY_LIST":
                stack.append([])
            elif name == "EMPTY_DICT":
                stack.append({})
            elif name == "APPEND":
                v = stack.pop()
                stack[-1].append(v)
            elif name == "APPENDS":
                items = pop_mark()
                stack[-1].extend(items)
            elif name == "SETITEM":
                v, k = stack.pop(), stack.pop()
                stack[-1][k] = v
            elif name == "SETITEMS":
                items = pop_mark()
                for k, v in zip(items[::2], items[1::2]):
                    stack[-1][k] = v
            elif name in ("BINPUT", "LONG_BINPUT", "PUT"):
                memo[int(arg)] = stack[-1]
            elif name == "MEMOIZE":
                memo[len(memo)] = stack[-1]
            elif name in ("BINGET", "LONG_BINGET", "GET"):
                stack.append(memo[int(arg)])
            elif name in ("GLOBAL", "STACK_GLOBAL"):
                if name == "GLOBAL":
                    module, _, attr = str(arg).partition(" ")
                else:
                    attr, module = stack.pop(), stack.pop()
                if (module, attr) not in _GLOBALS:
                    raise self.refuse(f"references {str(module)[:60]}.{str(attr)[:60]}")
                stack.append(("global", module, attr) if (module, attr)[0] != "torch" else ("global", "storage", attr))
            elif name == "BINPERSID":
                stack.append(self.storage(stack.pop()))
            elif name == "REDUCE":
                args, fn = stack.pop(), stack.pop()
                stack.append(self.call(fn, args))
            elif name == "BUILD":
                state = stack.pop()
                if state not in (None, {}, ()):
                    raise self.refuse("sets object state")
            else:
                raise self.refuse(f"uses the pickle opcode {name}")
        raise self.refuse("has no STOP opcode")
