"""A/B latency of two pt2c source trees on the same models, interleaved in one process.

    python bench/ab.py --base /path/to/old/src [--new src] [--models resnet18,mlp_b64] [--threads 1]
                       [--runs 40]
    python bench/ab.py --base ... --models bench/models.py:mobilenet_v2_tf   # a model outside the zoo

Each model is compiled (--target, default x86_64-v3; -O3) once with each tree (in a subprocess with that tree
first on sys.path), both libraries are loaded into one fresh process (ctypes, no torch), each by its own
tree's runner (runtime/runner.py, so the Python side of a call is compared too), and calls alternate
A, B, A, B ... so that machine drift hits both alike.  Prints the medians and
the median of the per-pair ratios new/base (< 1: new is faster), and the workspace sizes.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

BUILD = r"""
import sys
sys.path.insert(0, sys.argv[1])
import numpy as np, torch, pt2c
from pt2c import zoo
spec, out, name, target = sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5]
# not zoo.bench_model: the base tree may predate it
if ":" in spec:  # path/to/file.py:function -> (model, inputs)
    import importlib.util
    path, fn = spec.rsplit(":", 1)
    mspec = importlib.util.spec_from_file_location("ab_models", path)
    mod = importlib.util.module_from_spec(mspec)
    mspec.loader.exec_module(mod)
    model, inputs = getattr(mod, fn)()
else:
    model, inputs = zoo.mlp("bench", batch=64) if spec == "mlp_b64" else zoo.FAMILIES[spec]("bench")
ep = torch.export.export(model, inputs, strict=False)
pt2c.compile(ep, out, name=name, target=target)
pt2c.build(out, cflags="-O3 -std=c99")
for i, x in enumerate(inputs):
    np.save(f"{out}/../in{i}.npy", x.numpy())
with torch.no_grad():
    r = model(*inputs)
np.save(f"{out}/../ref.npy", (r if isinstance(r, torch.Tensor) else r[0]).numpy())
"""

TIME = r"""
import sys, time, json, glob, importlib.util, numpy as np
sys.path.insert(0, sys.argv[1])


def runner(src, tag):  # each tree's own runner module (it needs only pt2c.errors besides numpy)
    spec = importlib.util.spec_from_file_location(f"runner_{tag}", src + "/pt2c/runtime/runner.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.Model


wd, runs, base = sys.argv[2], int(sys.argv[3]), sys.argv[4]
a, b = runner(base, "a")(wd + "/a"), runner(sys.argv[1], "b")(wd + "/b")
xs = [np.load(p) for p in sorted(glob.glob(wd + "/in*.npy"))]
ref = np.load(wd + "/ref.npy")
err = [float(np.abs(m.run(xs)[0] - ref).max()) for m in (a, b)]
for _ in range(3):
    a.run(xs); b.run(xs)
ta, tb = [], []
for i in range(runs):
    for m, t_ in ((a, ta), (b, tb)) if i % 2 == 0 else ((b, tb), (a, ta)):
        t = time.perf_counter(); m.run(xs); t_.append(time.perf_counter() - t)
print(json.dumps({"a": ta, "b": tb, "err": err,
                  "ws": [m.manifest["memory"]["workspace_bytes"] for m in (a, b)],
                  "scratch": [m.manifest["memory"]["scratch_bytes"] for m in (a, b)]}))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", required=True, help="src/ folder of the base tree")
    ap.add_argument("--new", default=str(ROOT / "src"))
    ap.add_argument("--models", default="resnet18,mlp_b64")
    ap.add_argument("--threads", default="1")
    ap.add_argument("--runs", type=int, default=40)
    ap.add_argument("--target", default="x86_64-v3", help="pt2c --target (x86_64-v3,x86_64-v4: multi-versioned)")
    args = ap.parse_args()
    import numpy as np

    for spec in args.models.split(","):
        label = spec.rsplit(":", 1)[-1]
        if ":" in spec:
            spec = str(Path(spec.rsplit(":", 1)[0]).resolve()) + ":" + label
        wd = Path(tempfile.mkdtemp(prefix=f"pt2c_ab_{label}_"))
        for tag, src in (("a", args.base), ("b", args.new)):
            subprocess.run([sys.executable, "-c", BUILD, src, spec, str(wd / tag), f"{label}_{tag}", args.target],
                           check=True, capture_output=True)
        for nt in args.threads.split(","):
            env = dict(os.environ, OMP_NUM_THREADS=nt)
            out = subprocess.run([sys.executable, "-c", TIME, args.new, str(wd), str(args.runs), args.base], env=env,
                                 capture_output=True, text=True, check=True)
            r = json.loads(out.stdout.strip().splitlines()[-1])
            ta, tb = np.array(r["a"]), np.array(r["b"])
            print(f"{label:12s} threads={nt}  base {np.median(ta) * 1e3:8.3f} ms  new {np.median(tb) * 1e3:8.3f} ms  "
                  f"new/base {np.median(tb / ta):5.3f}  err base {r['err'][0]:.1e} new {r['err'][1]:.1e}  "
                  f"workspace {r['ws'][0] / 2**20:.1f} -> {r['ws'][1] / 2**20:.1f} MiB "
                  f"(scratch {r['scratch'][0] / 2**20:.2f} -> {r['scratch'][1] / 2**20:.2f})", flush=True)


if __name__ == "__main__":
    main()
