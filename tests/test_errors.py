"""User-facing errors: unsupported ops, unreadable .pt2 inputs, runner argument checks, and
the C API's weights/ctx status codes."""

from __future__ import annotations

import ctypes
import json
import os
import re
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

import pt2c
from conftest import TARGET, export, private_lib_copy
from pt2c.errors import InputError, UnsupportedError
from pt2c.ops import LOWERINGS
from pt2c.runtime.runner import RunError
from pt2c import zoo

THIS_FILE = Path(__file__).name


# --------------------------------------------------------------------------- (a) unsupported ops


class Bessel(torch.nn.Module):
    def forward(self, x):
        return torch.special.bessel_j0(x)  # LINE_BESSEL


class Unsupported(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.first = Bessel()
        self.lin = torch.nn.Linear(8, 8)
        self.second = Bessel()

    def forward(self, x):
        y = self.first(x) + self.second(self.lin(x))
        return torch.special.erfcx(y)  # LINE_ERFCX


def _line_of(marker: str) -> int:
    for i, line in enumerate(Path(__file__).read_text().splitlines(), 1):
        if marker in line and "_line_of" not in line:
            return i
    raise AssertionError(marker)


def test_unsupported_ops_are_not_lowered():
    # guard: if pt2c learns these ops, this test needs other ones
    assert "aten.special_bessel_j0.default" not in LOWERINGS
    assert "aten.special_erfcx.default" not in LOWERINGS


def test_unsupported_lists_every_node(tmp_path):
    x = torch.randn(2, 8)
    ep = export(Unsupported().eval(), (x,))
    with pytest.raises(UnsupportedError) as ei:
        pt2c.compile(ep, tmp_path / "out", target=TARGET, name="bad")
    msg = str(ei.value)
    # every problem is reported at once
    assert "2 unsupported op(s) in 3 node(s)" in msg, msg
    assert "aten.special_bessel_j0.default" in msg and "aten.special_erfcx.default" in msg
    assert "(2 nodes)" in msg and "(1 node)" in msg
    lines = msg.splitlines()
    bessel = [ln for ln in lines if "special_bessel_j0" in ln and "node '" in ln]
    erfcx = [ln for ln in lines if "special_erfcx" in ln and "node '" in ln]
    assert len(bessel) == 2 and len(erfcx) == 1, msg
    # node names
    assert {re.search(r"node '([^']+)'", ln).group(1) for ln in bessel} == {"special_bessel_j0",
                                                                          "special_bessel_j0_1"}
    # module paths (and types) of both call sites
    assert any("module 'first'" in ln and "Bessel" in ln for ln in bessel), bessel
    assert any("module 'second'" in ln and "Bessel" in ln for ln in bessel), bessel
    # source lines, file:line
    lb, le = _line_of("# LINE_BESSEL"), _line_of("# LINE_ERFCX")
    assert all(f"{THIS_FILE}:{lb}" in ln and "bessel_j0(x)" in ln for ln in bessel), bessel
    assert f"{THIS_FILE}:{le}" in erfcx[0] and "erfcx(y)" in erfcx[0], erfcx
    assert "What to try" in msg
    # structured data too
    assert len(ei.value.problems) == 3
    # no partial output folder contents
    assert not (tmp_path / "out" / "bad.c").exists()


# --------------------------------------------------------------------------- (b) bad .pt2 inputs


@pytest.fixture(scope="module")
def mlp_pt2(tmp_path_factory):
    model, inputs = zoo.mlp("tiny")
    p = tmp_path_factory.mktemp("pt2") / "mlp.pt2"
    torch.export.save(export(model, inputs), p)
    return p


def _rewrite_zip(src: Path, dst: Path, edit) -> None:
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", compression=zipfile.ZIP_STORED) as zout:
        for info in zin.infolist():
            data = zin.read(info.filename)
            if info.filename.endswith("models/model.json"):
                data = edit(data)
            zout.writestr(info, data)


def test_pt2_roundtrip_compiles(mlp_pt2, tmp_path):
    art = pt2c.compile(mlp_pt2, tmp_path / "ok", target=TARGET)
    assert art.name == "mlp"
    assert art.manifest["source"] == "mlp.pt2"


def test_missing_pt2(tmp_path):
    p = tmp_path / "nope.pt2"
    with pytest.raises(InputError) as ei:
        pt2c.compile(p, tmp_path / "out")
    msg = str(ei.value)
    assert str(p) in msg and "no such file" in msg.lower()
    assert "torch.export.save" in msg


def test_random_bytes_pt2(tmp_path):
    p = tmp_path / "random.pt2"
    p.write_bytes(np.random.default_rng(0).integers(0, 256, 4096, dtype=np.uint8).tobytes())
    with pytest.raises(InputError) as ei:
        pt2c.compile(p, tmp_path / "out")
    msg = str(ei.value)
    assert str(p) in msg and "not a .pt2 archive" in msg and "zip" in msg


def test_truncated_pt2(mlp_pt2, tmp_path):
    raw = mlp_pt2.read_bytes()
    p = tmp_path / "half.pt2"
    p.write_bytes(raw[: len(raw) // 2])
    with pytest.raises(InputError) as ei:
        pt2c.compile(p, tmp_path / "out")
    msg = str(ei.value)
    assert str(p) in msg and ("truncated" in msg or "corrupt" in msg), msg


def test_corrupt_member_pt2(mlp_pt2, tmp_path):
    """A zip whose model.json is not JSON: InputError, not a JSONDecodeError."""
    p = tmp_path / "badjson.pt2"
    _rewrite_zip(mlp_pt2, p, lambda data: data[: len(data) // 2])
    with pytest.raises(InputError) as ei:
        pt2c.compile(p, tmp_path / "out")
    assert "corrupt" in str(ei.value)


def test_zip_without_program(tmp_path):
    p = tmp_path / "other.pt2"
    with zipfile.ZipFile(p, "w") as z:
        z.writestr("hello.txt", "hi")
    with pytest.raises(InputError) as ei:
        pt2c.compile(p, tmp_path / "out")
    assert "models/model.json" in str(ei.value)


def _bump(major: int | None = None, minor: int | None = None):
    def edit(data: bytes) -> bytes:
        j = json.loads(data)
        if major is not None:
            j["schema_version"]["major"] = major
        if minor is not None:
            j["schema_version"]["minor"] = minor
        return json.dumps(j).encode()

    return edit


def test_future_schema_major(mlp_pt2, tmp_path):
    p = tmp_path / "future.pt2"
    _rewrite_zip(mlp_pt2, p, _bump(major=99))
    with pytest.raises(InputError) as ei:
        pt2c.compile(p, tmp_path / "out")
    msg = str(ei.value)
    assert str(p) in msg and "schema 99." in msg and "not supported" in msg, msg
    assert "What to try" in msg


def test_future_schema_minor(mlp_pt2, tmp_path):
    p = tmp_path / "future_minor.pt2"
    _rewrite_zip(mlp_pt2, p, _bump(minor=999))
    with pytest.raises(InputError) as ei:
        pt2c.compile(p, tmp_path / "out")
    assert "schema 8.999" in str(ei.value)


# --------------------------------------------------------------------------- (c) runner checks


@pytest.fixture(scope="module")
def mlp_model(mlp_compiled):
    return pt2c.load(mlp_compiled.out_dir, lib=mlp_compiled.gcc_lib())


def test_runner_wrong_shape(mlp_model):
    with pytest.raises(RunError) as ei:
        mlp_model.run([np.zeros((4, 31), np.float32)])
    msg = str(ei.value)
    assert "'x'" in msg and "(4, 32)" in msg and "(4, 31)" in msg, msg


def test_runner_wrong_dtype(mlp_model):
    with pytest.raises(RunError) as ei:
        mlp_model.run([np.zeros((4, 32), np.float64)])
    msg = str(ei.value)
    assert "'x'" in msg and "float32" in msg and "float64" in msg, msg


def test_runner_wrong_count(mlp_model):
    x = np.zeros((4, 32), np.float32)
    for args in ([], [x, x]):
        with pytest.raises(RunError) as ei:
            mlp_model.run(args)
        msg = str(ei.value)
        assert "takes 1 input" in msg and "x" in msg and f"got {len(args)}" in msg, msg
    with pytest.raises(RunError) as ei:
        mlp_model.run({"y": x})
    assert "'x'" in str(ei.value)


def test_runner_still_works_after_errors(mlp_model, mlp_compiled):
    out = mlp_model.run(mlp_compiled.np_inputs)
    np.testing.assert_allclose(out[0], mlp_compiled.refs[0], atol=1e-4)


def test_runner_takes_any_array_like(mlp_model, mlp_compiled):
    # read-only and column-major inputs give the same outputs as a plain array; every call returns
    # new output arrays
    x = mlp_compiled.np_inputs[0]
    ref = mlp_model.run([x])[0]
    ro = np.frombuffer(x.tobytes(), np.float32).reshape(x.shape)
    assert not ro.flags.writeable
    strided = np.asfortranarray(x)
    for arg in (ro, strided, {"x": ro}):
        out = mlp_model.run(arg if isinstance(arg, dict) else [arg])[0]
        assert out is not ref and np.array_equal(out, ref)


# --------------------------------------------------------------------------- (d) C API status codes


def _aligned_bytes(data: bytes, align: int = 64, offset: int = 0) -> tuple[np.ndarray, int]:
    """A buffer holding data at an address with the given alignment (+offset); returns (keepalive, address)."""
    raw = np.zeros(len(data) + 2 * align + offset, np.uint8)
    start = (-raw.ctypes.data) % align + offset
    raw[start:start + len(data)] = np.frombuffer(data, np.uint8)
    return raw, raw.ctypes.data + start


class CApi:
    def __init__(self, out_dir: Path, name: str, lib: Path):
        self.name = name
        header = (out_dir / f"{name}.h").read_text()
        self.codes = {m.group(1): int(m.group(2))
                      for m in re.finditer(rf"\b{name.upper()}_((?:OK|ERR_\w+))\s*=\s*(\d+)", header)}
        self.ws_bytes = int(re.search(rf"#define {name.upper()}_WORKSPACE_BYTES (\d+)u", header).group(1))
        self.lib = ctypes.CDLL(str(lib))
        self.init_checked = getattr(self.lib, f"{name}_init_checked")
        self.init_checked.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p,
                                      ctypes.c_size_t, ctypes.c_uint64]
        self.init_checked.restype = ctypes.c_int
        self.signature = int(re.search(rf"#define {name.upper()}_SIGNATURE UINT64_C\((0x[0-9a-f]+)\)", header).group(1), 16)
        self.run_v = getattr(self.lib, f"{name}_run_v")
        self.run_v.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
        self.run_v.restype = ctypes.c_int
        self.strerror = getattr(self.lib, f"{name}_strerror")
        self.strerror.argtypes = [ctypes.c_int]
        self.strerror.restype = ctypes.c_char_p
        self._ws, self.ws = _aligned_bytes(b"\0" * max(self.ws_bytes, 64))

    def init(self, ctx, ptr, size, ws, ws_size: int | None = None, signature: int | None = None) -> int:
        """What <name>_init (a macro of the header) does: the header's signature, the workspace's size."""
        return self.init_checked(ctx, ptr, size, ws, max(self.ws_bytes, 64) if ws_size is None else ws_size,
                                 self.signature if signature is None else signature)

    def try_init(self, blob: bytes | None, size: int | None = None, ws: int | None = -1,
                 blob_offset: int = 0, **kw: int) -> int:
        ctx = ctypes.create_string_buffer(256)
        if blob is None:
            ptr = None
        else:
            keep, ptr = _aligned_bytes(blob, offset=blob_offset)  # noqa: F841 (kept alive for the call)
        rc = self.init(ctx, ptr, len(blob) if size is None and blob is not None else (size or 0),
                       self.ws if ws == -1 else ws, **kw)
        return rc


@pytest.fixture(scope="module")
def capi(mlp_compiled):
    return CApi(mlp_compiled.out_dir, mlp_compiled.name, private_lib_copy(mlp_compiled.gcc_lib()))


@pytest.fixture(scope="module")
def mlp_blob(mlp_compiled):
    return (mlp_compiled.out_dir / mlp_compiled.artifact.manifest["weights"]["file"]).read_bytes()


@pytest.fixture(scope="module")
def other_blob(tmp_path_factory, mlp_compiled):
    """Same architecture, different weights: a blob from a different compile."""
    torch.manual_seed(1234)
    model = zoo.MLP((32, 64, 64, 10)).eval()
    x = mlp_compiled.inputs[0]
    d = tmp_path_factory.mktemp("other")
    art = pt2c.compile(export(model, (x,)), d / "mlp", target=TARGET, name=mlp_compiled.name)
    blob = (Path(art.out_dir) / art.manifest["weights"]["file"]).read_bytes()
    return blob


def test_status_codes_distinct(capi):
    want = {"OK", "ERR_NULL_ARG", "ERR_ALIGN", "ERR_WEIGHTS_TRUNCATED", "ERR_WEIGHTS_MAGIC", "ERR_WEIGHTS_VERSION",
            "ERR_WEIGHTS_MISMATCH", "ERR_WEIGHTS_CORRUPT", "ERR_NOT_INITIALIZED"}
    assert want <= set(capi.codes), capi.codes
    assert capi.codes["OK"] == 0
    assert len(set(capi.codes.values())) == len(capi.codes)
    msgs = {capi.strerror(v).decode() for v in capi.codes.values()}
    assert len(msgs) == len(capi.codes), msgs  # a distinct message per code
    assert capi.strerror(12345)  # unknown codes still give a string, not NULL


def test_init_ok(capi, mlp_blob):
    assert capi.try_init(mlp_blob) == 0


def _expect(capi, rc: int, code: str, *words: str) -> None:
    assert rc == capi.codes[code], f"got {rc} ({capi.strerror(rc).decode()}), expected {code}"
    msg = capi.strerror(rc).decode().lower()
    for w in words:
        assert w in msg, f"strerror({code}) = {msg!r} lacks {w!r}"


def test_weights_truncated(capi, mlp_blob):
    _expect(capi, capi.try_init(mlp_blob[: len(mlp_blob) // 2]), "ERR_WEIGHTS_TRUNCATED", "truncated")
    _expect(capi, capi.try_init(mlp_blob[:-1]), "ERR_WEIGHTS_TRUNCATED", "truncated")
    _expect(capi, capi.try_init(mlp_blob[:10]), "ERR_WEIGHTS_TRUNCATED", "truncated")


def test_weights_corrupt(capi, mlp_blob):
    b = bytearray(mlp_blob)
    b[64 + (len(b) - 64) // 2] ^= 0x01  # one flipped bit in the tensor data
    _expect(capi, capi.try_init(bytes(b)), "ERR_WEIGHTS_CORRUPT", "corrupt")
    b = bytearray(mlp_blob)
    b[-1] ^= 0x80
    _expect(capi, capi.try_init(bytes(b)), "ERR_WEIGHTS_CORRUPT", "corrupt")


def test_weights_mismatch(capi, mlp_blob, other_blob):
    assert len(other_blob) == len(mlp_blob) and other_blob != mlp_blob
    _expect(capi, capi.try_init(other_blob), "ERR_WEIGHTS_MISMATCH", "weights")


def test_weights_bad_magic(capi, mlp_blob):
    b = bytearray(mlp_blob)
    b[0:4] = b"XXXX"
    _expect(capi, capi.try_init(bytes(b)), "ERR_WEIGHTS_MAGIC", "magic")


def test_weights_bad_version(capi, mlp_blob):
    b = bytearray(mlp_blob)
    b[8] = 99  # format version (little-endian u32 after the 8-byte magic)
    _expect(capi, capi.try_init(bytes(b)), "ERR_WEIGHTS_VERSION", "version")


def test_init_null_args(capi, mlp_blob):
    _expect(capi, capi.try_init(mlp_blob, ws=None), "ERR_NULL_ARG")
    _expect(capi, capi.try_init(None, size=0), "ERR_NULL_ARG")  # weights are not embedded
    assert capi.init(None, None, 0, None) == capi.codes["ERR_NULL_ARG"]


def test_init_checks_workspace_size_and_signature(capi, mlp_blob):
    """A workspace shorter than <NAME>_WORKSPACE_BYTES, or a header of another compile (its
    <NAME>_SIGNATURE), is refused before anything is written."""
    assert capi.ws_bytes > 64
    _expect(capi, capi.try_init(mlp_blob, ws_size=capi.ws_bytes - 1), "ERR_WORKSPACE_SIZE", "workspace")
    _expect(capi, capi.try_init(mlp_blob, ws_size=0), "ERR_WORKSPACE_SIZE", "workspace")
    assert capi.try_init(mlp_blob, ws_size=capi.ws_bytes) == 0
    _expect(capi, capi.try_init(mlp_blob, signature=capi.signature ^ 1), "ERR_SIGNATURE", "header")
    _expect(capi, capi.try_init(mlp_blob, signature=0), "ERR_SIGNATURE", "header")


def test_run_null_pointers_in_arrays(capi, mlp_compiled, mlp_blob):
    """NULL anywhere (ctx, the arrays, an entry of either) gives ERR_NULL_ARG, never a crash."""
    ctx = ctypes.create_string_buffer(256)
    keep, ptr = _aligned_bytes(mlp_blob)
    assert capi.init(ctx, ptr, len(mlp_blob), capi.ws) == 0
    x = np.ascontiguousarray(mlp_compiled.np_inputs[0])
    out = np.zeros((4, 10), np.float32)
    good_in, good_out = (ctypes.c_void_p * 1)(x.ctypes.data), (ctypes.c_void_p * 1)(out.ctypes.data)
    null1 = (ctypes.c_void_p * 1)(None)
    for args in ((None, good_in, good_out), (ctx, None, good_out), (ctx, good_in, None), (ctx, null1, good_out),
                 (ctx, good_in, null1)):
        _expect(capi, capi.run_v(*args), "ERR_NULL_ARG")
    assert capi.run_v(ctx, good_in, good_out) == 0
    del keep


def test_init_misaligned(capi, mlp_blob):
    _expect(capi, capi.try_init(mlp_blob, ws=capi.ws + 8), "ERR_ALIGN", "align")
    _expect(capi, capi.try_init(mlp_blob, blob_offset=4), "ERR_ALIGN", "align")


def test_run_before_init(capi, mlp_compiled):
    x = np.ascontiguousarray(mlp_compiled.np_inputs[0])
    out = np.zeros((4, 10), np.float32)
    ins = (ctypes.c_void_p * 1)(x.ctypes.data)
    outs = (ctypes.c_void_p * 1)(out.ctypes.data)
    ctx = ctypes.create_string_buffer(256)  # zeroed, never initialised
    _expect(capi, capi.run_v(ctx, ins, outs), "ERR_NOT_INITIALIZED", "init")
    # a failed init leaves the ctx unusable too
    b = bytearray((mlp_compiled.out_dir / f"{mlp_compiled.name}.weights").read_bytes())
    b[0] ^= 0xFF
    keep, ptr = _aligned_bytes(bytes(b))
    assert capi.init(ctx, ptr, len(b), capi.ws) == capi.codes["ERR_WEIGHTS_MAGIC"]
    _expect(capi, capi.run_v(ctx, ins, outs), "ERR_NOT_INITIALIZED")
    # and a good init then run works
    keep, ptr = _aligned_bytes((mlp_compiled.out_dir / f"{mlp_compiled.name}.weights").read_bytes())
    assert capi.init(ctx, ptr, len(b), capi.ws) == 0
    assert capi.run_v(ctx, ins, outs) == 0
    np.testing.assert_allclose(out, mlp_compiled.refs[0], atol=1e-4)
    del keep


def test_runner_reports_init_failure(mlp_compiled, tmp_path):
    """pt2c.load on a folder with a corrupt weights file raises RunError with the C message."""
    import shutil

    d = tmp_path / "mlp"
    shutil.copytree(mlp_compiled.out_dir, d, ignore=shutil.ignore_patterns("build"))
    w = d / mlp_compiled.artifact.manifest["weights"]["file"]
    b = bytearray(w.read_bytes())
    b[100] ^= 0x10
    w.write_bytes(bytes(b))
    with pytest.raises(RunError) as ei:
        pt2c.load(d, lib=private_lib_copy(mlp_compiled.gcc_lib()))
    assert "corrupt" in str(ei.value).lower()


def test_unsupported_torch_version_is_refused(monkeypatch):
    """A torch outside the tested range is refused, naming both versions and what to do."""
    import torch

    from pt2c.errors import InputError
    from pt2c.frontend import load

    monkeypatch.delenv("PT2C_ALLOW_UNTESTED_TORCH", raising=False)
    monkeypatch.setattr(torch, "__version__", "2.99.0")
    with pytest.raises(InputError) as e:
        load.check_torch_version()
    msg = str(e.value)
    assert "2.99.0" in msg and "2.13" in msg and "PT2C_ALLOW_UNTESTED_TORCH" in msg
    monkeypatch.setenv("PT2C_ALLOW_UNTESTED_TORCH", "1")
    assert load.check_torch_version() == "2.99.0"


def test_runner_binds_threads_unless_told(mlp_compiled, monkeypatch):
    # 2+ threads: one per core (unbound, the worker at times shared the main thread's core);
    # 1 thread: no binding (libgomp would pin the process to one core); a caller's choice stands
    keys = ("OMP_NUM_THREADS", "OMP_PROC_BIND", "OMP_PLACES", "GOMP_CPU_AFFINITY", "OMP_WAIT_POLICY",
            "GOMP_SPINCOUNT")
    for k in keys:
        monkeypatch.delenv(k, raising=False)
    lib = mlp_compiled.gcc_lib()
    seen = []
    real_cdll = ctypes.CDLL

    def cdll(path, *a, **k):  # the environment libgomp reads when the library loads
        seen.append((os.environ.get("OMP_PROC_BIND"), os.environ.get("OMP_PLACES")))
        return real_cdll(path, *a, **k)

    monkeypatch.setattr(ctypes, "CDLL", cdll)
    pt2c.load(mlp_compiled.out_dir, lib=lib, threads=1)
    assert os.environ["GOMP_SPINCOUNT"] == "20000"
    pt2c.load(mlp_compiled.out_dir, lib=lib, threads=2)
    monkeypatch.setenv("OMP_PROC_BIND", "false")
    pt2c.load(mlp_compiled.out_dir, lib=lib, threads=4)
    assert seen == [(None, None), ("close", "cores"), ("false", None)]
    # not left for child processes (libgomp would pin each one's main thread to the same core)
    assert os.environ["OMP_PROC_BIND"] == "false" and "OMP_PLACES" not in os.environ


def test_runner_threads_hold_when_libgomp_is_already_loaded(mlp_compiled):
    # torch (imported by this test process) loaded its libgomp.so.1 first, with its own thread
    # count; the library binds to that runtime, so OMP_NUM_THREADS alone would be ignored
    lib = mlp_compiled.gcc_lib()
    for n in (1, 2):
        m = pt2c.load(mlp_compiled.out_dir, lib=lib, threads=n)
        assert m.lib.omp_get_max_threads() == n
