"""Run a built artifact from Python through ctypes: numpy in, numpy out, no torch."""

from __future__ import annotations

import ctypes
import json
import mmap
import os
import threading
from pathlib import Path
from typing import Any

import numpy as np

from pt2c.errors import Pt2cError

DTYPES = {"float32": np.float32, "float64": np.float64, "int64": np.int64, "int32": np.int32, "int16": np.int16,
          "int8": np.int8, "uint8": np.uint8, "bool": np.bool_,
          "bfloat16": np.uint16, "float16": np.float16}  # numpy has no bfloat16: uint16 arrays carry its bits


ABI_VERSION = 3  # the C API this runner speaks (codegen/cwriter.py ABI_VERSION)
# the C API's dtype codes (<NAME>_DTYPE_*, ir.DTYPE_CODES) -> manifest names
DTYPE_BY_CODE = {0: "float32", 1: "float64", 2: "int64", 3: "int32", 4: "int16", 5: "int8", 6: "uint8", 7: "bool",
                 8: "bfloat16", 9: "float16"}


class RunError(Pt2cError):
    pass


class TensorDesc(ctypes.Structure):
    """<name>_tensor_desc of the generated header."""
    _fields_ = [("name", ctypes.c_char_p), ("dtype", ctypes.c_int), ("rank", ctypes.c_int),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("nbytes", ctypes.c_size_t)]


class SizeDesc(ctypes.Structure):
    """<name>_size_desc: a dynamic size of the model and its range."""
    _fields_ = [("name", ctypes.c_char_p), ("where", ctypes.c_char_p), ("min", ctypes.c_int64), ("max", ctypes.c_int64)]


def _takes(z: dict) -> str:
    """The sizes a manifest size entry allows at its input dim: "1..64", or "32 * n for n in 2..4" (derived)."""
    a, b = int(z.get("scale", 1)), int(z.get("offset", 0))
    lo, hi = z["min"], z["max"]
    return f"{lo}..{hi}" if (a, b) == (1, 0) else f"{a} * n{f' + {b}' if b else ''} for n in {lo}..{hi}"


def library_io(lib: Any, name: str) -> tuple[list[dict], list[dict]]:
    """The I/O descriptors the library itself exports (<name>_inputs() / _outputs()): the source of
    truth for what its run function reads and writes."""
    specs = []
    for kind in ("inputs", "outputs"):
        count = getattr(lib, f"{name}_num_{kind}")
        count.restype = ctypes.c_int
        table = getattr(lib, f"{name}_{kind}")
        table.restype = ctypes.POINTER(TensorDesc)
        n, t = count(), table()
        rows = []
        for i in range(n):
            d = t[i]
            rows.append({"name": d.name.decode(), "dtype": DTYPE_BY_CODE.get(d.dtype, f"code {d.dtype}"),
                         "shape": [int(d.shape[k]) for k in range(d.rank)], "nbytes": int(d.nbytes)})
        specs.append(rows)
    return specs[0], specs[1]


def check_manifest_io(lib_io: list[dict], manifest_io: list[dict], kind: str, where: str) -> None:
    """RunError unless the manifest's I/O (names, shapes, dtypes) is the library's."""
    mine = [(d["name"], list(d["shape"]), d["dtype"]) for d in lib_io]
    theirs = [(d.get("name"), list(d.get("shape", [])), d.get("dtype")) for d in manifest_io]
    # a dynamic size (its C expression in the manifest): the library's table has it at the example's sizes
    theirs = [(n, [b if isinstance(a, str) else a for a, b in zip(s, m[1])] if len(s) == len(m[1]) else s, t)
              for (n, s, t), m in zip(theirs, mine)] + theirs[len(mine):]
    if mine != theirs:
        raise RunError(f"{where}: manifest.json's {kind} {theirs} are not the library's {mine}.\n"
                       "What to try: the manifest and the library come from different compiles (or the manifest "
                       "was edited): compile again and rebuild.")


def _addr(a: np.ndarray) -> int:
    """Data address of an array, through the buffer protocol (C code) where it can: numpy's
    `a.ctypes.data` runs Python code, ~5 us a call once a model has flushed the caches."""
    if a.nbytes and a.flags.writeable:
        return ctypes.addressof(ctypes.c_char.from_buffer(a))
    return a.ctypes.data


def _aligned(nbytes: int, align: int = 64) -> np.ndarray:
    raw = np.zeros(nbytes + align, dtype=np.uint8)
    off = (-raw.ctypes.data) % align
    return raw[off:off + nbytes]


