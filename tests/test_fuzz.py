"""Property-based fuzzing (hypothesis, derandomized, fixed example counts) of the input parsers.

(a) the C weights-blob loader, ``<name>_init_checked``, through ctypes: random
    mutations, truncations and extensions of a real blob never crash, and init
    succeeds exactly when every byte it is specified to check is intact (the
    first ``64 + data size`` bytes, minus the reserved header bytes, see
    RESERVED); otherwise it returns one of the weights error codes.
(b) the ``.pt2`` reader, byte level: random bytes, truncated and bit-flipped real
    archives make ``read_pt2_header`` / ``load_program`` raise ``InputError`` (or,
    for a flip that does not matter, succeed), never another exception type.
(c) the ``.pt2`` reader, structure aware (src/pt2c/frontend/archive.py): a real
    archive (parameters, buffers, a lifted constant, a dynamic batch size) is
    taken apart; its JSON members (models/model.json, the weights and constants
    configs) are edited as trees (types swapped, hostile strings, huge / negative
    ints, keys removed or renamed, lists truncated, JSON inside strings edited
    too), its tensor members truncated / extended / dropped / replaced by a
    pickle, its shape expressions replaced by grammar-made and hostile ones, and
    it is zipped again with valid CRCs.  Property: ``load_program`` returns a
    program or raises a ``Pt2cError`` subclass, never another exception type,
    creates no canary file, and takes under EXAMPLE_SECONDS per example.

Budget (CI): the example counts in the ``@examples(n)`` decorators, derandomized
(the same inputs every run); about 25 s in all on one core.  A longer campaign:
``PT2C_FUZZ_SCALE=20 python3 -m pytest -q tests/test_fuzz.py -p no:cacheprovider
--hypothesis-show-statistics`` (20 times the examples, drawn at random each run;
a failure prints a ``@reproduce_failure`` blob to replay it).  Findings so far
(fixed in archive.py, kept below as regression examples): IndexError /
OverflowError out of torch's schema decoder; srepr shape expressions (what torch
2.13 writes for any dynamic dimension) refused; shape expressions that would not
finish in sympy (nested powers, floor(1e999999), Float precision=10**8).

The libFuzzer + ASan + UBSan harness over the C API (init and run) is
tests/fuzz/fuzz_capi.c, run by tests/test_fuzz_capi.py.
"""

from __future__ import annotations

import copy
import ctypes
import json
import os
import re
import struct
import time
import warnings
import zipfile
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis", reason="hypothesis not installed (pip install hypothesis)")
from hypothesis import HealthCheck, event, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from pt2c.errors import InputError  # noqa: E402

HEADER = 64
# Bytes of the 64-byte header that init does not read: none (the CRC field is
# compared whole, the reserved bytes 32..63 must be zero).
RESERVED: set[int] = set()

# PT2C_FUZZ_SCALE=N: N times the examples, drawn at random (not derandomized) -- a longer local campaign.
SCALE = max(1, int(os.environ.get("PT2C_FUZZ_SCALE", "1") or 1))
FUZZ = settings(derandomize=SCALE == 1, deadline=None, database=None,
                suppress_health_check=list(HealthCheck), print_blob=True)


def examples(n: int) -> settings:
    return settings(FUZZ, max_examples=n * SCALE)

# status codes of the C API (see codegen/capi.py: STATUS)
OK = 0
WEIGHTS_ERRORS = {3, 4, 5, 6, 7}  # truncated, magic, version, mismatch, corrupt


# --------------------------------------------------------------------------- (a) the blob loader


class Loader:
    def __init__(self, lib_path: Path, name: str, blob: bytes):
        self.lib = ctypes.CDLL(str(lib_path))
        self.init = getattr(self.lib, f"{name}_init_checked")
        self.init.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t,
                              ctypes.c_uint64]
        self.init.restype = ctypes.c_int
        ws_size = getattr(self.lib, f"{name}_workspace_size")
        ws_size.restype = ctypes.c_size_t
        sig = getattr(self.lib, f"{name}_signature")
        sig.restype = ctypes.c_uint64
        self.signature = sig()
        self.ws = _aligned(max(ws_size(), 64))
        self.ctx = ctypes.create_string_buffer(256)
        self.blob = blob
        self.data_bytes = struct.unpack_from("<Q", blob, 16)[0]
        assert HEADER + self.data_bytes == len(blob)
        self._reserved = np.zeros(len(blob), bool)
        self._reserved[sorted(RESERVED)] = True

    def __call__(self, data: bytes) -> int:
        # an exact-size, 64-byte aligned copy (size 0: still a valid pointer)
        buf = _aligned(max(len(data), 1))
        buf[:len(data)] = np.frombuffer(data, np.uint8)
        return self.init(self.ctx, buf.ctypes.data, len(data), self.ws.ctypes.data, self.ws.nbytes, self.signature)

    def intact(self, data: bytes) -> bool:
        """Every byte init checks equals the real blob's (trailing extra bytes are ignored)."""
        n = len(self.blob)
        if len(data) < n:
            return False
        a = np.frombuffer(data[:n], np.uint8)
        b = np.frombuffer(self.blob, np.uint8)
        return bool(np.all((a == b) | self._reserved))


