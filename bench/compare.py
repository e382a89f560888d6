"""pt2c vs PyTorch eager, torch.compile, AOTInductor and ONNX Runtime: latency, error, memory.

    python bench/compare.py [--models mlp,mlp_b64,resnet18,mobilenetv2,bert,gpt2] [--threads 1,2]
                            [--engines pt2c,pt2c_mv,eager,compile,aoti,ort] [--runs 24] [--md docs/BENCHMARKS.md]
                            [--png docs/benchmarks.png] [--json results.json] [--hide-avx512]

Method
  * Preparation (this process, per model): the zoo model at its "bench" size is exported
    with torch.export; pt2c compiles it for x86_64-v3 ("pt2c") and for x86_64-v3,x86_64-v4
    ("pt2c_mv": multi-versioned, AVX-512 where the CPU has it) and builds it with -O3 (gcc, OpenMP);
    AOTInductor packages it (torch._inductor.aoti_compile_and_package); torch.onnx.export
    (dynamo exporter, falling back to the TorchScript one) writes an .onnx file.  The eager
    output on the example inputs is the reference.
  * Timing: every (engine, threads) pair runs in its OWN worker process, started with
    OMP_NUM_THREADS / torch.set_num_threads / ORT intra_op_num_threads set to the thread
    count, so no two OpenMP runtimes (torch's bundled libgomp, the system one) share a
    process and each engine's memory is its own.  The pt2c worker never imports torch
    (ctypes + numpy).  After warm-up (torch.compile compiles here), the workers are
    driven round-robin: each round every worker runs --per-round inferences, for
    --runs / --per-round rounds, so machine drift hits all engines alike; the order is
    shuffled every round (fixed seed), so no engine always runs after the same other.  Every engine keeps
    its default thread wait policy (pt2c's runner sets GOMP_SPINCOUNT=20000 and binds 2+
    threads to cores, see runtime/runner.py); a 30 ms pause before each worker's turn lets the previous worker's
    spinning threads go to sleep, so they do not steal a core from the one being timed.
    Reported: median latency over all runs.
  * Error: max |out - eager| over the output (eager's own worker output vs the reference
    computed in the parent, so eager shows its run-to-run difference, normally 0).
  * Memory: the worker's peak resident set (VmHWM in /proc/self/status) after all its
    runs, minus its resident set (VmRSS) just before it loads the model (after importing
    its runtime: numpy / torch / onnxruntime).  (Not getrusage's ru_maxrss: Linux keeps
    that across fork + exec, so a worker would report the torch-laden parent's peak.)  So "peak MiB" counts weights,
    workspace/arenas, and for torch.compile its compilation; not the runtime libraries.
  * Engines that fail (export, compile, load, run) are recorded with the error, and the
    benchmark goes on.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

import hide_avx512

ROOT = Path(__file__).resolve().parents[1]
# pt2c: built for x86_64-v3 (AVX2+FMA); pt2c_mv: the multi-versioned x86_64-v3,x86_64-v4 artifact
# (one library for a fleet; init picks the AVX-512 path where the CPU has it)
ENGINES = ("pt2c", "pt2c_mv", "eager", "compile", "aoti", "ort")
PT2C_TARGETS = {"pt2c": "x86_64-v3", "pt2c_mv": "x86_64-v3,x86_64-v4"}
MODELS = ("mlp", "mlp_b64", "resnet18", "mobilenetv2", "bert", "gpt2")


def _status_kib(field: str) -> int:
    """VmRSS (resident now) / VmHWM (peak resident) of this process from /proc/self/status.
    Not ru_maxrss: Linux carries that over fork + exec from the parent, which here imported
    torch and compiled the models, so it would report the parent's peak."""
    try:
        for ln in open("/proc/self/status"):
            if ln.startswith(field + ":"):
                return int(ln.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _rss_kib() -> int:
    return _status_kib("VmRSS")


# --------------------------------------------------------------------------- worker

def worker(engine: str, spec: str, workdir: str, threads: int) -> None:
    """Runs in its own process: load one engine, then answer `time k` / `quit` on stdin."""
    import numpy as np

    wd = Path(workdir)
    xs = [np.load(wd / f"in{i}.npy") for i in range(len(list(wd.glob("in*.npy"))))]
    out = sys.stdout
    sys.stdout = sys.stderr  # keep the protocol channel clean of library chatter

    def send(obj):
        out.write(json.dumps(obj) + "\n")
        out.flush()

    try:
        if engine in PT2C_TARGETS:
            sys.path.insert(0, str(ROOT / "src"))
            from pt2c.runtime.runner import Model

            rss0 = _rss_kib()
            m = Model(wd / engine)
            fn = lambda: m.run(xs)[0]  # noqa: E731
        elif engine == "ort":
            import onnxruntime as ort

            rss0 = _rss_kib()
            so = ort.SessionOptions()
            so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
            so.intra_op_num_threads = threads
            so.inter_op_num_threads = 1
            sess = ort.InferenceSession(str(wd / "model.onnx"), so, providers=["CPUExecutionProvider"])
            names = [i.name for i in sess.get_inputs()]
            feed = dict(zip(names, xs))
            fn = lambda: sess.run(None, feed)[0]  # noqa: E731
        else:
            import torch

            torch.set_num_threads(threads)
            sys.path.insert(0, str(ROOT / "src"))
            rss0 = _rss_kib()
            if engine == "aoti":
                runner = torch._inductor.aoti_load_package(str(wd / "model.pt2"))
                call = runner
            else:
                model, _ = load_model(spec)
                call = torch.compile(model) if engine == "compile" else model
            ts = [torch.from_numpy(x) for x in xs]

            def fn():
                with torch.inference_mode():
                    r = call(*ts)
                r = r if isinstance(r, torch.Tensor) else r[0]
                return r.numpy()
        y = fn()
        np.save(wd / f"out_{engine}_{threads}.npy", np.asarray(y))
        for _ in range(3):
            fn()
        send({"ok": True})
    except Exception as e:  # noqa: BLE001
        send({"ok": False, "error": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300],
              "trace": traceback.format_exc()[-2000:]})
        return
    for line in sys.stdin:
        cmd = line.split()
        if not cmd or cmd[0] == "quit":
            break
        k = int(cmd[1])
        ts_ = []
        # --clock cpu: the worker's CPU time per run (robust to other jobs on a shared machine; equal to the
        # latency only at 1 thread, where every engine computes on the calling thread)
        clock = time.process_time if os.environ.get("PT2C_BENCH_CLOCK") == "cpu" else time.perf_counter
        for _ in range(k):
            t = clock()
            fn()
            ts_.append(clock() - t)
        send({"times": ts_})
    peak = _status_kib("VmHWM")
    send({"peak_kib": peak, "rss0_kib": rss0})