_HUGE = 1 << 21


def _big_buffer(nbytes: int) -> np.ndarray:
    """A zeroed, 64-byte aligned buffer for a model's weights or workspace.  On Linux, one of
    2 MiB or more is a private mapping of its own, started on a 2 MiB boundary and marked
    MADV_HUGEPAGE, so that the kernel backs it with transparent huge pages where its THP mode
    allows ("madvise" or "always"): far fewer TLB misses when the caches and TLBs are cold, as
    between inferences of an application that does other work (bench/hugepages.py; figures in
    docs/BENCHMARKS.md).  Elsewhere, or if the mapping fails, a plain numpy buffer."""
    if nbytes >= _HUGE and hasattr(mmap, "MADV_HUGEPAGE"):
        try:
            m = mmap.mmap(-1, nbytes + _HUGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
            raw = np.frombuffer(m, dtype=np.uint8)  # keeps the mapping alive
            off = (-raw.ctypes.data) % _HUGE
            m.madvise(mmap.MADV_HUGEPAGE, off, nbytes)
            return raw[off:off + nbytes]
        except (OSError, ValueError):
            pass
    return _aligned(nbytes)


def aligned_copy(a: np.ndarray, align: int = 64) -> np.ndarray:
    """A copy of `a` whose data starts on an `align`-byte boundary, as a model's workspace and
    weights do (numpy's own buffers are only 16-byte aligned): for kernel benchmarks."""
    out = _aligned(a.nbytes, align).view(a.dtype).reshape(a.shape)
    out[...] = a
    return out


class Model:
    """A loaded model: `model(x, ...)` or `model.run({name: array})` returns numpy outputs.

    Safe to call from several threads: a Model has one context and one workspace, so calls take
    turns (a lock; each call may still use several OpenMP threads).  For calls that run at the
    same time, load one Model per thread (each has its own workspace)."""

    def __init__(self, out_dir: Any, lib: Any = None, threads: int | None = None):
        self.dir = Path(out_dir)
        mpath = self.dir / "manifest.json"
        if not mpath.exists():
            raise RunError(f"{self.dir}: no manifest.json; is this a pt2c output folder?")
        try:
            self.manifest = json.loads(mpath.read_text())
            self.name = self.manifest["name"]
        except (ValueError, KeyError, TypeError) as e:
            raise RunError(f"{mpath}: not a pt2c manifest ({type(e).__name__}: {e})") from None
        if not isinstance(self.name, str) or not self.name.isidentifier() or not self.name.isascii():
            raise RunError(f"{mpath}: the model name {str(self.name)[:80]!r} is not a C identifier")
        lib_path = Path(lib) if lib else self.dir / "build" / f"lib{self.name}.so"
        if not lib_path.exists():
            raise RunError(f"{lib_path} not found.\nWhat to try: build it first: pt2c build {self.dir}")
        if threads is not None:
            os.environ["OMP_NUM_THREADS"] = str(threads)
        # Idle OpenMP threads spin briefly, then sleep (unless the caller chose a policy): libgomp's
        # default spin (300k iterations) made 2 threads several times slower than 1 on a busy shared
        # machine, while OMP_WAIT_POLICY=PASSIVE (sleep at once) cost the 2-thread speed-up on a quiet
        # one (1.0-1.2x instead of 1.6-1.7x: bench/threads.py, docs/BENCHMARKS.md).  ~20k spins
        # bridge the gap between back-to-back parallel regions.  Only read if libgomp is not loaded yet.
        if "OMP_WAIT_POLICY" not in os.environ:
            os.environ.setdefault("GOMP_SPINCOUNT", "20000")
        # With more than one thread, one thread per core (unless the caller chose a placement):
        # unbound, the OpenMP worker and the main thread at times shared a core, and every
        # parallel region waited out the other's time slice: 2 threads 5-15x slower than 1 in
        # half the rounds of a small model (docs/BENCHMARKS.md).  libgomp binds the calling
        # thread too (to the first core it may use), so not for one thread: single-threaded
        # processes would all share that core.
        try:
            nthreads = int(os.environ.get("OMP_NUM_THREADS", "").split(",")[0])
        except ValueError:  # unset: libgomp uses every CPU this process may run on
            nthreads = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        bind = nthreads > 1 and not any(k in os.environ for k in ("OMP_PROC_BIND", "OMP_PLACES", "GOMP_CPU_AFFINITY"))
        if bind:
            os.environ["OMP_PROC_BIND"] = "close"
            os.environ["OMP_PLACES"] = "cores"
        try:
            self.lib = ctypes.CDLL(str(lib_path))
        finally:
            if bind:  # read by libgomp when it loads; child processes must not inherit a pin to core 0
                del os.environ["OMP_PROC_BIND"], os.environ["OMP_PLACES"]
        if threads is not None and hasattr(self.lib, "omp_set_num_threads"):
            # OMP_NUM_THREADS is read once, when libgomp loads: if this process loaded it before
            # (torch bundles a libgomp.so.1, and the library then binds to that one), the count
            # set above is ignored and runs would use every core.  Set it on the runtime itself.
            self.lib.omp_set_num_threads(ctypes.c_int(threads))
        n = self.name
        try:
            abi_fn = getattr(self.lib, f"{n}_abi_version")
        except AttributeError:
            raise RunError(f"{lib_path} has no {n}_abi_version: not the library of model {n!r}") from None
        abi_fn.restype = ctypes.c_int
        abi = abi_fn()
        if abi != ABI_VERSION or abi != self.manifest.get("abi_version"):
            raise RunError(f"{lib_path}: C API version {abi}; this runner speaks {ABI_VERSION} and the manifest says "
                           f"{self.manifest.get('abi_version')}.\nWhat to try: compile and build again with this pt2c.")
        for fn, res in (("workspace_size", ctypes.c_size_t), ("ctx_size", ctypes.c_size_t),
                        ("signature", ctypes.c_uint64), ("strerror", ctypes.c_char_p)):
            getattr(self.lib, f"{n}_{fn}").restype = res
        signature = getattr(self.lib, f"{n}_signature")()
        if f"0x{signature:016x}" != self.manifest.get("signature"):
            raise RunError(f"{lib_path}: signature 0x{signature:016x}, manifest.json says {self.manifest.get('signature')}: "
                           "they come from different compiles.\nWhat to try: compile and build again.")
        init = getattr(self.lib, f"{n}_init_checked")
        init.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t,
                         ctypes.c_uint64]
        getattr(self.lib, f"{n}_run_v").argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
        # the library's descriptor tables are the truth; the manifest must agree with them
        self.inputs, self.outputs = library_io(self.lib, n)
        check_manifest_io(self.inputs, self.manifest.get("inputs", []), "inputs", str(mpath))
        check_manifest_io(self.outputs, self.manifest.get("outputs", []), "outputs", str(mpath))
        w = self.manifest.get("weights") or {}
        if w.get("embedded"):
            self._weights = None
            wptr, wsize = None, 0
        else:
            wname = str(w.get("file"))
            if Path(wname).name != wname:
                raise RunError(f"{mpath}: weights file {wname[:80]!r} is not a file name in the artifact folder")
            path = self.dir / wname
            try:
                with open(path, "rb") as f:  # straight into the aligned buffer: no second copy
                    size = os.fstat(f.fileno()).st_size
                    self._weights = _big_buffer(size)
                    if f.readinto(memoryview(self._weights)) != size:
                        raise RunError(f"{path}: shorter than its size (changed while reading?)")
            except OSError as e:
                raise RunError(f"{path}: cannot read the weights ({e.strerror})") from None
            wptr, wsize = self._weights.ctypes.data, self._weights.nbytes
        self._ws = _big_buffer(max(getattr(self.lib, f"{n}_workspace_size")(), 64))
        self._ctx = ctypes.create_string_buffer(max(getattr(self.lib, f"{n}_ctx_size")(), 64))
        rc = init(self._ctx, wptr, wsize, self._ws.ctypes.data, self._ws.nbytes, signature)
        # a GPU artifact (--target cuda / opencl) holds device memory and driver objects until released
        self._release = getattr(self.lib, f"{n}_release", None)
        if self._release is not None:
            self._release.argtypes = [ctypes.c_void_p]
            last = getattr(self.lib, f"{n}_last_error")
            last.restype, last.argtypes = ctypes.c_char_p, [ctypes.c_void_p]
            self._last_error = lambda: last(self._ctx).decode(errors="replace")
        self._check(rc, "init")
        self._lock = threading.RLock()  # (re-entered by a dynamic model's run: sizes, shapes and call together)
        isa = getattr(self.lib, f"{n}_isa")
        isa.restype, isa.argtypes = ctypes.c_char_p, [ctypes.c_void_p]
        #: the instruction-set code path init chose ("x86_64-v3", ...; multi-versioned builds pick per CPU)
        self.isa = isa(self._ctx).decode()
        # what run() needs, looked up once: after a model has streamed megabytes of weights through
        # the caches, every Python object a call touches is a cache miss (the batch-1 MLP's 0.26 ms
        # calls took 18 us more through run() than through the bare C function, now 10)
        self._run_v = getattr(self.lib, f"{n}_run_v")
        for d in self.inputs + self.outputs:
            if d["dtype"] not in DTYPES:
                raise RunError(f"{lib_path}: tensor {d['name']!r} has dtype {d['dtype']}, which this runner does not know")
        self._in_specs = [(tuple(d["shape"]), np.dtype(DTYPES[d["dtype"]])) for d in self.inputs]
        self._out_specs = [(tuple(d["shape"]), np.dtype(DTYPES[d["dtype"]])) for d in self.outputs]
        # dynamic sizes: each read from its input's shape, set in the context before a run
        self.sizes = list(self.manifest.get("sizes") or [])
        if self.sizes or hasattr(self.lib, f"{n}_set_sizes"):
            self._check_sizes(mpath)
            self._set_sizes = getattr(self.lib, f"{n}_set_sizes")
            self._set_sizes.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
            self._shape_fns = [getattr(self.lib, f"{n}_{k}_shape") for k in ("input", "output")]
            for f in self._shape_fns:
                f.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]
            names = [d["name"] for d in self.inputs]
            self._size_at = [(names.index(z["input"]), int(z["dim"])) for z in self.sizes]
            self._sizes_now: tuple[int, ...] | None = None
        self._in_ptrs = (ctypes.c_void_p * max(len(self.inputs), 1))()
        self._out_ptrs = (ctypes.c_void_p * max(len(self.outputs), 1))()

    def _check(self, rc: int, what: str) -> None:
        if rc != 0:
            msg = getattr(self.lib, f"{self.name}_strerror")(rc).decode()
            driver = self._last_error() if getattr(self, "_release", None) is not None else ""
            raise RunError(f"{self.name}_{what} failed with status {rc}: {msg}" + (f"\n{driver}" if driver else ""))

    def close(self) -> None:
        """Free what init made on a GPU (device memory, kernels, queue); the model cannot run afterwards.
        (Called when the Model is garbage-collected; a CPU artifact holds nothing to free.)"""
        if getattr(self, "_release", None) is not None:
            self._release(self._ctx)
            self._release = None

    def __del__(self) -> None:
        self.close()

    def __call__(self, *args: Any) -> Any:
        outs = self.run(list(args))
        return outs[0] if len(outs) == 1 else outs

    def run(self, inputs: Any) -> list[np.ndarray]:
        """Outputs for one set of inputs (a list in the library's input order, or a dict by name).
        Calls from several threads take turns (see the class docstring)."""
        if isinstance(inputs, dict):
            missing = [d["name"] for d in self.inputs if d["name"] not in inputs]
            if missing:
                raise RunError(f"missing input(s) {missing}; the model takes {[d['name'] for d in self.inputs]}")
            inputs = [inputs[d["name"]] for d in self.inputs]
        if len(inputs) != len(self._in_specs):
            raise RunError(f"{self.name} takes {len(self.inputs)} input(s) "
                           f"({', '.join(d['name'] for d in self.inputs)}), got {len(inputs)}")
        if self.sizes:
            with self._lock:  # the sizes set, the shapes read and the call made under one hold of the lock
                self._resize(inputs)
                return self._run(inputs)
        return self._run(inputs)

    def _run(self, inputs: list[Any]) -> list[np.ndarray]:
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

    def _check_sizes(self, mpath: Path) -> None:
        """RunError unless manifest.json's sizes are the library's own (<name>_sizes(): names and ranges), each
        at a dim of an input."""
        n = self.name
        table, count = getattr(self.lib, f"{n}_sizes", None), getattr(self.lib, f"{n}_num_sizes", None)
        lib_sizes = []
        if table is not None and count is not None:
            table.restype, count.restype = ctypes.POINTER(SizeDesc), ctypes.c_int
            t = table()
            lib_sizes = [(t[i].name.decode(), int(t[i].min), int(t[i].max)) for i in range(count())]
        mine = [(z.get("name"), z.get("min"), z.get("max")) for z in self.sizes]
        names = [d["name"] for d in self.inputs]
        ok = (table is not None and mine == lib_sizes and len(self.sizes) == len(lib_sizes)
              and all(z.get("input") in names and type(z.get("dim")) is int and type(z.get("scale", 1)) is int
                      and z.get("scale", 1) >= 1 and type(z.get("offset", 0)) is int
                      and 0 <= z["dim"] < len(self.inputs[names.index(z["input"])]["shape"]) for z in self.sizes))
        if not ok:
            raise RunError(f"{mpath}: manifest.json's sizes {mine} are not the library's {lib_sizes} (or name no "
                           "input dim).\nWhat to try: compile and build again.")

    def reset_state(self) -> None:
        """Set the buffers the model updates from run to run (a KV cache: manifest.json "state") back to their
        values at export: the start of a new sequence.  (init does it once.)"""
        if self.manifest.get("state"):
            with self._lock:
                self._check(getattr(self.lib, f"{self.name}_reset_state")(self._ctx), "reset_state")

    def _resize(self, inputs: list[Any]) -> None:
        """A dynamic model: its sizes read from the inputs' shapes, set in the context (a RunError names a size
        out of range), and the shapes the library then expects and writes."""
        sizes = []
        for z, (i, d) in zip(self.sizes, self._size_at):
            shape = np.shape(inputs[i])
            if len(shape) <= d:
                raise RunError(f"input '{z['input']}': expected rank {len(self.inputs[i]['shape'])}, got shape {shape}")
            a, b = int(z.get("scale", 1)), int(z.get("offset", 0))  # (a dim the export derived: a * size + b)
            if a < 1 or (int(shape[d]) - b) % a:
                raise RunError(f"input '{z['input']}' dim {d} is {shape[d]}; the model takes {_takes(z)}")
            sizes.append((int(shape[d]) - b) // a)
        if tuple(sizes) == self._sizes_now:
            return
        bad = [f"{z['input']} dim {z['dim']} is {int(z.get('scale', 1)) * s + int(z.get('offset', 0))}, the model "
               f"takes {_takes(z)}" for z, s in zip(self.sizes, sizes) if not z["min"] <= s <= z["max"]]
        if bad:
            raise RunError(f"size out of the compiled range: {'; '.join(bad)}.\nWhat to try: compile with a wider range "
                           "(torch.export.Dim(..., min=, max=)).")
        arr = (ctypes.c_int64 * len(sizes))(*sizes)
        with self._lock:
            self._check(self._set_sizes(self._ctx, arr), "set_sizes")
            specs = []
            for fn, descs in zip(self._shape_fns, (self.inputs, self.outputs)):
                out = []
                for i, d in enumerate(descs):
                    shape = (ctypes.c_int64 * max(len(d["shape"]), 1))()
                    self._check(fn(self._ctx, i, shape), "shape")
                    out.append((tuple(shape[k] for k in range(len(d["shape"]))), np.dtype(DTYPES[d["dtype"]])))
                specs.append(out)
            self._in_specs, self._out_specs = specs
            self._sizes_now = tuple(sizes)

    def _input(self, i: int, x: Any) -> np.ndarray:
        """Input i checked against the manifest and made a contiguous array, or a RunError."""
        d = self.inputs[i]
        try:
            x = np.asarray(x)
        except TypeError as e:  # a torch.bfloat16 tensor (numpy has no bfloat16)
            raise RunError(f"input '{d['name']}': {e}; pass a {d['dtype']} input as a numpy array (bfloat16: "
                           "its bits as uint16, t.view(torch.int16).numpy().view(np.uint16))") from None
        want = np.dtype(DTYPES[d["dtype"]])
        shape = self._in_specs[i][0]
        if tuple(x.shape) != tuple(shape):
            raise RunError(f"input '{d['name']}': expected shape {tuple(shape)}, got {tuple(x.shape)}")
        if x.dtype != want:
            how = ("numpy has no bfloat16: pass its bits as uint16, pt2c.ops.elementwise.bf16_bits(x) from float32 "
                   "or t.view(torch.int16).numpy().view(np.uint16) from torch" if d["dtype"] == "bfloat16"
                   else f"convert with .astype(np.{want.name})")
            raise RunError(f"input '{d['name']}': expected dtype {d['dtype']}, got {x.dtype} ({how})")
        return np.ascontiguousarray(x)