def _aligned(nbytes: int, align: int = 64) -> np.ndarray:
    raw = np.zeros(nbytes + align, dtype=np.uint8)
    off = (-raw.ctypes.data) % align
    return raw[off:off + nbytes]


@pytest.fixture(scope="module")
def loader(mlp_compiled) -> Loader:
    blob = (mlp_compiled.out_dir / f"{mlp_compiled.name}.weights").read_bytes()
    return Loader(mlp_compiled.gcc_lib(), mlp_compiled.name, blob)


@st.composite
def mutated_blobs(draw, blob: bytes) -> bytes:
    data = bytearray(blob)
    kind = draw(st.sampled_from(["bytes", "header", "truncate", "extend", "fields", "mixed"]))
    if kind in ("bytes", "mixed"):
        for i, b in draw(st.lists(st.tuples(st.integers(0, len(data) - 1), st.integers(0, 255)), max_size=8)):
            data[i] = b
    if kind in ("header", "mixed"):
        for i, bit in draw(st.lists(st.tuples(st.integers(0, HEADER - 1), st.integers(0, 7)), min_size=1, max_size=4)):
            data[i] ^= 1 << bit
    if kind == "fields":  # plausible-but-wrong header fields: sizes near the real one, huge values
        field = draw(st.sampled_from([(8, "<I"), (12, "<I"), (16, "<Q"), (24, "<Q")]))
        value = draw(st.one_of(st.integers(0, 2**32 - 1) if field[1] == "<I" else st.integers(0, 2**64 - 1),
                               st.sampled_from([0, 1, 63, 64, 65, len(blob) - HEADER + 1, 2**63, 2**64 - 1])))
        struct.pack_into(field[1], data, field[0], value % (2 ** (8 * struct.calcsize(field[1]))))
    if kind in ("truncate", "mixed"):
        data = data[:draw(st.integers(0, len(data)))]
    if kind == "extend":
        data += draw(st.binary(min_size=1, max_size=256))
    return bytes(data)


def test_blob_loader_accepts_the_real_blob(loader):
    assert loader(loader.blob) == OK
    assert loader(loader.blob + b"\0" * 100) == OK  # trailing bytes are ignored


@examples(400)
@given(data=st.data())
def test_blob_loader_mutations(loader, data):
    blob = data.draw(mutated_blobs(loader.blob))
    rc = loader(blob)
    if loader.intact(blob):
        assert rc == OK
    else:
        assert rc in WEIGHTS_ERRORS, rc


@examples(200)
@given(blob=st.one_of(st.binary(max_size=512),
                      st.binary(max_size=200).map(lambda b: b"PT2CWGT\0" + b)))
def test_blob_loader_random_bytes(loader, blob):
    assert loader(blob) in WEIGHTS_ERRORS


# --------------------------------------------------------------------------- (b) the .pt2 reader


@pytest.fixture(scope="module")
def pt2_file(tmp_path_factory) -> Path:
    import torch

    from pt2c import zoo

    model, inputs = zoo.mlp("tiny")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ep = torch.export.export(model, tuple(inputs), strict=False)
    path = tmp_path_factory.mktemp("pt2") / "mlp.pt2"
    torch.export.save(ep, path)
    return path


def _json_range(path: Path) -> tuple[int, int]:
    """Byte range of models/model.json's data inside the archive (stored uncompressed or not)."""
    with zipfile.ZipFile(path) as z:
        info = next(i for i in z.infolist() if i.filename.endswith("models/model.json"))
    raw = path.read_bytes()
    name_len, extra_len = struct.unpack_from("<HH", raw, info.header_offset + 26)
    start = info.header_offset + 30 + name_len + extra_len
    return start, start + info.compress_size


