"""OpInfo conformance: PyTorch's own op database (``op_db``) through pt2c, compared with eager.

For every OpInfo entry, the first ``PT2C_OPINFO_SAMPLES`` (default 1) float32 CPU samples
(``op.sample_inputs("cpu", torch.float32)``) are wrapped as a module whose inputs are the
sample's tensors (non-tensor arguments are closed over) and exported with
``torch.export.export(strict=False)``.  A sample is *in scope* when export succeeds, every
output is a tensor, and the graph after pt2c's decomposition (``pt2c.frontend.load.decompose``)
holds only core ATen ops (plus the few ops pt2c keeps out of the decomposition).  In-scope
samples are compiled by pt2c in worker processes, built many-per-``.so`` (like test_ops.py),
run, and compared with eager: float tolerance 1e-4 * max(1, max|ref|), ints / bools exact,
NaN positions equal.

Per-sample status: ``pass`` | ``fail`` (wrong numbers, bad C, crash) | ``unsupported``
(pt2c reports the op / dtype as unsupported at compile time) | ``skip`` (out of scope: eager
error, export failure, non-tensor output, non-core ATen after decomposition).  An op's status
is the worst of its samples (fail > unsupported > pass > skip).

The test items are the ops that were in scope when ``docs/opinfo_summary.json`` was last
written; the ones listed in ``tests/opinfo_known_failures.json`` are strict xfails (an op that
starts passing fails CI until the list is updated).  Regenerate both, and docs/ops.md:

    python tests/test_opinfo.py --summary docs/opinfo_summary.json --known tests/opinfo_known_failures.json
    python scripts/gen_ops_doc.py > docs/ops.md

``PT2C_OPINFO_SUMMARY=path pytest tests/test_opinfo.py`` also writes the summary.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SUMMARY = ROOT / "docs" / "opinfo_summary.json"
KNOWN = HERE / "opinfo_known_failures.json"
MAX_SAMPLES = int(os.environ.get("PT2C_OPINFO_SAMPLES", "1"))
NCHUNKS = 24  # op_db is split into this many interleaved chunks (one gcc batch each)
TOL = 1e-4
X86 = platform.machine().lower() in ("x86_64", "amd64")
TARGET = "x86_64-v3" if X86 else "generic"
CFLAGS = ["-O1", "-std=c99", "-w"] + (["-march=x86-64-v3"] if X86 else [])
RANK = {"fail": 3, "unsupported": 2, "pass": 1, "skip": 0}


@dataclass
class Sample:
    op: str
    k: int
    status: str = "skip"
    reason: str = ""
    name: str = ""  # C model name
    dir: str = ""
    inputs: list[np.ndarray] = field(default_factory=list)
    ref: list[np.ndarray] = field(default_factory=list)
    lib: str | None = None


def op_key(op: Any) -> str:
    return op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")


def _short(e: BaseException) -> str:
    msg = str(e).strip().splitlines()
    return f"{type(e).__name__}: {msg[0][:160] if msg else ''}"


# ---------------------------------------------------------------------------- worker side

def _asserts() -> set[Any]:
    import torch

    return {torch.ops.aten._assert_tensor_metadata.default}  # checks only, no computation


def _core_problem(ep: Any) -> str | None:
    """None when every call in the (decomposed) graph is core ATen or kept by pt2c."""
    import operator

    import torch

    from pt2c.frontend.load import keep_ops

    keep = set(keep_ops())
    ASSERTS = _asserts()
    bad = set()
    for n in ep.graph.nodes:
        if n.op != "call_function" or n.target is operator.getitem:
            continue
        t = n.target
        if isinstance(t, torch._ops.OpOverload) and (torch.Tag.core in t.tags or t in keep or t in ASSERTS):
            continue
        bad.add(str(t))
    return f"not core ATen after decomposition: {', '.join(sorted(bad))}" if bad else None


def _prepare_sample(op: Any, key: str, k: int, sample: Any, root: Path) -> Sample:
    import torch
    from torch.utils import _pytree as pytree

    import pt2c
    from pt2c.errors import UnsupportedError
    from pt2c.frontend.load import decompose

    s = Sample(key, k)
    leaves, spec = pytree.tree_flatten((sample.input, tuple(sample.args), dict(sample.kwargs)))
    pos = [i for i, x in enumerate(leaves) if isinstance(x, torch.Tensor)]
    if not pos:
        s.reason = "no tensor inputs"
        return s
    tensors = [leaves[i].detach().clone().contiguous() for i in pos]
    fn = op.op

    class Wrap(torch.nn.Module):
        def forward(self, *ts: Any) -> Any:
            lv = list(leaves)
            for p, t in zip(pos, ts):
                lv[p] = t
            inp, args, kwargs = pytree.tree_unflatten(lv, spec)
            return fn(inp, *args, **kwargs)

    if "empty" in key or key in ("new_empty", "resize_"):
        s.reason = "uninitialized output (empty)"
        return s
    mod = Wrap().eval()
    try:
        with torch.no_grad():
            ref = mod(*[t.clone() for t in tensors])
    except Exception as e:  # noqa: BLE001
        s.reason = "eager: " + _short(e)
        return s
    outs, _ = pytree.tree_flatten(ref)
    if not outs or not all(isinstance(o, torch.Tensor) for o in outs):
        s.reason = "non-tensor output"
        return s
    if any(o.is_complex() or o.layout != torch.strided for o in outs):
        s.reason = "complex or non-strided output"
        return s
    try:
        ep = torch.export.export(mod, tuple(t.clone() for t in tensors), strict=False)
        dep = decompose(ep)
    except Exception as e:  # noqa: BLE001
        s.reason = "export: " + _short(e)
        return s
    why = _core_problem(dep)
    if why:
        s.reason = why
        return s
    s.inputs = [t.numpy() for t in tensors]
    s.ref = [o.detach().contiguous().numpy().copy() for o in outs]
    s.name = "oi_" + format(zlib.crc32(f"{key}/{k}".encode()), "08x")
    s.dir = str(root / s.name)
    try:
        import pt2c.compiler

        pt2c.compiler.decompose = lambda p, *_: p  # `dep` is already decomposed by the same function
        pt2c.compile(dep, s.dir, target=TARGET, name=s.name)
    except UnsupportedError as e:
        s.status = "unsupported"
        probs = getattr(e, "problems", None) or []
        s.reason = "; ".join(sorted({(p[0] + (f" ({p[2]})" if p[2] else "")) for p in probs}))[:300] or _short(e)
        return s
    except Exception as e:  # noqa: BLE001
        from pt2c.errors import InputError

        s.status = "unsupported" if isinstance(e, InputError) else "fail"
        s.reason = ("" if s.status == "unsupported" else "compile: ") + _short(e)
        return s
    s.status = "built"
    return s


def _run_chunk(chunk: int, nchunks: int, root: str, max_samples: int, only: list[str] | None) -> list[Sample]:
    import itertools
    import warnings

    warnings.filterwarnings("ignore")
    import torch

    torch.set_num_threads(1)
    from torch.testing._internal.common_methods_invocations import op_db

    res: list[Sample] = []
    for i, op in enumerate(op_db):
        if i % nchunks != chunk:
            continue
        key = op_key(op)
        if only is not None and key not in only:
            continue
        try:
            if torch.float32 not in op.supported_dtypes("cpu"):
                res.append(Sample(key, -1, reason="no float32 support"))
                continue
            torch.manual_seed(zlib.crc32(key.encode()))
            gen = op.sample_inputs("cpu", torch.float32)
            samples = list(itertools.islice(gen, max_samples))
            if hasattr(gen, "close"):
                gen.close()  # finish the generator here, not inside a later export trace
        except Exception as e:  # noqa: BLE001
            res.append(Sample(key, -1, reason="sample_inputs: " + _short(e)))
            continue
        if not samples:
            res.append(Sample(key, -1, reason="no samples"))
        for k, smp in enumerate(samples):
            try:
                res.append(_prepare_sample(op, key, k, smp, Path(root)))
            except Exception as e:  # noqa: BLE001
                res.append(Sample(key, k, reason="harness: " + _short(e)))
    return res


# ---------------------------------------------------------------------------- main side

def _gcc(files: list[str], lib: Path) -> str | None:
    cmd = [os.environ.get("CC", "gcc"), "-shared", "-fPIC", *CFLAGS, "-o", str(lib), *files, "-lm"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    return None if p.returncode == 0 else (p.stderr or p.stdout)[-2000:]


def _build(k: int, samples: list[Sample], root: Path) -> None:
    todo = [s for s in samples if s.status == "built"]
    if not todo:
        return
    lib = root / f"oi_batch_{k:02d}.so"
    if _gcc([str(Path(s.dir) / f"{s.name}.c") for s in todo], lib) is None:
        for s in todo:
            s.lib = str(lib)
        return
    for s in todo:
        one = root / f"{s.name}.so"
        err = _gcc([str(Path(s.dir) / f"{s.name}.c")], one)
        if err is None:
            s.lib = str(one)
        else:
            s.status, s.reason = "fail", "generated C does not compile: " + err.strip().splitlines()[0][:200]


def _compare(s: Sample) -> None:
    import pt2c

    try:
        model = pt2c.load(s.dir, lib=s.lib)
        outs = model.run(s.inputs)
    except Exception as e:  # noqa: BLE001
        s.status, s.reason = "fail", "run: " + _short(e)
        return
    if len(outs) != len(s.ref):
        s.status, s.reason = "fail", f"{len(outs)} outputs, expected {len(s.ref)}"
        return
    for i, (got, r) in enumerate(zip(outs, s.ref)):
        if got.dtype != r.dtype or got.shape != r.shape:
            s.status, s.reason = "fail", f"output {i}: {got.dtype}{list(got.shape)}, expected {r.dtype}{list(r.shape)}"
            return
        if r.dtype.kind == "f":
            if not np.array_equal(np.isnan(got), np.isnan(r)):
                s.status, s.reason = "fail", f"output {i}: NaN positions differ"
                return
            inf = np.isinf(r)
            if not np.array_equal(got[inf], r[inf]):
                s.status, s.reason = "fail", f"output {i}: inf mismatch"
                return
            fin = np.isfinite(r)
            if fin.any():
                scale = max(1.0, float(np.abs(r[fin]).max()))
                err = float(np.abs(got[fin].astype(np.float64) - r[fin]).max()) if np.isfinite(got[fin]).all() else np.inf
                if not err <= TOL * scale:
                    s.status, s.reason = "fail", f"output {i}: max abs err {err:.3g} > {TOL:g} * {scale:.3g}"
                    return
        elif not np.array_equal(got, r):
            s.status, s.reason = "fail", f"output {i}: values differ"
            return
    s.status, s.reason = "pass", ""


def run_all(root: Path, only: list[str] | None = None, workers: int | None = None,
            max_samples: int = MAX_SAMPLES) -> list[Sample]:
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    ncpu = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    workers = workers or int(os.environ.get("PT2C_TEST_WORKERS", max(1, ncpu)))
    res: list[Sample] = []
    ctx = multiprocessing.get_context("spawn")
    with ThreadPoolExecutor(max_workers=max(1, ncpu)) as cc, \
            ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
        futs = {pool.submit(_run_chunk, c, NCHUNKS, str(root), max_samples, only): c for c in range(NCHUNKS)}
        builds = []
        for f in as_completed(futs):
            done = f.result()
            res += done
            builds.append(cc.submit(_build, futs[f], done, root))
        for b in builds:
            b.result()
    for s in res:
        if s.status == "built":
            _compare(s)
    return res


def summarize(samples: list[Sample]) -> dict[str, Any]:
    ops: dict[str, dict[str, Any]] = {}
    for s in samples:
        o = ops.setdefault(s.op, {"status": "skip", "pass": 0, "fail": 0, "unsupported": 0, "skip": 0, "reasons": []})
        o[s.status] += 1
        if RANK[s.status] > RANK[o["status"]]:
            o["status"] = s.status
        if s.reason and s.reason not in o["reasons"]:
            o["reasons"].append(s.reason)
    for o in ops.values():  # keep only the reasons that explain the op's status
        o["reasons"] = o["reasons"][:3] if o["status"] != "pass" else []
    return totals(ops)


def totals(ops: dict[str, dict[str, Any]]) -> dict[str, Any]:
    import torch

    tot = {k: sum(o[k] for o in ops.values()) for k in RANK}
    scope = tot["pass"] + tot["fail"] + tot["unsupported"]
    return {
        "torch": torch.__version__, "samples_per_op": MAX_SAMPLES,
        "samples": tot, "in_scope_samples": scope,
        "pass_rate": round(tot["pass"] / scope, 4) if scope else None,
        "ops": {k: ops[k] for k in sorted(ops)},
        "op_counts": {k: sum(1 for o in ops.values() if o["status"] == k) for k in RANK},
    }


# ---------------------------------------------------------------------------- pytest

def _committed() -> tuple[dict[str, Any], dict[str, str]]:
    summ = json.loads(SUMMARY.read_text()) if SUMMARY.exists() else {"ops": {}}
    known = json.loads(KNOWN.read_text()) if KNOWN.exists() else {}
    return summ, known


_SUMM, _KNOWN = _committed()
_IN_SCOPE = [k for k, o in _SUMM["ops"].items() if o["status"] != "skip"]


@pytest.fixture(scope="session")
def opinfo_results(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> dict[str, Any]:
    pytest.importorskip("expecttest")  # torch.testing._internal needs it
    if shutil.which(os.environ.get("CC", "gcc")) is None:
        pytest.skip("no C compiler")
    wanted = sorted({item.callspec.params["key"] for item in request.session.items
                     if getattr(item, "originalname", "") == "test_opinfo_op" and hasattr(item, "callspec")})
    # only the ops in scope at the last summary (exporting the rest is most of the cost);
    # the full op_db with PT2C_OPINFO_SUMMARY set or in script mode
    full = bool(os.environ.get("PT2C_OPINFO_SUMMARY"))
    root = tmp_path_factory.mktemp("opinfo")
    t0 = time.time()
    samples = run_all(root, only=None if full else wanted)
    summ = summarize(samples)
    print(f"\ntest_opinfo: {len(summ['ops'])} ops, samples {summ['samples']}, pass rate {summ['pass_rate']} "
          f"in {time.time() - t0:.1f}s", file=sys.stderr)
    if os.environ.get("PT2C_OPINFO_SUMMARY"):
        Path(os.environ["PT2C_OPINFO_SUMMARY"]).write_text(json.dumps(summ, indent=1) + "\n")
    return summ


def _param(key: str) -> Any:
    marks = []
    if key in _KNOWN:
        marks.append(pytest.mark.xfail(strict=True, reason=_KNOWN[key]))
    return pytest.param(key, id=key, marks=marks)


@pytest.mark.parametrize("key", [_param(k) for k in _IN_SCOPE])
def test_opinfo_op(key: str, opinfo_results: dict[str, Any]) -> None:
    o = opinfo_results["ops"].get(key)
    if o is None or o["status"] == "skip":
        pytest.skip(f"{key}: no in-scope sample now ({'; '.join(o['reasons']) if o else 'not in op_db'})")
    assert o["status"] == "pass", f"{key}: {o['status']}: {'; '.join(o['reasons'])}"


def test_opinfo_known_list_is_current() -> None:
    """Every known failure names an op that is still in the committed summary and not passing."""
    stale = [k for k in _KNOWN if _SUMM["ops"].get(k, {}).get("status") in (None, "pass", "skip")]
    assert not stale, f"stale entries in {KNOWN.name}: {stale}"


def test_core_aten_ops_accounted_for() -> None:
    """Every overload tagged core in the installed torch is lowered by pt2c or listed in
    pt2c.ops.UNSUPPORTED with the reason (quoted by the compile error and in docs/ops.md)."""

    from pt2c.ops import LOWERINGS, UNSUPPORTED, core_aten_ops

    core = core_aten_ops()
    unaccounted = sorted(t for t in core if t not in LOWERINGS and not UNSUPPORTED.get(t))
    assert not unaccounted, f"core ATen ops neither lowered nor listed as unsupported with a reason: {unaccounted}"
    both = sorted(set(UNSUPPORTED) & set(LOWERINGS))
    assert not both, f"listed as unsupported but lowered: {both}"


# ---------------------------------------------------------------------------- script

def main(argv: list[str]) -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--summary", default=str(SUMMARY), help="write the JSON summary here")
    ap.add_argument("--known", default=None, help="also rewrite the known-failures list (op -> reason)")
    ap.add_argument("--only", nargs="*", default=None, help="op keys to run (default: all)")
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--merge", action="store_true", help="update the --only ops in an existing summary")
    a = ap.parse_args(argv)
    t0 = time.time()
    with tempfile.TemporaryDirectory() as d:
        samples = run_all(Path(d), only=a.only, workers=a.workers)
    summ = summarize(samples)
    if a.merge:
        ops = json.loads(Path(a.summary).read_text())["ops"]
        ops.update(summ["ops"])
        summ = totals({k: ops[k] for k in sorted(ops)})
    Path(a.summary).write_text(json.dumps(summ, indent=1) + "\n")
    if a.known:
        known = {k: f"{o['status']}: {'; '.join(o['reasons'])[:200]}" for k, o in summ["ops"].items()
                 if o["status"] in ("fail", "unsupported")}
        Path(a.known).write_text(json.dumps(known, indent=1, sort_keys=True) + "\n")
    print(f"{len(summ['ops'])} ops; samples {summ['samples']}; in scope {summ['in_scope_samples']}; "
          f"pass rate {summ['pass_rate']}; ops {summ['op_counts']}; {time.time() - t0:.0f}s")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "src"))
    raise SystemExit(main(sys.argv[1:]))
