"""Package a built artifact as a Python wheel that needs neither torch nor pt2c.

The wheel holds one import package named after the model::

    <name>/__init__.py        numpy + ctypes loader: import <name>; m = <name>.load(); y = m(x)
    <name>/lib<name>.so       the shared library (built with the artifact's Makefile if missing)
    <name>/<name>.weights     the weights blob (absent when the weights are embedded)
    <name>/manifest.json      the artifact's manifest (I/O names, shapes, dtypes, ...)

It is tagged ``py3-none-<platform>``: the library is loaded with ctypes, so
any Python 3 works, but the machine code ties it to one platform.  The platform
is read from the library's ELF header (``linux_x86_64``, ``linux_aarch64``,
...), so a cross-built library gets the right tag.  The tag is the plain
``linux_*`` one: PyPI wants ``manylinux``; run ``auditwheel repair`` on the
result for that (it also vendors ``libgomp`` when the library uses OpenMP).

The wheel's bytes are a pure function of its contents: entries are sorted,
timestamps fixed (1980-01-01) and permissions normalised.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import re
import struct
import sys
import sysconfig
import zipfile
from pathlib import Path
from typing import Any

from pt2c.errors import Pt2cError

__all__ = ["WheelError", "build_wheel"]

_EPOCH = (1980, 1, 1, 0, 0, 0)

# ELF e_machine -> wheel platform machine name
_ELF_MACHINES = {3: "i686", 62: "x86_64", 40: "armv7l", 183: "aarch64", 243: "riscv64", 21: "ppc64le", 22: "s390x"}


class WheelError(Pt2cError):
    """The artifact cannot be packaged (not built, not a pt2c folder, ...)."""


_LOADER = '''"""The model `@name@`, compiled to C by pt2c @pt2c_version@ (target preset @target@).

numpy + ctypes only (no torch, no pt2c):

    import @name@
    model = @name@.load()          # binds lib@name@.so to the bundled @name@.weights
    y = model(x)                   # numpy in, numpy out (tuple when several outputs)
    ys = model.run({"x": x})       # dict or list of inputs -> list of outputs

Inputs: @inputs@
Outputs: @outputs@
"""

import ctypes
import json
import mmap
import os
import threading

import numpy as np

__all__ = ["Model", "ModelError", "load", "manifest"]

_HERE = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(_HERE, "manifest.json"), encoding="utf-8") as _f:
    manifest = json.load(_f)

_NAME = "@name@"
_DTYPES = {"float32": np.float32, "float64": np.float64, "int64": np.int64, "int32": np.int32,
           "int16": np.int16, "int8": np.int8, "uint8": np.uint8, "bool": np.bool_,
           "bfloat16": np.uint16, "float16": np.float16}  # bfloat16: uint16 arrays carry the bits
_lib = None


class ModelError(RuntimeError):
    pass


def _library(threads=None):
    global _lib
    if _lib is None:
        if threads is not None:
            os.environ["OMP_NUM_THREADS"] = str(threads)
        lib = ctypes.CDLL(os.path.join(_HERE, "lib" + _NAME + ".so"))
        fn = lambda s: getattr(lib, _NAME + "_" + s)  # noqa: E731
        fn("abi_version").restype = ctypes.c_int
        for s, res in (("workspace_size", ctypes.c_size_t), ("ctx_size", ctypes.c_size_t),
                       ("signature", ctypes.c_uint64), ("strerror", ctypes.c_char_p)):
            fn(s).restype = res
        fn("strerror").argtypes = [ctypes.c_int]
        fn("init_checked").argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p,
                                       ctypes.c_size_t, ctypes.c_uint64]
        fn("run_v").argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
        if fn("abi_version")() != manifest["abi_version"]:
            raise ModelError("lib%s.so: ABI version %d, manifest says %d" % (_NAME, fn("abi_version")(), manifest["abi_version"]))
        if "0x%016x" % fn("signature")() != manifest.get("signature"):
            raise ModelError("lib%s.so and manifest.json come from different compiles (signature)" % _NAME)
        _lib = lib
    return _lib


class _Desc(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("dtype", ctypes.c_int), ("rank", ctypes.c_int),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("nbytes", ctypes.c_size_t)]


def _library_io(lib, kind):
    """The library's own descriptor table (<name>_inputs() / _outputs()); the manifest must agree."""
    count, table = getattr(lib, "%s_num_%s" % (_NAME, kind)), getattr(lib, "%s_%s" % (_NAME, kind))
    count.restype, table.restype = ctypes.c_int, ctypes.POINTER(_Desc)
    t, names = table(), list(_DTYPES)
    io = [{"name": t[i].name.decode(), "dtype": names[t[i].dtype] if 0 <= t[i].dtype < len(names) else "?",
           "shape": [int(t[i].shape[k]) for k in range(t[i].rank)]} for i in range(count())]
    if [(d["name"], d["dtype"], list(d["shape"])) for d in io] != \
            [(d["name"], d["dtype"], list(d["shape"])) for d in manifest[kind]]:
        raise ModelError("manifest.json's %s do not match lib%s.so's" % (kind, _NAME))
    return io


