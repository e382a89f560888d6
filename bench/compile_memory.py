"""Peak memory and time of `pt2c compile` on a large model, in a fresh process.

    python bench/compile_memory.py [--model gpt2_124m] [--target x86_64-v3]

The model (a function of bench/models.py) is exported and saved to a .pt2 first, in this process;
then `pt2c compile` runs as a child and its peak resident set (getrusage of the children) and wall
time are printed beside the .pt2's size.
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="gpt2_124m")
    ap.add_argument("--target", default="x86_64-v3")
    args = ap.parse_args()
    import torch

    import models

    model, inputs = getattr(models, args.model)()
    work = Path(tempfile.mkdtemp(prefix="pt2c_mem_"))
    pt2 = work / f"{args.model}.pt2"
    torch.export.save(torch.export.export(model, inputs, strict=False), pt2)
    del model
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", "pt2c.cli", "compile", str(pt2), "-o", str(work / "out"),
                    "--target", args.target], check=True, capture_output=True)
    wall = time.perf_counter() - t
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024  # KiB -> MiB (Linux)
    size = pt2.stat().st_size / 2**20
    print(f"{args.model}: .pt2 {size:.0f} MiB, compile {wall:.1f} s, peak RSS {peak:.0f} MiB "
          f"({peak / size:.1f}x the .pt2)")


if __name__ == "__main__":
    main()
