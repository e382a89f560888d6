"""pt2c library alone, 1 vs 2 (or more) threads, each setting in a fresh process without torch.

    python bench/threads.py [--models resnet18,mlp_b64] [--threads 1,2] [--runs 30]
                            [--wait-policy runner,default,passive] [--rounds 3]

Compiles each model once (x86_64-v3, -O3, OpenMP), then for every (threads, OMP_WAIT_POLICY)
setting starts a fresh Python process that loads the library through the ctypes runner
(numpy only: no torch, so only the system libgomp is loaded).  Wait policy "default" is
libgomp's own (spin 300k iterations, then sleep, threads not bound), "runner" what pt2c's
runner sets (GOMP_SPINCOUNT=20000; with 2+ threads OMP_PROC_BIND=close, OMP_PLACES=cores),
"unbound" the runner's spin count without the binding (OMP_PROC_BIND=false), "passive"
OMP_WAIT_POLICY=PASSIVE (bound like the runner).  Each child reports the median of
--runs runs after warm-up.  Settings are cycled --rounds times (interleaved) and the median
over rounds is printed, since a shared machine drifts.
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

CHILD = r"""
import ctypes, os, sys, time, json, numpy as np
if os.environ.pop("PT2C_THR_LIBGOMP_DEFAULT", None):  # libgomp's own default: load it before the runner
    ctypes.CDLL("libgomp.so.1", mode=ctypes.RTLD_GLOBAL)  # sets its spin count
sys.path.insert(0, sys.argv[1])
from pt2c.runtime.runner import Model
m = Model(sys.argv[2])
xs = [np.load(p) for p in sys.argv[4:]]
for _ in range(5):
    m.run(xs)
ts = []
for _ in range(int(sys.argv[3])):
    t = time.perf_counter(); m.run(xs); ts.append(time.perf_counter() - t)
print(json.dumps(float(np.median(ts)) * 1e3))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="resnet18,mlp_b64")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--wait-policy", default="runner,default,passive",
                    help="runner: what pt2c's runner sets (GOMP_SPINCOUNT=20000, threads bound to cores); "
                         "unbound: the same without binding; default: libgomp's own; "
                         "passive / active: OMP_WAIT_POLICY")
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--src", default=str(ROOT / "src"), help="pt2c source tree to compile with (A/B runs)")
    args = ap.parse_args()
    sys.path.insert(0, args.src)
    import numpy as np
    import torch

    import pt2c
    from pt2c import zoo

    for spec in args.models.split(","):
        model, inputs = zoo.bench_model(spec)
        wd = Path(tempfile.mkdtemp(prefix=f"pt2c_thr_{spec}_"))
        ep = torch.export.export(model, inputs, strict=False)
        pt2c.compile(ep, wd / "out", name=spec, target="x86_64-v3")
        pt2c.build(wd / "out", cflags="-O3 -std=c99")
        ins = []
        for i, x in enumerate(inputs):
            np.save(wd / f"in{i}.npy", x.numpy())
            ins.append(str(wd / f"in{i}.npy"))
        settings = [(int(t), w) for t in args.threads.split(",") for w in args.wait_policy.split(",")]
        res: dict = {s: [] for s in settings}
        for _ in range(args.rounds):
            for nt, wp in settings:
                env = dict(os.environ, OMP_NUM_THREADS=str(nt))
                for k in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OMP_PROC_BIND", "OMP_PLACES", "GOMP_CPU_AFFINITY"):
                    env.pop(k, None)
                if wp == "default":
                    env["PT2C_THR_LIBGOMP_DEFAULT"] = "1"
                elif wp == "unbound":
                    env["OMP_PROC_BIND"] = "false"
                elif wp != "runner":
                    env["OMP_WAIT_POLICY"] = wp.upper()
                out = subprocess.run([sys.executable, "-c", CHILD, args.src, str(wd / "out"), str(args.runs), *ins],
                                     env=env, capture_output=True, text=True, check=True)
                res[(nt, wp)].append(json.loads(out.stdout.strip().splitlines()[-1]))
        base = float(np.median(res[settings[0]]))
        for (nt, wp), v in res.items():
            med = float(np.median(v))
            print(f"{spec:10s} threads={nt} wait={wp:8s} {med:8.3f} ms  (rounds: {', '.join(f'{x:.2f}' for x in v)})"
                  f"  speed-up vs first {base / med:4.2f}", flush=True)


if __name__ == "__main__":
    main()