# --------------------------------------------------------------------------- preparation

def load_model(spec: str):
    """(model, inputs) of a model spec: a zoo bench model (zoo.bench_model), or "hf:<arch>", a transformers
    architecture at a realistic size (bench/corpus.py)."""
    if spec.startswith("hf:"):
        import corpus

        return corpus.make_real(spec[3:])
    sys.path.insert(0, str(ROOT / "src"))
    from pt2c import zoo

    return zoo.bench_model(spec)


def c_name(spec: str) -> str:
    return spec.replace("hf:", "hf_").replace("-", "_")


def prepare(spec: str, wd: Path, engines: list[str], log) -> dict[str, str]:
    """Export, compile, save inputs/reference. Returns {engine: error} for engines that failed here."""
    import numpy as np
    import torch

    sys.path.insert(0, str(ROOT / "src"))
    import pt2c

    failures: dict[str, str] = {}
    torch.set_num_threads(2)
    model, inputs = load_model(spec)
    for i, x in enumerate(inputs):
        np.save(wd / f"in{i}.npy", x.numpy())
    with torch.no_grad():
        ref = model(*inputs)
    ref = ref if isinstance(ref, torch.Tensor) else ref[0]
    np.save(wd / "ref.npy", ref.numpy())
    ep = torch.export.export(model, inputs, strict=False)

    def step(engine, f):
        if engine not in engines:
            return
        t = time.perf_counter()
        try:
            f()
            log(f"  {spec}: prepared {engine} in {time.perf_counter() - t:.1f} s")
        except Exception as e:  # noqa: BLE001
            msg = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]
            failures[engine] = f"prepare: {msg}"
            log(f"  {spec}: {engine} FAILED to prepare: {msg}")

    def do_pt2c(engine: str) -> None:
        pt2c.compile(ep, wd / engine, name=c_name(spec), target=PT2C_TARGETS[engine])
        pt2c.build(wd / engine, cflags="-O3 -std=c99")

    def do_aoti():
        torch._inductor.aoti_compile_and_package(ep, package_path=str(wd / "model.pt2"))

    def do_ort():
        errs = []
        for dynamo in (True, False):
            try:
                with torch.no_grad():
                    torch.onnx.export(model, inputs, str(wd / "model.onnx"), dynamo=dynamo, opset_version=18)
                return
            except Exception as e:  # noqa: BLE001
                errs.append(f"dynamo={dynamo}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
        raise RuntimeError("; ".join(errs))

    for eng in PT2C_TARGETS:
        step(eng, lambda eng=eng: do_pt2c(eng))
    step("aoti", do_aoti)
    step("ort", do_ort)
    return failures


# --------------------------------------------------------------------------- driver

def bench_model(spec: str, engines: list[str], threads: list[int], runs: int, per_round: int, log) -> dict:
    import numpy as np

    wd = Path(tempfile.mkdtemp(prefix=f"pt2c_cmp_{c_name(spec)}_"))
    res: dict = {"model": spec, "engines": {}}
    failures = prepare(spec, wd, engines, log)
    ref = np.load(wd / "ref.npy")
    res["ref_max"] = float(np.abs(ref).max())
    workers = {}
    for eng in engines:
        for nt in threads:
            key = f"{eng}@{nt}"
            if eng in failures:
                res["engines"][key] = {"error": failures[eng]}
                continue
            env = dict(os.environ, OMP_NUM_THREADS=str(nt), MKL_NUM_THREADS=str(nt), OPENBLAS_NUM_THREADS=str(nt))
            t = time.perf_counter()
            p = subprocess.Popen([sys.executable, __file__, "--worker", eng, spec, str(wd), str(nt)],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
            msg = p.stdout.readline()
            st = json.loads(msg) if msg else {"ok": False, "error": "worker died while loading"}
            if not st.get("ok"):
                res["engines"][key] = {"error": "load/run: " + st["error"]}
                log(f"  {spec}: {key} FAILED: {st['error']}")
                if st.get("trace"):
                    log(st["trace"])
                p.wait()
                continue
            out = np.load(wd / f"out_{eng}_{nt}.npy")
            err = float(np.abs(out.astype(np.float64) - ref).max()) if out.shape == ref.shape else float("nan")
            workers[key] = p
            res["engines"][key] = {"times": [], "max_abs_err": err, "load_s": time.perf_counter() - t}
    rounds = max(1, (runs + per_round - 1) // per_round)
    rng = random.Random(0)
    for _ in range(rounds):
        # a new order every round: in a fixed one, each worker always follows the same other,
        # whose cache and thread state it inherits (MobileNetV2: pt2c / ORT 1.02 in the listed
        # order, 0.96 in the reverse one)
        order = list(workers.items())
        rng.shuffle(order)
        for key, p in order:
            try:
                # let the previous worker's idle threads stop spinning (libgomp spins ~300k
                # iterations, ORT similarly) before this one is timed: no engine's policy changes,
                # but none steals the core of the next
                time.sleep(0.03)
                p.stdin.write(f"time {per_round}\n")
                p.stdin.flush()
                res["engines"][key]["times"] += json.loads(p.stdout.readline())["times"]
            except Exception as e:  # noqa: BLE001
                res["engines"][key] = {"error": f"worker failed while timing: {e}"}
                workers.pop(key)
    for key, p in workers.items():
        p.stdin.write("quit\n")
        p.stdin.flush()
        mem = json.loads(p.stdout.readline())
        p.wait()
        r = res["engines"][key]
        r["median_ms"] = float(np.median(r["times"])) * 1e3
        r["peak_mib"] = (mem["peak_kib"] - mem["rss0_kib"]) / 1024
        r["peak_abs_mib"] = mem["peak_kib"] / 1024
        del r["times"]
    for nt in threads:
        e = res["engines"].get(f"eager@{nt}", {}).get("median_ms")
        o = res["engines"].get(f"ort@{nt}", {}).get("median_ms")
        for eng in engines:
            r = res["engines"].get(f"{eng}@{nt}", {})
            if "median_ms" in r:
                r["vs_eager"] = r["median_ms"] / e if e else None
                r["vs_ort"] = r["median_ms"] / o if o else None
    if (wd / "pt2c" / "manifest.json").exists():
        res["pt2c_workspace_mib"] = json.loads((wd / "pt2c" / "manifest.json").read_text())["memory"]["workspace_bytes"] / 2**20
    shutil.rmtree(wd, ignore_errors=True)  # (artifacts, .onnx, .pt2: hundreds of MB for a real-size model)
    return res


def fmt(x, f="{:.2f}"):
    return "-" if x is None else f.format(x)


def write_md(path: str, results: list[dict], args, argv: list[str], machine: str, elapsed: float, torch_v: str,
             png: str | None) -> None:
    import numpy as np  # noqa: F401

    lines = [f"\n### {time.strftime('%Y-%m-%d %H:%M')}: engine comparison, {machine}\n",
             f"Command: `python bench/compare.py {' '.join(argv)}` ({elapsed / 60:.0f} min)  ",
             f"torch {torch_v}, onnxruntime {_ver('onnxruntime')}, onnx {_ver('onnx')}, pt2c: gcc -O3, x86_64-v3"
             + ("; pt2c_mv: the multi-versioned x86_64-v3,x86_64-v4 artifact (the AVX-512 path where the CPU has it)"
                if "pt2c_mv" in args.engines.split(",") else "") + ". Every engine keeps its default thread wait policy (pt2c's runner: GOMP_SPINCOUNT=20000, and with 2 threads OMP_PROC_BIND=close, OMP_PLACES=cores); 30 ms pause between workers' turns. "
             f"Median of {args.runs} runs per cell ({args.per_round} per round, engines interleaved round-robin in an order shuffled every round, "
             "each engine/thread count in its own process"
             + ("; **clock: CPU time of the worker per run** (--clock cpu: the machine was shared, wall time "
                "would mostly measure the other jobs)" if getattr(args, "clock", "wall") == "cpu" else "")
             + "); ratio columns are latency / eager latency and / ORT "
             "latency at the same thread count (< 1: faster). err: max |out - eager|. peak: worker VmHWM - VmRSS "
             "before model load (see bench/compare.py).\n"]
    if png:
        lines.append(f"![latency vs eager]({Path(png).name})\n")
    for res in results:
        ws = res.get("pt2c_workspace_mib")
        lines.append(f"\n**{res['model']}** (max |eager out| {res['ref_max']:.3g}"
                     + (f"; pt2c workspace {ws:.2f} MiB" if ws is not None else "") + ")\n")
        lines.append("| engine | threads | ms | / eager | / ORT | max abs err | peak MiB |")
        lines.append("|---|---:|---:|---:|---:|---:|---:|")
        for key, r in res["engines"].items():
            eng, nt = key.split("@")
            if "error" in r:
                lines.append(f"| {eng} | {nt} | failed: {r['error'].replace('|', '/')} | | | | |")
            else:
                lines.append(f"| {eng} | {nt} | {r['median_ms']:.3f} | {fmt(r.get('vs_eager'))} | "
                             f"{fmt(r.get('vs_ort'))} | {r['max_abs_err']:.1e} | {r['peak_mib']:.0f} |")
    with open(path, "a") as f:
        f.write("\n".join(lines) + "\n")


def _ver(mod: str) -> str:
    try:
        from importlib.metadata import version

        return version(mod)
    except Exception:  # noqa: BLE001
        return "not installed"


def write_png(path: str, results: list[dict], engines: list[str], threads: list[int]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, axes = plt.subplots(1, len(threads), figsize=(6 * len(threads), 4.5), squeeze=False)
    for ax, nt in zip(axes[0], threads):
        x = np.arange(len(results))
        w = 0.8 / len(engines)
        for i, eng in enumerate(engines):
            vals = [r["engines"].get(f"{eng}@{nt}", {}).get("vs_eager") or float("nan") for r in results]
            ax.bar(x + (i - (len(engines) - 1) / 2) * w, vals, w, label=eng)
        ax.axhline(1.0, color="k", lw=0.8)
        ax.set_xticks(x, [r["model"] for r in results], rotation=20)
        ax.set_yscale("log")
        ax.set_ylabel("latency / eager (log; lower is better; no bar = failed)")
        ax.set_title(f"{nt} thread(s)")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]))
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--engines", default=",".join(ENGINES))
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--runs", type=int, default=24, help="timed runs per engine/thread count (>= 20 advised)")
    ap.add_argument("--per-round", type=int, default=4, help="runs per engine per round-robin round")
    ap.add_argument("--md", help="append the results as markdown to this file")
    ap.add_argument("--png", help="write a bar chart (latency / eager) here")
    ap.add_argument("--json", help="write raw results here (after every model)")
    ap.add_argument("--from-json", help="only render --md / --png from a --json file of an earlier run")
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                    help="wall: latency (default); cpu: the worker's CPU time per run -- use with --threads 1 on a "
                         "machine shared with other jobs, where wall time mostly measures the load")
    ap.add_argument("--hide-avx512", action="store_true",
                    help="time every engine as on an AVX2+FMA CPU: cpuid hides AVX-512/AMX (see bench/avx2_only.c)")
    args = ap.parse_args()
    if args.hide_avx512:
        hide_avx512.reexec()
    if args.clock == "cpu":
        if args.threads != "1":
            ap.error("--clock cpu measures latency only with --threads 1")
        os.environ["PT2C_BENCH_CLOCK"] = "cpu"  # inherited by the workers
    engines = args.engines.split(",")
    threads = [int(t) for t in args.threads.split(",")]
    t0 = time.perf_counter()

    def log(s):
        print(s, file=sys.stderr, flush=True)

    results = json.loads(Path(args.from_json).read_text()) if args.from_json else []
    for spec in [] if args.from_json else args.models.split(","):
        log(f"== {spec}")
        try:
            res = bench_model(spec, engines, threads, args.runs, args.per_round, log)
        except Exception as e:  # noqa: BLE001
            log(traceback.format_exc())
            res = {"model": spec, "ref_max": float("nan"),
                   "engines": {f"{e_}@{nt}": {"error": f"{type(e).__name__}: {e}"[:300]} for e_ in engines for nt in threads}}
        results.append(res)
        if args.json:  # after every model, so an interrupted run keeps what it measured
            Path(args.json).write_text(json.dumps(results, indent=1))
        for key, r in res["engines"].items():
            if "error" in r:
                print(f"{spec:12s} {key:12s} FAILED {r['error']}", flush=True)
            else:
                print(f"{spec:12s} {key:12s} {r['median_ms']:9.3f} ms  /eager {fmt(r.get('vs_eager'))}  "
                      f"/ort {fmt(r.get('vs_ort'))}  err {r['max_abs_err']:.1e}  peak {r['peak_mib']:.0f} MiB",
                      flush=True)
    elapsed = time.perf_counter() - t0
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    import torch

    cpu = platform.machine()
    try:
        cpu = next(ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name"))
    except (OSError, StopIteration):
        pass
    machine = f"{os.cpu_count()}-core {cpu}" + (f"; {hide_avx512.LABEL}" if args.hide_avx512 else "")
    if args.png:
        write_png(args.png, results, engines, threads)
    if args.md:
        write_md(args.md, results, args, sys.argv[1:], machine, elapsed, torch.__version__, args.png)


if __name__ == "__main__":
    main()
