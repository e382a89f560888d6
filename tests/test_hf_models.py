"""More `transformers` architectures, from tiny configs (random weights, no downloads).

Each model is exported (``torch.export``, strict=False), compiled by pt2c, built (all models
into one ``.so``, like test_ops.py) and compared with eager: max abs error <= 1e-4 *
max(1, max|ref|) on the first output (last hidden state or logits).  Compiles run in worker
processes.  Known failures are strict xfails (KNOWN below).
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

TOL = 1e-4
X86 = platform.machine().lower() in ("x86_64", "amd64")
TARGET = "x86_64-v3" if X86 else "generic"
CFLAGS = ["-O1", "-std=c99", "-w"] + (["-march=x86-64-v3"] if X86 else [])

# name -> (config class, model class, config kwargs, input kind)
#   kind: "lm" (input_ids -> logits), "enc" (input_ids + attention_mask -> hidden), "vit" (pixels)
DEC = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, vocab_size=100,
           max_position_embeddings=64)
ENC = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, vocab_size=100,
           max_position_embeddings=64)
ARCHS: dict[str, tuple[str, str, dict[str, Any], str]] = {
    "mistral": ("MistralConfig", "MistralForCausalLM", dict(DEC, num_key_value_heads=2, sliding_window=None), "lm"),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", dict(DEC, num_key_value_heads=2), "lm"),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", dict(DEC, num_key_value_heads=2, head_dim=8), "lm"),
    "phi3": ("Phi3Config", "Phi3ForCausalLM", dict(DEC, num_key_value_heads=2, pad_token_id=0), "lm"),
    "gemma": ("GemmaConfig", "GemmaForCausalLM", dict(DEC, num_key_value_heads=2, head_dim=8), "lm"),
    "stablelm": ("StableLmConfig", "StableLmForCausalLM", dict(DEC, num_key_value_heads=2), "lm"),
    "gpt_neox": ("GPTNeoXConfig", "GPTNeoXForCausalLM", dict(DEC), "lm"),
    "opt": ("OPTConfig", "OPTForCausalLM", dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, ffn_dim=64,
                                                vocab_size=100, max_position_embeddings=64, word_embed_proj_dim=32,
                                                pad_token_id=1), "lm"),
    "distilbert": ("DistilBertConfig", "DistilBertModel", dict(dim=32, n_layers=2, n_heads=2, hidden_dim=64,
                                                               vocab_size=100, max_position_embeddings=64), "enc"),
    "roberta": ("RobertaConfig", "RobertaModel", dict(ENC, pad_token_id=1, max_position_embeddings=70), "enc"),
    "electra": ("ElectraConfig", "ElectraModel", dict(ENC, embedding_size=16), "enc"),
    "albert": ("AlbertConfig", "AlbertModel", dict(ENC, embedding_size=16), "enc"),
    "vit": ("ViTConfig", "ViTModel", dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                          intermediate_size=64, image_size=16, patch_size=4, num_channels=3), "vit"),
}

KNOWN: dict[str, str] = {}  # name -> reason (strict xfail)


class _Wrap:
    pass


def make(name: str) -> tuple[Any, tuple]:
    import torch
    import transformers

    from pt2c.zoo import _hf_init

    cfg_cls, model_cls, kw, kind = ARCHS[name]
    torch.manual_seed(0)
    cfg = getattr(transformers, cfg_cls)(**kw)
    for k in ("hidden_dropout_prob", "attention_probs_dropout_prob", "attention_dropout", "dropout", "hidden_dropout",
              "resid_pdrop", "embd_pdrop", "attn_pdrop", "seq_classif_dropout", "classifier_dropout_prob"):
        if hasattr(cfg, k):
            setattr(cfg, k, 0.0)
    if hasattr(cfg, "use_cache"):
        cfg.use_cache = False
    cfg._attn_implementation = "sdpa"
    model = getattr(transformers, model_cls)(cfg)
    _hf_init(model)

    class M(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, *xs: Any) -> Any:
            if kind == "lm":
                return self.model(input_ids=xs[0], return_dict=False)[0]
            if kind == "enc":
                return self.model(input_ids=xs[0], attention_mask=xs[1], return_dict=False)[0]
            return self.model(pixel_values=xs[0], return_dict=False)[0]

    g = torch.Generator().manual_seed(1)
    if kind == "vit":
        return M().eval(), (torch.randn(2, 3, 16, 16, generator=g),)
    ids = torch.randint(2, 100, (2, 8), generator=g)
    if kind == "lm":
        return M().eval(), (ids,)
    mask = torch.ones(2, 8, dtype=torch.int64)
    mask[1, 6:] = 0
    return M().eval(), (ids, mask)


@dataclass
class Built:
    name: str
    dir: str
    inputs: list[np.ndarray]
    ref: np.ndarray | None = None
    error: str | None = None
    lib: str | None = None


def _prepare(name: str, root: str) -> Built:
    import warnings

    warnings.filterwarnings("ignore")
    import torch

    torch.set_num_threads(1)
    import pt2c

    cname = "hf_" + name
    try:
        model, inputs = make(name)
        with torch.no_grad():
            ref = model(*inputs).detach().numpy().copy()
        ep = torch.export.export(model, inputs, strict=False)
        b = Built(name, str(Path(root) / cname), [t.numpy() for t in inputs], ref)
        pt2c.compile(ep, b.dir, target=TARGET, name=cname)
        return b
    except Exception as e:  # noqa: BLE001
        return Built(name, "", [], error=f"{type(e).__name__}: {str(e)[:2000]}")


@pytest.fixture(scope="session")
def hf_built(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> dict[str, Built]:
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    pytest.importorskip("transformers")
    if shutil.which(os.environ.get("CC", "gcc")) is None:
        pytest.skip("no C compiler")
    wanted = [item.callspec.params["name"] for item in request.session.items
              if getattr(item, "originalname", "") == "test_hf_model" and hasattr(item, "callspec")]
    root = tmp_path_factory.mktemp("hf")
    t0 = time.time()
    ncpu = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    with ProcessPoolExecutor(max_workers=max(1, min(ncpu, len(wanted))),
                             mp_context=multiprocessing.get_context("spawn")) as pool:
        res = {b.name: b for b in pool.map(_prepare, wanted, [str(root)] * len(wanted))}
    ok = [b for b in res.values() if b.error is None]
    if ok:
        lib = root / "hf_all.so"
        cmd = [os.environ.get("CC", "gcc"), "-shared", "-fPIC", *CFLAGS, "-o", str(lib),
               *[str(Path(b.dir) / f"hf_{b.name}.c") for b in ok], "-lm"]
        p = subprocess.run(cmd, capture_output=True, text=True)
        for b in ok:
            if p.returncode == 0:
                b.lib = str(lib)
            else:
                one = root / f"hf_{b.name}.so"
                q = subprocess.run(cmd[:-len(ok) - 1] + [str(one), str(Path(b.dir) / f"hf_{b.name}.c"), "-lm"],
                                   capture_output=True, text=True)
                b.lib, b.error = (str(one), None) if q.returncode == 0 else (None, "C build: " + q.stderr[-1500:])
    print(f"\ntest_hf_models: {len(wanted)} models compiled in {time.time() - t0:.1f}s", file=sys.stderr)
    return res


def _param(name: str) -> Any:
    marks = [pytest.mark.xfail(strict=True, reason=KNOWN[name])] if name in KNOWN else []
    return pytest.param(name, id=name, marks=marks)


@pytest.mark.parametrize("name", [_param(n) for n in ARCHS])
def test_hf_model(name: str, hf_built: dict[str, Built]) -> None:
    import pt2c

    b = hf_built[name]
    if b.error:
        raise AssertionError(b.error)
    out = pt2c.load(b.dir, lib=b.lib).run(b.inputs)[0]
    assert out.shape == b.ref.shape
    scale = max(1.0, float(np.abs(b.ref).max()))
    err = float(np.abs(out.astype(np.float64) - b.ref).max())
    assert err <= TOL * scale, f"{name}: max abs err {err:.3g} > {TOL:g} * {scale:.3g}"
