"""A zoo model in float32, bfloat16 and float16: pt2c against eager in the same dtype, 1 thread.

    python bench/reduced_precision.py --models bert,resnet18,gpt2 [--runs 20] [--target x86_64-v3,x86_64-v4]
    python bench/reduced_precision.py --models bench/models.py:bert_base,bench/models.py:gpt2_124m

    python bench/reduced_precision.py --hf all --dtypes bfloat16,float16     # tests/test_hf_models.py's architectures

One process; for each dtype the model is converted (`.to(dtype)`), exported, compiled, built (-O3) and timed
(median of --runs, pt2c through its runner; eager under inference_mode), then a Markdown table.  With --hf:
each tiny transformers architecture of tests/test_hf_models.py (`all` or a comma list) converted to each dtype,
exported and checked by pt2c verify (x86_64-v3, eager in the same dtype, the dtype's default tolerance): one
JSON line per architecture and dtype.
"""

from __future__ import annotations

import argparse
import copy
import os
import tempfile
import warnings

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

import pt2c  # noqa: E402
from pt2c import zoo  # noqa: E402
from pt2c.runtime.verify import _to_numpy, as_float, time_eager, time_runner  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="bert,resnet18,gpt2")
    ap.add_argument("--dtypes", default="float32,bfloat16,float16")
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--target", default="x86_64-v3,x86_64-v4")
    ap.add_argument("--hf", default=None, help="verify tests/test_hf_models.py's architectures instead ('all' or a list)")
    a = ap.parse_args()
    warnings.filterwarnings("ignore")
    if a.hf:
        return verify_hf(a.hf, a.dtypes.split(","))
    torch.set_num_threads(1)
    rows = []
    for name in a.models.split(","):
        if ":" in name:  # bench/models.py:<function>
            import importlib.util

            path, fn = name.split(":")
            spec = importlib.util.spec_from_file_location("bench_models", path)
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
            m32, xs32 = getattr(mod, fn)()
            name = fn
        else:
            m32, xs32 = getattr(zoo, name)("bench")
        base = None
        for dt in a.dtypes.split(","):
            td = getattr(torch, dt)
            m = copy.deepcopy(m32).to(td).eval()
            xs = tuple(x.to(td) if x.is_floating_point() else x for x in xs32)
            with tempfile.TemporaryDirectory() as out:
                pt2c.compile(torch.export.export(m, xs), out, target=a.target)
                pt2c.build(out)
                lib = pt2c.load(out)
                arrays = [_to_numpy(x) for x in xs]
                got = as_float(lib.run(arrays)[0]).astype(np.float64)
                p = time_runner(lib, arrays, runs=a.runs, threads=1)
            e = time_eager(m, xs, runs=max(5, a.runs // 2), threads=1)
            with torch.inference_mode():
                ref = m(*xs).double().numpy()
            err = np.abs(got - ref).max() / max(1.0, np.abs(ref).max())
            base = base or p
            rows.append((name, dt, p, e, p / e, base / p, err))
            print(f"{name} {dt}: pt2c {p:.2f} ms, eager {e:.2f} ms", flush=True)
    print("\n| model | dtype | pt2c (ms) | eager (ms) | pt2c / eager | pt2c float32 / pt2c | error vs eager |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r[0]} | {r[1]} | {r[2]:.2f} | {r[3]:.2f} | {r[4]:.2f} | {r[5]:.2f} | {r[6]:.1e} |")


def verify_hf(archs: str, dtypes: list[str]) -> None:
    import json
    import sys
    import time
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from test_hf_models import ARCHS, make

    from pt2c.runtime.verify import verify

    for name in list(ARCHS) if archs == "all" else archs.split(","):
        for dt in dtypes:
            td, t0 = getattr(torch, dt), time.time()
            try:
                m, xs = make(name)
                m = m.to(td)
                xs = tuple(x.to(td) if x.is_floating_point() else x for x in xs)
                with torch.no_grad():
                    r = verify(torch.export.export(m, xs, strict=False), target="x86_64-v3")
                o = r.outputs[0]
                row = {"arch": name, "dtype": dt, "passed": r.passed, "err": o.max_abs_err, "rel": o.max_rel_err}
            except Exception as e:  # an export or compile failure is a row too
                row = {"arch": name, "dtype": dt, "error": f"{type(e).__name__}: {str(e)[:300]}"}
            print(json.dumps(row | {"s": round(time.time() - t0, 1)}), flush=True)


if __name__ == "__main__":
    main()
