"""Every transformers architecture of tests/test_hf_models.py at a realistic size: pt2c against ONNX Runtime
and PyTorch eager, 1 and 2 threads.

    python bench/corpus.py [--archs opt,vit,...] [--threads 1,2] [--runs 12] [--md docs/BENCHMARKS.md]
                           [--png docs/corpus.png] [--json /tmp/corpus.json]
    python bench/corpus.py --from-json /tmp/corpus.json --md ... --png ...    # render an earlier run

Sizes: each architecture's default configuration (its reference model: BertConfig() is bert-base,
GPT2Config() GPT-2 124M, ViTConfig() ViT-B/16 ...).  Where that has more than MAX_PARAMS parameters (the
7B decoders, the mixtures of experts), a stated scaled-down configuration: 768 wide, 12 layers of 12
heads (4 key/value heads where the architecture groups them), 3072-wide MLPs, a vocabulary of at most
32000 and at most 8 experts; then 4 layers if still too large.  The table names every change.  Inputs:
one sequence of 128 tokens (encoders: with an attention mask; encoder-decoders: 32 decoder tokens), one
224 x 224 image (or the configuration's image size), one second of 16 kHz audio, whisper's 30 s of
log-mel features.  Random weights (HF's init), no downloads.

Each model goes through bench/compare.py's method: exported, compiled by pt2c (the multi-versioned
x86_64-v3,x86_64-v4 artifact, -O3) and by the ONNX exporter, every engine timed in its own worker
process, round-robin; see its docstring.  Failures (export, ONNX, pt2c) are recorded and the run goes on.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "src"))

MAX_PARAMS = 400e6
ENGINES = ["pt2c_mv", "ort", "eager"]
SCALED = dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072)


def _config(name: str) -> tuple[Any, Any, str, dict[str, Any]]:
    """(model class, config, input kind, the changes made to the default configuration)"""
    import torch
    import transformers

    from test_hf_models import ARCHS, for_inference

    cfg_cls, model_cls, _, kind = ARCHS[name]
    cls = getattr(transformers, model_cls)
    cfg = getattr(transformers, cfg_cls)()
    changes: dict[str, Any] = {}

    def params() -> float:
        with torch.device("meta"):
            return sum(p.numel() for p in cls(cfg).parameters())

    def setc(**kw: Any) -> None:
        for k, v in kw.items():
            if hasattr(cfg, k) and getattr(cfg, k) != v:
                setattr(cfg, k, v)
                changes[k] = v

    if params() > MAX_PARAMS:
        setc(**SCALED)
        if getattr(cfg, "num_key_value_heads", None) not in (None, 12):
            setc(num_key_value_heads=4)
        if getattr(cfg, "head_dim", None) is not None:
            setc(head_dim=64)
        if getattr(cfg, "vocab_size", 0) > 32000:
            setc(vocab_size=32000)
        if (getattr(cfg, "pad_token_id", None) or 0) >= getattr(cfg, "vocab_size", 1 << 30):
            setc(pad_token_id=0)
        for k in ("num_local_experts", "num_experts"):
            if getattr(cfg, k, 0) > 8:
                setc(**{k: 8})
        for k in ("moe_intermediate_size", "shared_expert_intermediate_size"):
            if getattr(cfg, k, 0) > 1536:
                setc(**{k: 1536})
        if params() > MAX_PARAMS:
            setc(num_hidden_layers=4)
    for_inference(cfg, cls)
    return cls, cfg, kind, changes


def make_real(name: str) -> tuple[Any, tuple]:
    """(model, inputs) for one architecture at its realistic size (see the module docstring)."""
    import torch

    from pt2c.zoo import _hf_init, _randomize_bn
    from test_hf_models import positional

    cls, cfg, kind, _ = _config(name)
    torch.manual_seed(0)
    model = cls(cfg)
    _hf_init(model)
    _randomize_bn(model)
    m = positional(model, kind)

    g = torch.Generator().manual_seed(1)
    vocab = int(getattr(cfg, "vocab_size", 1000) or 1000)
    ids = torch.randint(2, min(vocab, 30000), (1, 128), generator=g)
    if kind in ("vit", "img"):
        n = getattr(cfg, "image_size", 224)
        n = n[0] if isinstance(n, (list, tuple)) else n
        return m, (torch.randn(1, getattr(cfg, "num_channels", 3), n, n, generator=g),)
    if kind == "audio":
        return m, (torch.randn(1, 16000, generator=g),)
    dec = torch.randint(2, min(vocab, 30000), (1, 32), generator=g)
    if kind == "whisper":
        return m, (torch.randn(1, cfg.num_mel_bins, 2 * cfg.max_source_positions, generator=g), dec)
    if kind == "lm":
        return m, (ids,)
    mask = torch.ones(1, 128, dtype=torch.int64)
    if kind == "s2s":
        return m, (ids, mask, dec)
    return m, (ids, mask)


def describe(name: str) -> tuple[float, str]:
    """(parameters in millions, the configuration: "default" or its changes)"""
    import torch

    cls, cfg, _, changes = _config(name)
    with torch.device("meta"):
        n = sum(p.numel() for p in cls(cfg).parameters())
    return n / 1e6, ("default" if not changes else "scaled: " + ", ".join(f"{k}={v}" for k, v in changes.items()))


def _geomean(xs: list[float]) -> float | None:
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def write_md(path: str, results: list[dict], threads: list[int], argv: list[str], machine: str, elapsed: float,
             png: str | None) -> None:
    lines = [f"\n### {time.strftime('%Y-%m-%d %H:%M')}: the corpus, {machine}\n",
             f"`python bench/corpus.py {' '.join(argv)}` ({elapsed / 60:.0f} min). pt2c: the multi-versioned "
             "x86_64-v3,x86_64-v4 artifact (gcc -O3, OpenMP). Median latency in ms; pt2c/ORT < 1: pt2c is faster. "
             "pt2c error: max |pt2c - eager| / max(1, max |eager|) on the first output.\n"]
    head = "| model | params (M) | configuration | pt2c error | " + " | ".join(
        f"pt2c {t}T | ORT {t}T | eager {t}T | pt2c/ORT {t}T | pt2c/eager {t}T" for t in threads) + " |"
    lines += [head, "|" + "---|" * (4 + 5 * len(threads))]
    ratios: dict[int, list[tuple[float, str]]] = {t: [] for t in threads}
    failed = []
    for r in results:
        err = r["engines"].get(f"pt2c_mv@{threads[0]}", {}).get("max_abs_err")
        rel = err / max(1.0, r.get("ref_max", 1.0)) if err is not None else None
        row = [r["model"][3:], f"{r['params_m']:.0f}", r["config"], f"{rel:.1e}" if rel is not None else "-"]
        for t in threads:
            e = {k: r["engines"].get(f"{k}@{t}", {}) for k in ENGINES}
            ms = {k: v.get("median_ms") for k, v in e.items()}
            row += [f"{ms[k]:.2f}" if ms[k] else "fail" for k in ENGINES]
            vo = ms["pt2c_mv"] / ms["ort"] if ms["pt2c_mv"] and ms["ort"] else None
            ve = ms["pt2c_mv"] / ms["eager"] if ms["pt2c_mv"] and ms["eager"] else None
            row += [f"{vo:.2f}" if vo else "-", f"{ve:.2f}" if ve else "-"]
            if vo:
                ratios[t].append((vo, r["model"][3:]))
        for k in ENGINES:
            err = r["engines"].get(f"{k}@{threads[0]}", {}).get("error")
            if err:
                failed.append(f"{r['model'][3:]} {k}: {err[:160]}")
        lines.append("| " + " | ".join(row) + " |")
    lines.append("")
    for t in threads:
        rs = ratios[t]
        if rs:
            worst = max(rs)
            lines.append(f"- {t} thread(s): pt2c/ORT geometric mean **{_geomean([x for x, _ in rs]):.2f}** over "
                         f"{len(rs)} models, worst {worst[0]:.2f} ({worst[1]}), best {min(rs)[0]:.2f} ({min(rs)[1]}).")
    if failed:
        lines.append("- Failures: " + "; ".join(failed))
    if png:
        lines.append(f"\n![pt2c / ORT per model]({Path(png).name})\n")
    with open(path, "a") as f:
        f.write("\n".join(lines) + "\n")


def write_png(path: str, results: list[dict], threads: list[int]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [r["model"][3:] for r in results]
    fig, ax = plt.subplots(figsize=(max(8, 0.35 * len(names)), 4))
    w = 0.8 / len(threads)
    for i, t in enumerate(threads):
        vals = []
        for r in results:
            p, o = (r["engines"].get(f"{k}@{t}", {}).get("median_ms") for k in ("pt2c_mv", "ort"))
            vals.append(p / o if p and o else 0)
        ax.bar([j + i * w for j in range(len(names))], vals, w, label=f"{t} thread(s)")
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xticks([j + w * (len(threads) - 1) / 2 for j in range(len(names))], names, rotation=70, fontsize=7)
    ax.set_ylabel("pt2c latency / ONNX Runtime")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    import compare
    from test_hf_models import ARCHS

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--archs", default=",".join(ARCHS))
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--runs", type=int, default=12)
    ap.add_argument("--per-round", type=int, default=3)
    ap.add_argument("--md")
    ap.add_argument("--png")
    ap.add_argument("--json")
    ap.add_argument("--from-json", help="only render --md / --png from the --json of an earlier run")
    args = ap.parse_args()
    threads = [int(t) for t in args.threads.split(",")]
    t0 = time.perf_counter()

    def log(s: str) -> None:
        print(s, file=sys.stderr, flush=True)

    results = json.loads(Path(args.from_json).read_text()) if args.from_json else []
    for name in [] if args.from_json else args.archs.split(","):
        log(f"== {name}")
        try:
            params_m, config = describe(name)
            res = compare.bench_model("hf:" + name, ENGINES, threads, args.runs, args.per_round, log)
        except Exception as e:  # noqa: BLE001
            log(traceback.format_exc())
            params_m, config = float("nan"), "?"
            res = {"model": "hf:" + name, "engines": {f"{k}@{t}": {"error": f"{type(e).__name__}: {e}"[:300]}
                                                      for k in ENGINES for t in threads}}
        res["params_m"], res["config"] = params_m, config
        results.append(res)
        if args.json:
            Path(args.json).write_text(json.dumps(results, indent=1))
        for t in threads:
            ms = {k: res["engines"].get(f"{k}@{t}", {}).get("median_ms") for k in ENGINES}
            print(f"{name:14s} {t}T " + "  ".join(f"{k} {v:.2f}" if v else f"{k} fail" for k, v in ms.items()),
                  flush=True)
    cpu = platform.machine()
    try:
        cpu = next(ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name"))
    except (OSError, StopIteration):
        pass
    if args.png:
        write_png(args.png, results, threads)
    if args.md:
        write_md(args.md, results, threads, sys.argv[1:], f"{os.cpu_count()}-core {cpu}",
                 time.perf_counter() - t0, args.png)


if __name__ == "__main__":
    main()
