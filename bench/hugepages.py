"""A/B of the runner's weight and workspace buffers: 2 MiB-aligned MADV_HUGEPAGE mappings (what
pt2c.load does on Linux) against plain 64-byte aligned numpy buffers, in one process.

    python bench/hugepages.py [--models mobilenetv2,mlp_b64] [--threads 1] [--runs 40] [--warm]

Each model (bench size, x86_64-v3, -O3) is built once and loaded twice; calls alternate between
the two loads (A B, B A, ...).  By default a sweep over 256 MiB before every call evicts the
caches (and TLB reach), as when an application does other work between inferences; --warm
leaves them.  Prints the medians and new/old.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="mobilenetv2,mlp_b64")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--runs", type=int, default=40)
    ap.add_argument("--warm", action="store_true", help="no cache eviction between calls")
    args = ap.parse_args()
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    import numpy as np
    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    import pt2c
    import pt2c.runtime.runner as runner
    from pt2c import zoo

    sweep = None if args.warm else np.zeros((256 << 20) // 4, np.float32)
    for spec in args.models.split(","):
        model, inputs = zoo.bench_model(spec)
        out = Path(tempfile.mkdtemp(prefix=f"pt2c_hugepages_{spec}_"))
        pt2c.compile(torch.export.export(model, inputs), out, target="x86_64-v3")
        lib = pt2c.build(out, cflags="-O3 -std=c99")
        new = runner.Model(out, lib=lib, threads=args.threads)
        big, runner._big_buffer = runner._big_buffer, runner._aligned
        try:
            old = runner.Model(out, lib=lib, threads=args.threads)
        finally:
            runner._big_buffer = big
        xs = [t.numpy() for t in inputs]
        assert np.array_equal(old(*xs), new(*xs))
        ts: dict[str, list[float]] = {"old": [], "new": []}
        for i in range(args.runs):
            for key, m in (("old", old), ("new", new)) if i % 2 else (("new", new), ("old", old)):
                if sweep is not None:
                    sweep += 1.0
                t = time.perf_counter()
                m(*xs)
                ts[key].append(time.perf_counter() - t)
        mo, mn = (float(np.median(ts[k])) * 1e3 for k in ("old", "new"))
        print(f"{spec:12s} threads={args.threads} {'warm' if args.warm else 'cold'}  plain buffers {mo:8.3f} ms  "
              f"huge-page buffers {mn:8.3f} ms  new/old {mn / mo:5.3f}", flush=True)


if __name__ == "__main__":
    main()