def _aligned(nbytes, align=64):
    raw = np.zeros(nbytes + align, dtype=np.uint8)
    off = (-raw.ctypes.data) % align
    return raw[off:off + nbytes]


def _big_buffer(nbytes):
    """Weights / workspace: on Linux, from 2 MiB on, a private mapping on a 2 MiB boundary marked
    MADV_HUGEPAGE (transparent huge pages: fewer TLB misses when the caches are cold)."""
    if nbytes >= 1 << 21 and hasattr(mmap, "MADV_HUGEPAGE"):
        try:
            m = mmap.mmap(-1, nbytes + (1 << 21), flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
            raw = np.frombuffer(m, dtype=np.uint8)  # keeps the mapping alive
            off = (-raw.ctypes.data) % (1 << 21)
            m.madvise(mmap.MADV_HUGEPAGE, off, nbytes)
            return raw[off:off + nbytes]
        except (OSError, ValueError):
            pass
    return _aligned(nbytes)


def _addr(a):
    """Data address of an array, through the buffer protocol (C code) where it can."""
    if a.nbytes and a.flags.writeable:
        return ctypes.addressof(ctypes.c_char.from_buffer(a))
    return a.ctypes.data


class Model:
    """The loaded model: one context + workspace; calls from several threads take turns (a lock);
    load one Model per thread for calls at the same time."""

    def __init__(self, weights=None, threads=None):
        self._lib = _library(threads)
        self.inputs = _library_io(self._lib, "inputs")
        self.outputs = _library_io(self._lib, "outputs")
        w = manifest["weights"]
        if w["embedded"] and weights is None:
            self._weights, wptr, wsize = None, None, 0
        else:
            path = weights if weights is not None else os.path.join(_HERE, w["file"])
            with open(path, "rb") as f:  # straight into the aligned buffer: no second copy
                self._weights = _big_buffer(os.fstat(f.fileno()).st_size)
                f.readinto(memoryview(self._weights))
            wptr, wsize = self._weights.ctypes.data, self._weights.nbytes
        self._ws = _big_buffer(max(self._fn("workspace_size")(), 64))
        self._ctx = ctypes.create_string_buffer(max(self._fn("ctx_size")(), 64))
        self._check(self._fn("init_checked")(self._ctx, wptr, wsize, self._ws.ctypes.data, self._ws.nbytes,
                                             self._fn("signature")()), "init")
        self._lock = threading.Lock()
        self._run_v = self._fn("run_v")  # (run() touches few objects: see pt2c's runtime/runner.py)
        self._in_specs = [(tuple(d["shape"]), np.dtype(_DTYPES[d["dtype"]])) for d in self.inputs]
        self._out_specs = [(tuple(d["shape"]), np.dtype(_DTYPES[d["dtype"]])) for d in self.outputs]
        self._in_ptrs = (ctypes.c_void_p * max(len(self.inputs), 1))()
        self._out_ptrs = (ctypes.c_void_p * max(len(self.outputs), 1))()

    def _fn(self, s):
        return getattr(self._lib, _NAME + "_" + s)

    def _check(self, rc, what):
        if rc != 0:
            raise ModelError("%s_%s failed with status %d: %s" % (_NAME, what, rc, self._fn("strerror")(rc).decode()))

    def __call__(self, *inputs):
        outs = self.run(list(inputs))
        return outs[0] if len(outs) == 1 else tuple(outs)

    def run(self, inputs):
        if isinstance(inputs, dict):
            missing = [d["name"] for d in self.inputs if d["name"] not in inputs]
            if missing:
                raise ModelError("missing input(s) %s" % missing)
            inputs = [inputs[d["name"]] for d in self.inputs]
        if len(inputs) != len(self.inputs):
            raise ModelError("%s takes %d input(s), got %d" % (_NAME, len(self.inputs), len(inputs)))
        arrays = []
        for i, (x, (shape, dtype)) in enumerate(zip(inputs, self._in_specs)):
            if not (type(x) is np.ndarray and x.dtype == dtype and x.shape == shape and x.flags.c_contiguous):
                x = self._input(i, x)
            arrays.append(x)  # (alive until the call returns)
        outs = [np.empty(shape, dtype) for shape, dtype in self._out_specs]
        with self._lock:  # one context, one workspace, one pair of pointer arrays
            for i, x in enumerate(arrays):
                self._in_ptrs[i] = _addr(x)
            for i, o in enumerate(outs):
                self._out_ptrs[i] = _addr(o)
            rc = self._run_v(self._ctx, self._in_ptrs, self._out_ptrs)
        if rc:
            self._check(rc, "run")
        return outs

    def _input(self, i, x):
        d = self.inputs[i]
        x = np.asarray(x)
        if tuple(x.shape) != tuple(d["shape"]):
            raise ModelError("input '%s': expected shape %s, got %s" % (d["name"], tuple(d["shape"]), x.shape))
        if x.dtype != np.dtype(_DTYPES[d["dtype"]]):
            raise ModelError("input '%s': expected dtype %s, got %s" % (d["name"], d["dtype"], x.dtype))
        return np.ascontiguousarray(x)


def load(weights=None, threads=None):
    """The model bound to the bundled weights (or to the weights file at `weights`).
    `threads` sets OMP_NUM_THREADS before the library is first loaded."""
    return Model(weights, threads)
'''


def _platform_tag(lib: Path) -> str:
    head = lib.read_bytes()[:20]
    if head[:4] == b"\x7fELF" and len(head) >= 20:
        endian = "<" if head[5] == 1 else ">"
        machine = struct.unpack(endian + "H", head[18:20])[0]
        if machine == 21 and head[5] == 2:
            return "linux_ppc64"
        if machine in _ELF_MACHINES:
            return f"linux_{_ELF_MACHINES[machine]}"
    return re.sub(r"[^A-Za-z0-9_]", "_", sysconfig.get_platform())


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _zip_entry(z: zipfile.ZipFile, arcname: str, data: bytes, mode: int = 0o644) -> None:
    info = zipfile.ZipInfo(arcname, date_time=_EPOCH)
    info.external_attr = (0o100000 | mode) << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    info.create_system = 3  # unix, so the mode bits are honoured
    z.writestr(info, data, compresslevel=9)


def build_wheel(out_dir: Any, dist_dir: Any, *, lib: Any = None, version: str | None = None) -> Path:
    """Package the artifact in ``out_dir`` as ``<dist_dir>/<name>-<version>-py3-none-<platform>.whl``.

    lib:     the shared library to ship (default ``out_dir/build/lib<name>.so``,
             built with the artifact's Makefile when missing).
    version: the wheel's version (default ``1.0.0+pt2c.<crc32 of the weights>``).
    Returns the wheel's path.
    """
    out_dir = Path(out_dir)
    mpath = out_dir / "manifest.json"
    if not mpath.is_file():
        raise WheelError(f"{out_dir}: no manifest.json; is this a pt2c output folder?\n"
                         f"What to try: pt2c compile model.pt2 -o {out_dir}")
    try:
        manifest = json.loads(mpath.read_text(encoding="utf-8"))
        name = manifest["name"]
        tensors = [(d["name"], d["dtype"], [int(n) for n in d["shape"]]) for d in manifest["inputs"] + manifest["outputs"]]
    except (ValueError, KeyError, TypeError) as e:
        raise WheelError(f"{mpath}: not a pt2c manifest ({type(e).__name__}: {e})") from None
    # the manifest's text goes into the loader's Python source and the wheel's paths: identifiers only
    plain = re.compile(r"[A-Za-z0-9_.,+-]*")
    if not (isinstance(name, str) and name.isidentifier() and name.isascii()) or not all(
            isinstance(n, str) and n.isidentifier() and n.isascii() and plain.fullmatch(str(dt)) for n, dt, _ in tensors) \
            or not all(plain.fullmatch(str(manifest.get(k, ""))) for k in ("pt2c_version", "target")):
        raise WheelError(f"{mpath}: names, dtypes, version or target are not plain identifiers (an edited manifest?)\n"
                         f"What to try: compile again: pt2c compile model.pt2 -o {out_dir}")
    if lib is None:
        lib = out_dir / "build" / f"lib{name}.so"
        if not lib.is_file():
            from pt2c.runtime.build import build

            lib = build(out_dir)
    lib = Path(lib)
    if not lib.is_file():
        raise WheelError(f"{lib}: no such library.\nWhat to try: pt2c build {out_dir}")
    w = manifest["weights"]
    version = version or f"1.0.0+pt2c.{w['crc32']}"
    if not re.fullmatch(r"[0-9]+(\.[0-9]+)*([a-z0-9.+]*)", version):
        raise WheelError(f"wheel version {version!r} is not a simple PEP 440 version (like 1.2.0 or 1.0+local)")

    files: dict[str, tuple[bytes, int]] = {}
    loader = _LOADER
    for key, value in (("pt2c_version", str(manifest.get("pt2c_version", ""))), ("target", str(manifest.get("target", ""))),
                       ("inputs", ", ".join(f"{d['name']} {d['dtype']}{d['shape']}" for d in manifest["inputs"])),
                       ("outputs", ", ".join(f"{d['name']} {d['dtype']}{d['shape']}" for d in manifest["outputs"])),
                       ("name", name)):
        loader = loader.replace(f"@{key}@", value)
    files[f"{name}/__init__.py"] = (loader.encode(), 0o644)
    files[f"{name}/lib{name}.so"] = (lib.read_bytes(), 0o755)
    files[f"{name}/manifest.json"] = (mpath.read_bytes(), 0o644)
    if not w["embedded"]:
        if Path(str(w["file"])).name != w["file"]:
            raise WheelError(f"{mpath}: weights file {str(w['file'])[:80]!r} is not a file name in {out_dir}")
        wfile = out_dir / w["file"]
        if not wfile.is_file():
            raise WheelError(f"{wfile}: weights file missing.\nWhat to try: recompile the model (pt2c compile)")
        files[f"{name}/{w['file']}"] = (wfile.read_bytes(), 0o644)

    plat = _platform_tag(lib)
    dist_name = re.sub(r"[^A-Za-z0-9.]+", "_", name)
    info = f"{dist_name}-{version}.dist-info"
    metadata = (
        "Metadata-Version: 2.1\n"
        f"Name: {name}\n"
        f"Version: {version}\n"
        f"Summary: The model {name}, compiled to C by pt2c (numpy + ctypes loader; no torch)\n"
        "Requires-Python: >=3.8\n"
        "Requires-Dist: numpy\n"
    )
    wheel = (
        "Wheel-Version: 1.0\n"
        f"Generator: pt2c {manifest.get('pt2c_version', '')}\n"
        "Root-Is-Purelib: false\n"
        f"Tag: py3-none-{plat}\n"
    )
    files[f"{info}/METADATA"] = (metadata.encode(), 0o644)
    files[f"{info}/WHEEL"] = (wheel.encode(), 0o644)
    order = sorted(files, key=lambda n: (n.startswith(info), n))  # the package first, .dist-info last
    record = "".join(f"{n},{_record_hash(files[n][0])},{len(files[n][0])}\n" for n in order)
    record += f"{info}/RECORD,,\n"

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for n in order:
            data, mode = files[n]
            _zip_entry(z, n, data, mode)
        _zip_entry(z, f"{info}/RECORD", record.encode())
    dist_dir = Path(dist_dir)
    dist_dir.mkdir(parents=True, exist_ok=True)
    path = dist_dir / f"{dist_name}-{version}-py3-none-{plat}.whl"
    path.write_bytes(buf.getvalue())
    return path


if __name__ == "__main__":  # python -m pt2c.packaging.wheel OUT [DIST]
    print(build_wheel(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "dist"))