def _header_or_input_error(path: Path) -> None:
    from pt2c.frontend.load import read_pt2_header

    try:
        head = read_pt2_header(path)
    except InputError:
        return
    assert isinstance(head["schema_version"], tuple)


@examples(150)
@given(blob=st.one_of(st.binary(max_size=2048), st.binary(max_size=64).map(lambda b: b"PK\x03\x04" + b)))
def test_pt2_header_random_bytes(tmp_path_factory, blob):
    from pt2c.frontend.load import read_pt2_header

    p = tmp_path_factory.mktemp("rnd", numbered=True) / "x.pt2"
    p.write_bytes(blob)
    with pytest.raises(InputError):
        read_pt2_header(p)


@examples(250)
@given(data=st.data())
def test_pt2_header_mutations(pt2_file, tmp_path_factory, data):
    raw = bytearray(pt2_file.read_bytes())
    js, je = _json_range(pt2_file)
    kind = data.draw(st.sampled_from(["truncate", "flip", "flip_json", "flip_tail"]))
    if kind == "truncate":
        raw = raw[:data.draw(st.integers(0, len(raw) - 1))]
    else:
        lo, hi = {"flip": (0, len(raw)), "flip_json": (js, je), "flip_tail": (max(0, len(raw) - 512), len(raw))}[kind]
        for i, bit in data.draw(st.lists(st.tuples(st.integers(lo, hi - 1), st.integers(0, 7)), min_size=1, max_size=4)):
            raw[i] ^= 1 << bit
    p = tmp_path_factory.mktemp("mut", numbered=True) / "x.pt2"
    p.write_bytes(bytes(raw))
    _header_or_input_error(p)


@examples(60)
@given(data=st.data())
def test_load_program_mutations(pt2_file, tmp_path_factory, data):
    """The full load (the archive reader, byte-level damage): InputError or a program."""
    import torch

    from pt2c.frontend.load import load_program

    raw = bytearray(pt2_file.read_bytes())
    js, je = _json_range(pt2_file)
    if data.draw(st.booleans()):
        raw = raw[:data.draw(st.integers(0, len(raw) - 1))]
    else:
        lo, hi = data.draw(st.sampled_from([(0, len(raw)), (js, je)]))
        for i, bit in data.draw(st.lists(st.tuples(st.integers(lo, hi - 1), st.integers(0, 7)), min_size=1, max_size=3)):
            raw[i] ^= 1 << bit
    p = tmp_path_factory.mktemp("load", numbered=True) / "x.pt2"
    p.write_bytes(bytes(raw))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ep, _ = load_program(p)
    except InputError:
        return
    assert isinstance(ep, torch.export.ExportedProgram)


# --------------------------------------------------------------------------- (c) structure-aware .pt2 mutations
#
# The archive is taken apart, one JSON member (models/model.json, the weights / constants configs) is
# parsed and edited as a tree (values of another type, hostile strings, huge / negative ints, keys
# removed or renamed, lists truncated or duplicated, JSON inside strings edited in turn), or tensor
# members are truncated, extended, replaced by a pickle or dropped, and the archive is zipped again
# with valid CRCs, so the edits reach the reader's JSON / tensor / program checks (a flipped byte in
# a stored member only reaches the zip CRC check).  Property: load_program returns a program or
# raises a Pt2cError subclass, creates no canary file, and takes seconds at most.

EXAMPLE_SECONDS = 5  # per example: the property's time limit
JSON_MEMBERS = ("models/model.json", "data/weights/model_weights_config.json",
                "data/constants/model_constants_config.json")
DEEP = "__pt2c_fuzz_deep__"  # replaced by 100k nested brackets after json.dumps


