"""Property-based fuzzing (hypothesis, derandomized) of the two input parsers.

(a) the C weights-blob loader, ``<name>_init``, through ctypes: random
    mutations, truncations and extensions of a real blob never crash, and init
    succeeds exactly when every byte it is specified to check is intact (the
    first ``64 + data size`` bytes, minus the reserved header bytes, see
    RESERVED); otherwise it returns one of the weights error codes.
(b) the ``.pt2`` reader: random bytes, truncated and bit-flipped real archives
    make ``read_pt2_header`` / ``load_program`` raise ``InputError`` (or, for a
    flip that does not matter, succeed), never another exception type.

A libFuzzer + ASan harness for (a), not run by CI, is tests/fuzz/fuzz_init.c.
"""

from __future__ import annotations

import ctypes
import struct
import warnings
import zipfile
from pathlib import Path

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis", reason="hypothesis not installed (pip install hypothesis)")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from pt2c.errors import InputError  # noqa: E402

HEADER = 64
# Bytes of the 64-byte header that init does not read: none (the CRC field is
# compared whole, the reserved bytes 32..63 must be zero).
RESERVED: set[int] = set()

FUZZ = settings(derandomize=True, deadline=None, database=None,
                suppress_health_check=list(HealthCheck), print_blob=True)

# status codes of the C API (see cwriter.STATUS)
OK = 0
WEIGHTS_ERRORS = {3, 4, 5, 6, 7}  # truncated, magic, version, mismatch, corrupt


# --------------------------------------------------------------------------- (a) the blob loader


class Loader:
    def __init__(self, lib_path: Path, name: str, blob: bytes):
        self.lib = ctypes.CDLL(str(lib_path))
        self.init = getattr(self.lib, f"{name}_init")
        self.init.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
        self.init.restype = ctypes.c_int
        ws_size = getattr(self.lib, f"{name}_workspace_size")
        ws_size.restype = ctypes.c_size_t
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
        return self.init(self.ctx, buf.ctypes.data, len(data), self.ws.ctypes.data)

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


@settings(FUZZ, max_examples=400)
@given(data=st.data())
def test_blob_loader_mutations(loader, data):
    blob = data.draw(mutated_blobs(loader.blob))
    rc = loader(blob)
    if loader.intact(blob):
        assert rc == OK
    else:
        assert rc in WEIGHTS_ERRORS, rc


@settings(FUZZ, max_examples=200)
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


@settings(FUZZ, max_examples=150)
@given(blob=st.one_of(st.binary(max_size=2048), st.binary(max_size=64).map(lambda b: b"PK\x03\x04" + b)))
def test_pt2_header_random_bytes(tmp_path_factory, blob):
    from pt2c.frontend.load import read_pt2_header

    p = tmp_path_factory.mktemp("rnd", numbered=True) / "x.pt2"
    p.write_bytes(blob)
    with pytest.raises(InputError):
        read_pt2_header(p)


@settings(FUZZ, max_examples=250)
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


@settings(FUZZ, max_examples=60)
@given(data=st.data())
def test_load_program_mutations(pt2_file, tmp_path_factory, data):
    """The full load (torch.export.load after our header checks): InputError or a program."""
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
