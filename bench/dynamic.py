"""Dynamic sizes and KV-cache decoding, measured (docs/BENCHMARKS.md, "Dynamic shapes").

    python bench/dynamic.py bert   [--layers 12] [--lengths 16,64,128,384] [--runs 30] [--target x86_64-v3]
    python bench/dynamic.py decode [--prompt 128] [--new 128] [--threads 1,2] [--target x86_64-v3]

bert: BERT-base (random weights, batch 1) at each sequence length from ONE artifact compiled with a dynamic
length (1..max) against one static artifact per length; calls alternate dynamic, static, dynamic, ... in one
process so machine drift hits both alike; prints the medians and the median per-pair ratio dynamic/static.

decode: greedy decoding with a GPT-2 124M-shaped model (random weights): the prompt in one call, then one call
per new token, the KV cache held by the artifact (transformers' static-cache wrapper, compiled by pt2c) against
PyTorch eager with its own KV cache (the model called with past_key_values, as generate() does) and ONNX
Runtime running the model exported with its past key/values as inputs and outputs; tokens/s of the decode
phase and the prefill time, per thread count.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "examples" / "generate"))
sys.path.insert(0, str(ROOT / "bench"))

import pt2c  # noqa: E402
from models import HiddenStates  # noqa: E402  (bench/models.py)
from pt2c.runtime.verify import as_float, set_runner_threads  # noqa: E402


def cpu_name() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def bert(a: argparse.Namespace) -> None:
    from torch.export import Dim
    from transformers import BertConfig, BertModel

    lengths = [int(x) for x in a.lengths.split(",")]
    torch.manual_seed(0)
    model = BertModel(BertConfig(num_hidden_layers=a.layers, attn_implementation="sdpa"), add_pooling_layer=False).eval()

    w = HiddenStates(model).eval()
    work = Path(tempfile.mkdtemp(prefix="pt2c-dyn-"))

    def inputs(n: int) -> tuple[torch.Tensor, torch.Tensor]:
        g = torch.Generator().manual_seed(n)
        return torch.randint(0, 30522, (1, n), generator=g), torch.ones(1, n, dtype=torch.int64)

    def build(ep, name: str):
        t0 = time.perf_counter()
        pt2c.compile(ep, work / name, name=name, target=a.target)
        pt2c.build(work / name, cflags="-O3 -std=c99")
        print(f"  {name}: compiled and built in {time.perf_counter() - t0:.0f} s", flush=True)
        m = pt2c.load(work / name)
        set_runner_threads(m, 1)
        return m

    s = Dim("seq", min=1, max=max(lengths))
    dyn = build(torch.export.export(w, inputs(lengths[1]), dynamic_shapes=({1: s}, {1: s}), strict=False), "bert_dyn")
    rows = []
    for n in lengths:
        st = build(torch.export.export(w, inputs(n), strict=False), f"bert_{n}")
        xs = [t.numpy() for t in inputs(n)]
        with torch.no_grad():
            ref = w(*inputs(n)).numpy()
        for m in (dyn, st):
            err = float(np.abs(m.run(xs)[0] - ref).max())
            assert err < 1e-3, err
            for _ in range(3):
                m.run(xs)
        td, ts, ratio = [], [], []
        for _ in range(a.runs):
            t0 = time.perf_counter()
            dyn.run(xs)
            t1 = time.perf_counter()
            st.run(xs)
            t2 = time.perf_counter()
            td.append(t1 - t0)
            ts.append(t2 - t1)
            ratio.append((t1 - t0) / (t2 - t1))
        rows.append((n, statistics.median(td) * 1e3, statistics.median(ts) * 1e3, statistics.median(ratio)))
        print(f"  seq {n}: dynamic {rows[-1][1]:.2f} ms, static {rows[-1][2]:.2f} ms, ratio {rows[-1][3]:.3f}", flush=True)
    print(f"\nBERT ({a.layers} layers, hidden 768, batch 1), 1 thread, {cpu_name()}, target {a.target}, "
          f"median of {a.runs} interleaved pairs")
    print("| seq | one dynamic artifact (1..%d) | static artifact per length | dynamic / static |" % max(lengths))
    print("|---:|---:|---:|---:|")
    for n, d, s_, r in rows:
        print(f"| {n} | {d:.2f} ms | {s_:.2f} ms | {r:.3f} |")


def decode(a: argparse.Namespace) -> None:
    from generate import export_with_cache, make_model

    model = make_model("gpt2", "bench").to(getattr(torch, a.dtype))
    cache = a.prompt + a.new
    work = Path(tempfile.mkdtemp(prefix="pt2c-decode-"))
    t0 = time.perf_counter()
    art = pt2c.compile(export_with_cache(model, cache), work / "lm", name="lm", target=a.target)
    pt2c.build(work / "lm", cflags="-O3 -std=c99")
    print(f"compiled + built in {time.perf_counter() - t0:.0f} s; cache {art.manifest['memory']['state_bytes'] / 2**20:.1f} MiB "
          "in the workspace", flush=True)
    lm = pt2c.load(work / "lm")
    prompt = torch.randint(0, 50257, (1, a.prompt), generator=torch.Generator().manual_seed(0))

    def run_pt2c() -> tuple[float, float, list[int]]:
        lm.reset_state()
        ids, pos = prompt.numpy(), np.arange(a.prompt, dtype=np.int64)
        t0 = time.perf_counter()
        logits = lm.run([ids, pos])[0]
        t1 = time.perf_counter()
        toks = [int(as_float(logits[0, -1]).argmax())]
        for i in range(a.new - 1):
            logits = lm.run([np.array([[toks[-1]]], np.int64), np.array([a.prompt + i], np.int64)])[0]
            toks.append(int(as_float(logits[0, -1]).argmax()))
        return t1 - t0, time.perf_counter() - t1, toks

    def run_eager() -> tuple[float, float, list[int]]:
        with torch.inference_mode():
            t0 = time.perf_counter()
            out = model(prompt, use_cache=True)
            t1 = time.perf_counter()
            past, toks = out.past_key_values, [int(out.logits[0, -1].argmax())]
            for _ in range(a.new - 1):
                out = model(torch.tensor([[toks[-1]]]), past_key_values=past, use_cache=True)
                past = out.past_key_values
                toks.append(int(out.logits[0, -1].argmax()))
        return t1 - t0, time.perf_counter() - t1, toks

    engines = [("pt2c", run_pt2c), ("PyTorch eager (KV cache)", run_eager)]
    if a.ort:
        engines.append(("ONNX Runtime (past key/values)", ort_decoder(model, prompt, a, work)))

    print(f"\nGPT-2 124M shape (random weights, {a.dtype}), prompt {a.prompt} + {a.new} new tokens, greedy, "
          f"{cpu_name()}, target {a.target}; median of {a.reps}")
    print("| threads | engine | prefill (ms) | decode tokens/s |")
    print("|---:|---|---:|---:|")
    for th in [int(t) for t in a.threads.split(",")]:
        torch.set_num_threads(th)
        set_runner_threads(lm, th)
        res = {}
        if a.ort:
            engines[-1] = (engines[-1][0], ort_decoder(model, prompt, a, work, th))
        for name, fn in engines:
            fn()  # warm-up
            runs = [fn() for _ in range(a.reps)]
            res[name] = runs[0][2]
            pre = statistics.median(r[0] for r in runs) * 1e3
            tps = (a.new - 1) / statistics.median(r[1] for r in runs)
            print(f"| {th} | {name} | {pre:.1f} | {tps:.1f} |", flush=True)
        same = all(r == res["PyTorch eager (KV cache)"] for r in res.values())
        print(f"|  | tokens identical across engines: {same} | | |")


def ort_decoder(model, prompt: torch.Tensor, a: argparse.Namespace, work: Path, threads: int = 1):
    """ONNX Runtime decoding the model exported with its past key/values as inputs and outputs (dynamic past
    length), the way ORT runs LMs: each call returns the grown cache, fed back to the next.  The export needs a
    past of at least one token, so eager computes the first prompt token's cache and ORT the rest of the
    prompt (its prefill time is for prompt - 1 tokens)."""
    import onnxruntime as ort
    from torch.export import Dim
    from transformers import DynamicCache

    cfg, L = model.config, model.config.n_layer
    path = work / "gpt2_past.onnx"

    class Step(torch.nn.Module):
        def __init__(self, lm):
            super().__init__()
            self.lm = lm

        def forward(self, ids, pos, *past):
            cache = DynamicCache(config=cfg)
            for i in range(L):
                cache.update(past[2 * i], past[2 * i + 1], i)
            out = self.lm(input_ids=ids, past_key_values=cache, position_ids=pos, use_cache=True)
            return (out.logits, *[t for i in range(L) for t in (out.past_key_values.layers[i].keys,
                                                                 out.past_key_values.layers[i].values)])

    names = [f"past_{i}" for i in range(2 * L)]
    if not path.exists():
        H, D = cfg.n_head, cfg.n_embd // cfg.n_head
        S, P = Dim("seq", min=1, max=1024), Dim("past", min=1, max=1024)
        ex = (torch.tensor([[5, 6, 7]]), torch.tensor([[4, 5, 6]]), *[torch.randn(1, H, 4, D) for _ in range(2 * L)])
        torch.onnx.export(Step(model).eval(), ex, str(path), dynamo=True, input_names=["ids", "pos", *names],
                          output_names=["logits", *[f"present_{i}" for i in range(2 * L)]],
                          dynamic_shapes=({1: S}, {1: S}, tuple({2: P} for _ in range(2 * L))))
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    with torch.inference_mode():
        first = model(prompt[:, :1], use_cache=True).past_key_values
    past0 = [t.numpy() for i in range(L) for t in (first.layers[i].keys, first.layers[i].values)]

    def run() -> tuple[float, float, list[int]]:
        n = prompt.shape[1]
        t0 = time.perf_counter()
        out = sess.run(None, {"ids": prompt[:, 1:].numpy(), "pos": np.arange(1, n)[None], **dict(zip(names, past0))})
        t1 = time.perf_counter()
        toks = [int(out[0][0, -1].argmax())]
        for i in range(a.new - 1):
            out = sess.run(None, {"ids": np.array([[toks[-1]]]), "pos": np.array([[n + i]]), **dict(zip(names, out[1:]))})
            toks.append(int(out[0][0, -1].argmax()))
        return t1 - t0, time.perf_counter() - t1, toks

    return run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="what", required=True)
    b = sub.add_parser("bert")
    b.add_argument("--layers", type=int, default=12)
    b.add_argument("--lengths", default="16,64,128,384")
    b.add_argument("--runs", type=int, default=30)
    b.add_argument("--target", default="x86_64-v3")
    d = sub.add_parser("decode")
    d.add_argument("--prompt", type=int, default=128)
    d.add_argument("--new", type=int, default=128)
    d.add_argument("--threads", default="1,2")
    d.add_argument("--reps", type=int, default=3)
    d.add_argument("--target", default="x86_64-v3")
    d.add_argument("--no-ort", dest="ort", action="store_false", help="leave ONNX Runtime out")
    d.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"),
                   help="the model's dtype (eager runs in it too; ONNX Runtime: leave out with --no-ort)")
    a = ap.parse_args()
    bert(a) if a.what == "bert" else decode(a)


if __name__ == "__main__":
    main()
