"""Greedy generation with a KV cache, compiled by pt2c, checked token for token against transformers.

    python examples/generate/generate.py --arch llama          (or gpt2; --new 32, --out DIR)

1. A causal LM from transformers (a tiny random-weight configuration; --size bench: GPT-2 124M's shape)
   wrapped with its static KV cache (transformers' TorchExportableModuleForDecoderOnlyLM) and exported with
   a dynamic number of tokens per call: the cache is buffers the program updates in place.
2. pt2c compiles it (`--name lm`): the cache lives in the workspace from run to run (lm_reset_state starts
   a new sequence); the tokens per call are a run-time size (lm_set_sizes).
3. Generation from Python (pt2c.load), then from C (generate.c, built here with cc): the prompt in one
   call, then one call per new token; both compared with `model.generate(do_sample=False)`.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch

import pt2c

HERE = Path(__file__).resolve().parent


def make_model(arch: str, size: str):
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    if arch == "gpt2":
        cfg = (GPT2Config() if size == "bench" else
               GPT2Config(n_embd=64, n_layer=2, n_head=4, vocab_size=256, n_positions=128, bos_token_id=0, eos_token_id=0))
        model = GPT2LMHeadModel(cfg)
    else:
        cfg = LlamaConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                          intermediate_size=128, vocab_size=256, max_position_embeddings=128,
                          bos_token_id=0, eos_token_id=0)
        model = LlamaForCausalLM(cfg)
    with torch.no_grad():  # random weights with some contrast, so the greedy tokens depend on the whole context
        for p in model.parameters():
            if p.dim() >= 2:
                p.normal_(0.0, 0.08)
    return model.eval()


def export_with_cache(model, cache_len: int):
    """The model with its static KV cache (transformers' wrapper), n tokens per call for n in 1..cache_len."""
    from torch.export import Dim
    from transformers import GenerationConfig
    from transformers.integrations.executorch import TorchExportableModuleForDecoderOnlyLM

    model.generation_config = GenerationConfig(use_cache=True, cache_implementation="static",
                                               cache_config={"batch_size": 1, "max_cache_len": cache_len})
    wrapper = TorchExportableModuleForDecoderOnlyLM(model, batch_size=1, max_cache_len=cache_len)
    n = Dim("tokens", min=1, max=cache_len)
    return wrapper.export(input_ids=torch.tensor([[1, 2, 3]]), cache_position=torch.arange(3),
                          dynamic_shapes={"input_ids": {1: n}, "cache_position": {0: n}})


def generate(lm, prompt: list[int], new: int) -> list[int]:
    """Greedy tokens from a loaded pt2c artifact: the prompt in one call, then one token per call."""
    lm.reset_state()
    ids, pos, out = np.array([prompt], np.int64), np.arange(len(prompt), dtype=np.int64), []
    for _ in range(new):
        logits = lm.run([ids, pos])[0]
        out.append(int(logits[0, -1].argmax()))
        ids, pos = np.array([[out[-1]]], np.int64), np.array([pos[-1] + 1], np.int64)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", choices=("gpt2", "llama"), default="llama")
    ap.add_argument("--size", choices=("tiny", "bench"), default="tiny")
    ap.add_argument("--new", type=int, default=24, help="tokens to generate")
    ap.add_argument("--cache", type=int, default=64, help="KV cache length (prompt + new tokens)")
    ap.add_argument("--out", type=Path, default=Path("generate_out"))
    a = ap.parse_args(argv)

    model = make_model(a.arch, a.size)
    prompt = [5, 17, 42, 8, 99, 3]
    with torch.no_grad():
        ref = model.generate(torch.tensor([prompt]), max_new_tokens=a.new, min_new_tokens=a.new, do_sample=False,
                             pad_token_id=0)[0, len(prompt):].tolist()
    print(f"exporting {a.arch} with a {a.cache}-token KV cache ...", flush=True)
    ep = export_with_cache(model, a.cache)
    art = pt2c.compile(ep, a.out, name="lm", force=True)
    print(f"compiled: {len(art.manifest['state'])} cache buffers ({art.manifest['memory']['state_bytes']} bytes) in the "
          f"workspace; tokens per call {art.manifest['sizes'][0]['min']}..{art.manifest['sizes'][0]['max']}")
    pt2c.build(a.out)
    lm = pt2c.load(a.out)
    ours = generate(lm, prompt, a.new)
    print("transformers:", ref)
    print("pt2c (Python):", ours, "MATCH" if ours == ref else "DIFFERENT")

    exe = a.out / "generate"
    subprocess.run(["cc", "-std=c99", "-O2", "-I", str(a.out), str(HERE / "generate.c"), str(a.out / "lm.c"),
                    "-o", str(exe), "-lm"], check=True)
    res = subprocess.run([str(exe), str(a.out / "lm.weights"), str(a.new), *map(str, prompt)], check=True,
                         capture_output=True, text=True)
    c_tokens = [int(t) for t in res.stdout.split()]
    print("pt2c (C):     ", c_tokens, "MATCH" if c_tokens == ref else "DIFFERENT")
    return 0 if ours == ref and c_tokens == ref else 1


if __name__ == "__main__":
    sys.exit(main())