def _base_module():
    """Parameters, buffers (one non-contiguous, one int64), a lifted constant, a dynamic batch size."""
    import torch

    class BaseModel(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(8, 4)
            self.emb = torch.nn.Embedding(10, 4)
            self.register_buffer("scale", torch.full((4,), 0.5))
            self.register_buffer("tw", torch.arange(16.0).reshape(4, 4).t())
            self.register_buffer("steps", torch.arange(4))

        def forward(self, x, idx):
            y = torch.relu(self.lin(x)) * self.scale + self.emb(idx) + torch.tensor([1.0, 2.0, 3.0, 4.0])
            return (y @ self.tw)[:, :2] + self.steps[:2]

    torch.manual_seed(0)
    return BaseModel().eval(), (torch.randn(3, 8), torch.tensor([1, 2, 3]))


@pytest.fixture(scope="module")
def base_archive(tmp_path_factory) -> tuple[str, dict[str, bytes]]:
    """(root folder, {member name under the root: bytes}) of a real archive, in the archive's order."""
    import torch

    model, inputs = _base_module()
    b = torch.export.Dim("b", min=1, max=64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ep = torch.export.export(model, inputs, dynamic_shapes=({0: b}, {0: b}), strict=False)
        path = tmp_path_factory.mktemp("base") / "base.pt2"
        torch.export.save(ep, path)
    with zipfile.ZipFile(path) as z:
        names = z.namelist()
        root = names[0].split("/", 1)[0] + "/"
        files = {n[len(root):]: z.read(n) for n in names}
    assert all(m in files for m in JSON_MEMBERS) and json.loads(files[JSON_MEMBERS[2]])["config"]
    return root, files


def _write_zip(path: Path, root: str, files: dict[str, bytes]) -> None:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        for name, data in files.items():
            z.writestr(root + name, data)


def hostile_strings(canary: Path) -> list[str]:
    c = str(canary)
    return [
        "", " ", "\x00", "\n\r\u2028", "a" * 5000, "\U0001f4a5", "\ud800", "%s%n", "${HOME}", "$(touch CANARY)",
        f"__import__('os').system('touch {c}')", f"open({c!r}, 'w')", f"exec(\"open({c!r}, 'w')\")",
        "torch.os.system", "os.system", "builtins.eval", "builtins.exec", "subprocess.Popen", "operator.attrgetter",
        "torch.ops.aten.from_file.default", "torch.ops.higher_order.executorch_call_delegate",
        "torch.ops.aten.linear.__init__", "torch.ops.aten.__class__.__init__", "torch.ops.no_such_ns.op.default",
        "torch.ops.aten.linear.default", "torch.ops.aten.add.Tensor", "_operator.getitem", "math.floor",
        "s0**9**9**9", "9**9**9", "s77 + 1", "Max(s77, 1)", "FloorDiv(s77, 0)", "s77/0", "1e999", "(" * 500,
        "__class__", "Symbol('x')", "s77 if s77 else 1", "lambda: 0", "import os", "L['x'].size()[0]",
        "../../../../etc/passwd", "/dev/zero", "/dev/stdin", "weight_0/../weight_1", "weight_99", "tensor_0",
        "custom_obj_0", "opaque_obj_0", "weight_0\x00", "float32", "as_tensor", "x", "idx", "p_lin_weight",
        "[1, {\"type\": \"builtins.tuple\", \"context\": \"null\", \"children_spec\": []}]", "{", "[]", "null",
    ] + HOSTILE_EXPRS


# shape expressions that would not finish (or exhaust memory) if they reached sympy; regression examples
HOSTILE_EXPRS = [
    "((((((9**64)**64)**64)**64)**64)**64)", "Pow(Pow(Pow(Integer(9), Integer(64)), Integer(64)), Integer(64))",
    "floor(1e999999)", "TruncToInt(Float('1e999999', precision=53))", "Float('1.5', precision=99999999)",
    "Integer('9'*999999999)", "Max('9**9**9**9', 1)", "Symbol('s0'*999999999)", "Max(9**64, 1)**64**64",
    "Symbol('s77', positive=__import__('os').system)", "Symbol('__builtins__')", "s77 = 1",
]


SPECIAL = [None, True, False, 0, 1, -1, 7, 2**31, -2**31, 2**63 - 1, 2**63, -2**63 - 1, 2**64, 10**100, -10**100,
           0.5, -0.0, 1e308, float("nan"), float("inf"), [], {}, [None], {"": None}, [[[]]], {"as_int": -1},
           {"as_int": 2**62}, {"as_expr": {"expr_str": "s77"}}, DEEP]


def _nodes(doc: Any, path: tuple = ()) -> Iterator[tuple]:
    yield path
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _nodes(v, path + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from _nodes(v, path + (i,))


def _strings(doc: Any) -> list[str]:
    out: list[str] = []
    stack = [doc]
    while stack:
        x = stack.pop()
        if isinstance(x, dict):
            out.extend(k for k in x)
            stack.extend(x.values())
        elif isinstance(x, list):
            stack.extend(x)
        elif isinstance(x, str):
            out.append(x)
    return sorted(set(out))


def _embedded_json(s: Any) -> Any:
    if isinstance(s, str) and s[:1] in "[{":
        try:
            v = json.loads(s)
        except ValueError:
            return None
        return v if isinstance(v, (list, dict)) else None
    return None


@st.composite
def json_edits(draw, doc: Any, hostile: list[str], depth: int = 0) -> Any:
    """doc with 1..4 random edits (doc is edited in place and returned; the root may be replaced)."""
    strings = _strings(doc) or ["x"]
    for _ in range(draw(st.integers(1, 4))):
        paths = list(_nodes(doc))
        path = paths[draw(st.integers(0, len(paths) - 1))]
        parent = doc
        for k in path[:-1]:
            parent = parent[k]
        old = parent[path[-1]] if path else doc
        ops = ["special", "hostile", "swap_string"]
        if type(old) is int:
            ops += ["int_shift", "int_scale"]
        if isinstance(old, list) and old:
            ops += ["list_truncate", "list_drop", "list_dup", "list_reverse"]
        if isinstance(old, dict) and old:
            ops += ["dict_drop", "dict_rename", "dict_add"]
        if depth < 2 and _embedded_json(old) is not None:
            ops += ["embedded", "embedded"]
        if path and isinstance(parent, dict):
            ops += ["remove"]
        op = draw(st.sampled_from(ops))
        new: Any = old
        if op == "special":  # a copy: an edit in place must not change SPECIAL (state between examples)
            new = copy.deepcopy(draw(st.sampled_from(SPECIAL)))
        elif op == "hostile":
            new = draw(st.sampled_from(hostile))
        elif op == "swap_string":
            new = draw(st.sampled_from(strings))
        elif op == "int_shift":
            new = old + draw(st.sampled_from([-2, -1, 1, 2, -old - 1, -old]))
        elif op == "int_scale":
            new = old * draw(st.sampled_from([-1, 2**32, 2**62, 2**64, 10**30]))
        elif op == "list_truncate":
            new = old[:draw(st.integers(0, len(old) - 1))]
        elif op == "list_drop":
            i = draw(st.integers(0, len(old) - 1))
            new = old[:i] + old[i + 1:]
        elif op == "list_dup":
            i = draw(st.integers(0, len(old) - 1))
            new = old[:i + 1] + [json.loads(json.dumps(old[i]))] + old[i + 1:]
        elif op == "list_reverse":
            new = old[::-1]
        elif op in ("dict_drop", "dict_rename"):
            keys = list(old)
            k = keys[draw(st.integers(0, len(keys) - 1))]
            new = dict(old)
            v = new.pop(k)
            if op == "dict_rename":
                new[draw(st.sampled_from(hostile + strings))] = v
        elif op == "dict_add":
            new = dict(old)
            new[draw(st.sampled_from(hostile + strings))] = copy.deepcopy(draw(st.sampled_from(SPECIAL + hostile)))
        elif op == "embedded":
            inner = draw(json_edits(_embedded_json(old), hostile, depth + 1))
            new = json.dumps(inner)
        if op == "remove":
            del parent[path[-1]]
        elif not path:
            doc = new
        else:
            parent[path[-1]] = new
    return doc


def _dump(doc: Any) -> bytes:
    text = json.dumps(doc)  # NaN / Infinity as Python's json writes them (json.loads reads them back)
    return text.replace(json.dumps(DEEP), "[" * 100_000 + "]" * 100_000).encode("utf-8", "surrogatepass")


@st.composite
def archive_edits(draw, files: dict[str, bytes], canary: Path, members: tuple[str, ...]) -> dict[str, bytes]:
    """A copy of the archive's members with one member kind edited."""
    files = dict(files)
    hostile = hostile_strings(canary)
    target = draw(st.sampled_from(members))
    if target == "tensors":
        tensors = sorted(n for n in files if re.fullmatch(r"data/(weights/weight|constants/tensor)_\d+", n))
        for name in draw(st.lists(st.sampled_from(tensors), min_size=1, max_size=3, unique=True)):
            data = files[name]
            kind = draw(st.sampled_from(["truncate", "extend", "empty", "drop", "pickle", "flip"]))
            if kind == "truncate":
                files[name] = data[:draw(st.integers(0, max(len(data) - 1, 0)))]
            elif kind == "extend":
                files[name] = data + draw(st.sampled_from([b"\0", b"\0" * 3, b"\xff" * 4, data, b"\0" * 4096]))
            elif kind == "empty":
                files[name] = b""
            elif kind == "drop":
                del files[name]
            elif kind == "pickle":
                files[name] = _payload_pickle(canary)
            else:
                raw = bytearray(data)
                for i in draw(st.lists(st.integers(0, max(len(raw) - 1, 0)), min_size=1, max_size=4)):
                    if raw:
                        raw[i] ^= 0xFF
                files[name] = bytes(raw)
        if draw(st.booleans()):  # and maybe a config edit alongside
            cfg = draw(st.sampled_from(JSON_MEMBERS[1:]))
            files[cfg] = _dump(draw(json_edits(json.loads(files[cfg]), hostile)))
    else:
        files[target] = _dump(draw(json_edits(json.loads(files[target]), hostile)))
    return files


def _payload_pickle(canary: Path) -> bytes:
    import pickle

    class Payload:
        def __reduce__(self):
            return (open, (str(canary), "w"))

    return pickle.dumps(Payload())


class _Timeout(Exception):
    pass


def _check_load(path: Path, canary: Path, sample_inputs: bool = False) -> str:
    """The property: a program or a Pt2cError, no canary, within EXAMPLE_SECONDS.  Returns the outcome."""
    import signal

    import torch

    from pt2c.errors import Pt2cError
    from pt2c.frontend.load import load_program

    def alarm(*_):
        raise _Timeout(f"load_program took more than {2 * EXAMPLE_SECONDS}s")

    old = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(2 * EXAMPLE_SECONDS)
    t0 = time.monotonic()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ep, _ = load_program(path, sample_inputs=sample_inputs)
        outcome = "program"
        assert isinstance(ep, torch.export.ExportedProgram)
    except Pt2cError as e:  # the outcome, for --hypothesis-show-statistics: the error's kind and first words
        msg = str(e).replace(str(path), "").lstrip(": ").encode("ascii", "backslashreplace").decode()
        outcome = f"{type(e).__name__}: {re.sub(r'[0-9]+', 'N', msg)[:60]}"
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    assert time.monotonic() - t0 < EXAMPLE_SECONDS, f"load_program took {time.monotonic() - t0:.1f}s"
    assert not canary.exists(), "code from the archive ran (the canary file exists)"
    return outcome


def _edited_archive(tmp_path_factory, base_archive, data, members) -> tuple[Path, Path]:
    root, files = base_archive
    d = tmp_path_factory.mktemp("edit", numbered=True)
    canary = d / "CANARY"
    _write_zip(d / "x.pt2", root, data.draw(archive_edits(files, canary, members)))
    return d / "x.pt2", canary


def test_base_archive_loads(base_archive, tmp_path):
    root, files = base_archive
    _write_zip(tmp_path / "x.pt2", root, files)
    assert _check_load(tmp_path / "x.pt2", tmp_path / "CANARY") == "program"
    assert _check_load(tmp_path / "x.pt2", tmp_path / "CANARY", sample_inputs=True) == "program"


@examples(400)
@given(data=st.data())
def test_load_program_model_json_edits(base_archive, tmp_path_factory, data):
    event(_check_load(*_edited_archive(tmp_path_factory, base_archive, data, ("models/model.json",))))


@examples(250)
@given(data=st.data())
def test_load_program_config_edits(base_archive, tmp_path_factory, data):
    event(_check_load(*_edited_archive(tmp_path_factory, base_archive, data, JSON_MEMBERS[1:])))


@st.composite
def shape_exprs(draw) -> str:
    """Shape expressions from a grammar of what torch writes (sympy.srepr: Add, Mul, Pow, Symbol(...),
    Integer(...), Float(...), torch's FloorDiv / PowByNatural / ...) and str() forms, with small, huge
    and negative numbers, nested powers and the hostile expressions above."""
    num = st.one_of(st.integers(-3, 70), st.sampled_from([2**31, 2**63, 10**23, -10**23, 10**24, 10**25]))
    flt = st.sampled_from(["1.5", "-0.0", "1e308", "1e400", "9.9e399", "1e-400", "inf", "nan", "1e401", "1.5e99999"])
    sym = st.sampled_from(["s77", "Symbol('s77', positive=True, integer=True)", "Symbol('s77')", "s0", "u3"])
    leaf = st.one_of(
        sym, num.map(str), num.map(lambda n: f"Integer({n})"), st.sampled_from(["oo", "-oo", "int_oo", "true", "nan"]),
        st.tuples(flt, st.sampled_from([53, 64, 1024, 1025, 10**8])).map(lambda t: f"Float('{t[0]}', precision={t[1]})"),
        st.tuples(num, num).map(lambda t: f"Rational({t[0]}, {t[1]})"))
    fn1 = st.sampled_from(["floor", "ceiling", "TruncToInt", "CeilToInt", "FloorToInt", "RoundToInt", "ToFloat",
                           "Abs", "sqrt", "Not", "TruncToFloat", "Identity"])
    fn2 = st.sampled_from(["Add", "Mul", "Max", "Min", "FloorDiv", "Mod", "PythonMod", "CleanDiv", "CeilDiv",
                           "PowByNatural", "FloatPow", "LShift", "RShift", "RoundDecimal", "FloatTrueDiv",
                           "IntTrueDiv", "Eq", "Ne", "StrictLessThan", "LessThan", "Equality", "And", "Or"])
    op = st.sampled_from(["+", "-", "*", "//", "%", "/", "**", "<", "=="])

    def extend(sub):
        return st.one_of(
            st.tuples(fn1, sub).map(lambda t: f"{t[0]}({t[1]})"),
            st.tuples(fn2, sub, sub).map(lambda t: f"{t[0]}({t[1]}, {t[2]})"),
            st.tuples(sub, op, sub).map(lambda t: f"({t[0]}) {t[1]} ({t[2]})"),
            st.tuples(sub, num).map(lambda t: f"Pow({t[0]}, Integer({t[1]}))"),
            st.tuples(sub, num).map(lambda t: f"({t[0]})**{t[1]}"),
            st.tuples(sub, sub).map(lambda t: f"Piecewise(({t[0]}, {t[1]}), (1, True))"))

    grammar = st.recursive(leaf, extend, max_leaves=12)
    return draw(st.one_of(grammar, grammar, grammar, st.sampled_from(HOSTILE_EXPRS)))


@examples(300)
@given(data=st.data())
def test_load_program_shape_expressions(base_archive, tmp_path_factory, data):
    """Every expr_str of model.json (the dynamic batch size) replaced, some by a grammar-made expression:
    refused by check_expr or parsed by sympy, in seconds."""
    root, files = base_archive
    doc = json.loads(files["models/model.json"])
    sites = [p for p in _nodes(doc) if p and p[-1] == "expr_str"]
    exprs = data.draw(st.lists(shape_exprs(), min_size=1, max_size=3))
    for i, path in enumerate(data.draw(st.lists(st.sampled_from(sites), min_size=1, max_size=4, unique=True))):
        parent = doc
        for k in path[:-1]:
            parent = parent[k]
        parent[path[-1]] = exprs[i % len(exprs)]
        if data.draw(st.booleans()) and "hint" in parent:
            parent["hint"] = {"as_int": data.draw(st.sampled_from([0, -1, 1, 2**63 - 1, 2**63, 10**30]))}
    d = tmp_path_factory.mktemp("expr", numbered=True)
    _write_zip(d / "x.pt2", root, {**files, "models/model.json": _dump(doc)})
    event(_check_load(d / "x.pt2", d / "CANARY"))


def _node(doc: dict, name: str) -> dict:
    return next(n for n in doc["graph_module"]["graph"]["nodes"] if n["name"] == name)


def _meta(doc: dict, fqn: str) -> dict:
    return doc["config"][fqn]["tensor_meta"]


# Regression examples: edits the structure-aware fuzzing found raising another exception type than
# Pt2cError (each fixed in archive.py). (member, edit in place)
REGRESSIONS = {
    # torch's schema decoder: IndexError (a dict or list where a string belongs), OverflowError (float(10**400))
    "output name a dict": ("models/model.json", lambda d: _node(d, "add")["outputs"][0]["as_tensor"].update(name={})),
    "output name a list": ("models/model.json", lambda d: _node(d, "relu")["outputs"][0]["as_tensor"].update(name=[1])),
    "float argument 10**400": ("models/model.json",
                               lambda d: _node(d, "slice_1")["inputs"][1].update(arg={"as_float": 10**400})),
    # _tensor: storage_offset an empty list (IndexError); sizes / strides / offset past int64 (TypeError, ValueError)
    "storage_offset []": ("data/weights/model_weights_config.json",
                          lambda d: _meta(d, "lin.bias").update(storage_offset=[])),
    "size 2**64 next to a 0": ("data/weights/model_weights_config.json",
                               lambda d: _meta(d, "tw").update(sizes=[{"as_int": 0}, {"as_int": 2**64}])),
    "storage_offset 2**70, size 0": ("data/constants/model_constants_config.json",
                                     lambda d: _meta(d, "lifted_tensor_0").update(
                                         sizes=[{"as_int": 0}], storage_offset={"as_int": 2**70})),
    "stride 2**63": ("data/weights/model_weights_config.json",
                     lambda d: _meta(d, "tw").update(sizes=[{"as_int": 0}, {"as_int": 4}],
                                                     strides=[{"as_int": 2**63}, {"as_int": 4}])),
}


@pytest.mark.parametrize("case", sorted(REGRESSIONS))
def test_load_program_regressions(base_archive, tmp_path, case):
    root, files = base_archive
    member, edit = REGRESSIONS[case]
    doc = json.loads(files[member])
    edit(doc)
    _write_zip(tmp_path / "x.pt2", root, {**files, member: _dump(doc)})
    assert _check_load(tmp_path / "x.pt2", tmp_path / "CANARY").startswith("InputError")


@pytest.mark.parametrize("expr", HOSTILE_EXPRS)
def test_hostile_shape_expressions_refused(expr):
    """Regression examples: each of these would hang or exhaust memory in sympy; check_expr refuses them."""
    from pt2c.frontend.archive import check_expr

    with pytest.raises(InputError, match="refused"):
        check_expr(expr, "w")


@examples(150)
@given(data=st.data())
def test_load_program_tensor_edits(base_archive, tmp_path_factory, data):
    event(_check_load(*_edited_archive(tmp_path_factory, base_archive, data, ("tensors",))))


# pickle opcodes the sample-inputs reader refuses or must handle: GLOBAL, REDUCE, BUILD, MARK, TUPLE, STOP,
# STACK_GLOBAL, INST, OBJ, NEWOBJ, EXT1, PERSID, BINPERSID, APPEND(S), SETITEM(S), DICT, LIST, POP, DUP, GET
PICKLE_OPS = [b"c", b"R", b"b", b"(", b"t", b".", b"\x93", b"i", b"o", b"\x81", b"\x82", b"P", b"Q", b"a", b"e",
              b"s", b"u", b"d", b"l", b"0", b"2", b"h\x00", b"q\xff", b"K\xff", b"J\xff\xff\xff\x7f",
              b"cos\nsystem\n", b"ctorch\nFloatStorage\n", b"cbuiltins\neval\n", b"\x8a\x09" + b"\xff" * 9]


@examples(120)
@given(data=st.data())
def test_load_program_sample_inputs_edits(base_archive, tmp_path_factory, data):
    """The sample inputs (read only by pt2c verify) are a torch.save zip whose data.pkl the reader interprets
    without unpickling: its opcodes edited (flipped, cut, replaced by others, GLOBAL os.system ...), its
    storages cut or dropped, then zipped again."""
    import io

    root, files = base_archive
    inner = zipfile.ZipFile(io.BytesIO(files["data/sample_inputs/model.pt"]))
    members = {i.filename: inner.read(i) for i in inner.infolist()}
    pkl_name = next(n for n in members if n.endswith("data.pkl"))
    pkl = bytearray(members[pkl_name])
    for _ in range(data.draw(st.integers(1, 4))):
        kind = data.draw(st.sampled_from(["flip", "cut", "insert", "replace", "storage"]))
        i = data.draw(st.integers(0, max(len(pkl) - 1, 0)))
        if kind == "flip" and pkl:
            pkl[i] ^= 1 << data.draw(st.integers(0, 7))
        elif kind == "cut":
            pkl = pkl[:i]
        elif kind in ("insert", "replace"):
            op = data.draw(st.sampled_from(PICKLE_OPS))
            pkl[i:i + (len(op) if kind == "replace" else 0)] = op
        elif kind == "storage" and any("/data/" in n for n in members):
            storages = sorted(n for n in members if "/data/" in n)
            name = data.draw(st.sampled_from(storages))
            members[name] = members[name][:data.draw(st.integers(0, len(members[name])))]
            if data.draw(st.booleans()):
                del members[name]
    members[pkl_name] = bytes(pkl)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for n, b in members.items():
            z.writestr(n, b)
    d = tmp_path_factory.mktemp("sample", numbered=True)
    _write_zip(d / "x.pt2", root, {**files, "data/sample_inputs/model.pt": buf.getvalue()})
    event(_check_load(d / "x.pt2", d / "CANARY", sample_inputs=True))
