"""More `transformers` architectures, from tiny configs (random weights, no downloads).

Each model is exported (``torch.export``, strict=False), compiled by pt2c, built (all models
into one ``.so``, like test_ops.py) and compared with eager: max abs error <= 1e-4 *
max(1, max|ref|) on the first output (last hidden state or logits).  Export, pt2c compile and
the C compile of each model run in worker processes; the fixture links the objects.  Known
failures are strict xfails (KNOWN below).

Covered: decoder LMs (incl. mixture-of-experts and Mamba), text encoders, encoder-decoders
(one forward with decoder_input_ids), CNNs, vision transformers and audio models.
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
#   kind: "lm" (input_ids -> logits), "enc" (input_ids + attention_mask -> hidden), "vit" (16x16 pixels),
#         "img" (32x32 pixels), "s2s" (input_ids + attention_mask + decoder_input_ids), "audio" (raw waveform),
#         "whisper" (log-mel features + decoder_input_ids); see INPUTS and make()
DEC = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, vocab_size=100,
           max_position_embeddings=64)
ENC = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, vocab_size=100,
           max_position_embeddings=64)
VIT = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, image_size=16,
           patch_size=4, num_channels=3)
S2S = dict(vocab_size=100, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
           decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64)
AUDIO = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, conv_dim=(16, 16),
             conv_stride=(5, 2), conv_kernel=(10, 3), num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4)
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
    "vit": ("ViTConfig", "ViTModel", dict(VIT), "vit"),
    # decoder LMs: mixture-of-experts, state space, alibi, parallel attention/MLP, partial rotary
    "mixtral": ("MixtralConfig", "MixtralForCausalLM", dict(DEC, num_key_value_heads=2, num_local_experts=4,
                                                          num_experts_per_tok=2, sliding_window=None), "lm"),
    "qwen2_moe": ("Qwen2MoeConfig", "Qwen2MoeForCausalLM", dict(DEC, num_key_value_heads=2, num_experts=4,
                                                              num_experts_per_tok=2, moe_intermediate_size=32,
                                                              shared_expert_intermediate_size=64), "lm"),
    "mamba": ("MambaConfig", "MambaForCausalLM", dict(hidden_size=32, num_hidden_layers=2, vocab_size=100,
                                                    state_size=8, expand=2, conv_kernel=4, time_step_rank=4), "lm"),
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM", dict(DEC, num_key_value_heads=2, head_dim=8,
                                                       sliding_window=4), "lm"),
    "phi": ("PhiConfig", "PhiForCausalLM", dict(DEC), "lm"),
    "falcon": ("FalconConfig", "FalconForCausalLM", dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                                       vocab_size=100), "lm"),
    "gptj": ("GPTJConfig", "GPTJForCausalLM", dict(n_embd=32, n_layer=2, n_head=4, vocab_size=100, n_positions=64,
                                                 rotary_dim=4), "lm"),
    "bloom": ("BloomConfig", "BloomForCausalLM", dict(hidden_size=32, n_layer=2, n_head=4, vocab_size=100), "lm"),
    # text encoders
    "deberta_v2": ("DebertaV2Config", "DebertaV2Model", dict(ENC, relative_attention=True, position_buckets=8,
                                                           max_relative_positions=16, pos_att_type=["c2p", "p2c"]),
                   "enc"),
    "mpnet": ("MPNetConfig", "MPNetModel", dict(ENC), "enc"),
    "squeezebert": ("SqueezeBertConfig", "SqueezeBertModel", dict(ENC, embedding_size=32), "enc"),
    # encoder-decoders (one forward with decoder_input_ids)
    "t5": ("T5Config", "T5Model", dict(vocab_size=100, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4,
                                      relative_attention_num_buckets=8, relative_attention_max_distance=16,
                                      decoder_start_token_id=0), "s2s"),
    "bart": ("BartConfig", "BartModel", dict(S2S, max_position_embeddings=64), "s2s"),
    # CNNs
    "resnet": ("ResNetConfig", "ResNetModel", dict(embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1],
                                                 layer_type="basic"), "img"),
    "convnext": ("ConvNextConfig", "ConvNextModel", dict(hidden_sizes=[8, 16], depths=[1, 1], num_stages=2), "img"),
    "regnet": ("RegNetConfig", "RegNetModel", dict(embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1],
                                                 groups_width=8), "img"),
    "efficientnet": ("EfficientNetConfig", "EfficientNetModel", dict(image_size=32, width_coefficient=0.25,
                                                                   depth_coefficient=1.0, kernel_sizes=(3, 5),
                                                                   in_channels=(32, 16), out_channels=(16, 24),
                                                                   strides=(1, 2), num_block_repeats=(1, 2),
                                                                   expand_ratios=(1, 6), depthwise_padding=(2,),
                                                                   hidden_dim=320), "img"),
    "poolformer": ("PoolFormerConfig", "PoolFormerModel", dict(hidden_sizes=[8, 16], depths=[1, 1],
                                                             num_encoder_blocks=2, patch_sizes=[7, 3],
                                                             strides=[4, 2], padding=[2, 1], mlp_ratio=2.0), "img"),
    "segformer": ("SegformerConfig", "SegformerModel", dict(num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1],
                                                          hidden_sizes=[16, 32], patch_sizes=[7, 3], strides=[4, 2],
                                                          num_attention_heads=[1, 2], mlp_ratios=[2, 2]), "img"),
    "levit": ("LevitConfig", "LevitModel", dict(image_size=32, hidden_sizes=[16, 32], num_attention_heads=[1, 2],
                                              depths=[1, 1], key_dim=[8, 8], mlp_ratio=[2, 2],
                                              attention_ratio=[2, 2],
                                              down_ops=[["Subsample", 8, 16 // 8, 4, 2, 2]]), "img"),
    # vision transformers
    "dinov2": ("Dinov2Config", "Dinov2Model", dict(VIT, mlp_ratio=2), "vit"),
    "beit": ("BeitConfig", "BeitModel", dict(VIT, use_relative_position_bias=True), "vit"),
    "swin": ("SwinConfig", "SwinModel", dict(image_size=16, patch_size=2, embed_dim=16, depths=[1, 1],
                                           num_heads=[1, 2], window_size=4, mlp_ratio=2.0), "vit"),
    # audio
    "wav2vec2": ("Wav2Vec2Config", "Wav2Vec2Model", dict(AUDIO), "audio"),
    "whisper": ("WhisperConfig", "WhisperModel", dict(S2S, num_mel_bins=16, max_source_positions=16,
                                                    max_target_positions=32, pad_token_id=1, bos_token_id=1,
                                                    eos_token_id=1, decoder_start_token_id=1), "whisper"),
}

INPUTS = {"lm": ["input_ids"], "enc": ["input_ids", "attention_mask"], "vit": ["pixel_values"],
          "img": ["pixel_values"], "audio": ["input_values"], "whisper": ["input_features", "decoder_input_ids"],
          "s2s": ["input_ids", "attention_mask", "decoder_input_ids"]}

KNOWN: dict[str, str] = {}  # name -> reason (strict xfail)


class _Wrap:
    pass


def for_inference(cfg: Any, cls: Any) -> None:
    """An architecture's config made for export: no dropout, no KV cache, sdpa where the model has it,
    batched experts (static shapes: the default grouped_mm is data-dependent).  Also bench/corpus.py's."""
    for k in ("hidden_dropout_prob", "attention_probs_dropout_prob", "attention_dropout", "dropout", "hidden_dropout",
              "resid_pdrop", "embd_pdrop", "attn_pdrop", "seq_classif_dropout", "classifier_dropout_prob"):
        if hasattr(cfg, k):
            setattr(cfg, k, 0.0)
    if hasattr(cfg, "use_cache"):
        cfg.use_cache = False
    cfg._attn_implementation = "sdpa" if getattr(cls, "_supports_sdpa", False) else "eager"
    if hasattr(cfg, "_experts_implementation"):
        cfg._experts_implementation = "batched_mm"


def positional(model: Any, kind: str) -> Any:
    """The model called with its kind's inputs as positional tensors, returning the first output."""
    import torch

    class M(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, *xs: Any) -> Any:
            return self.model(**dict(zip(INPUTS[kind], xs)), return_dict=False)[0]

    return M().eval()


def make(name: str) -> tuple[Any, tuple]:
    import torch
    import transformers

    from torch.nn.utils import parametrize

    from pt2c.zoo import _hf_init, _randomize_bn

    cfg_cls, model_cls, kw, kind = ARCHS[name]
    torch.manual_seed(0)
    cfg = getattr(transformers, cfg_cls)(**kw)
    cls = getattr(transformers, model_cls)
    for_inference(cfg, cls)
    model = cls(cfg)
    _hf_init(model)
    # He-scale convolutions, LayerNorm/GroupNorm gains ~1 and BatchNorm with non-trivial running stats keep the
    # activations of deep tiny CNNs O(1) and input-dependent (HF's init / _hf_init alone make them vanish)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, (torch.nn.Conv1d, torch.nn.Conv2d)) and not parametrize.is_parametrized(m):
                m.weight.normal_(0.0, (2.0 / m.weight[0].numel()) ** 0.5)
            elif isinstance(m, (torch.nn.LayerNorm, torch.nn.GroupNorm)) and m.weight is not None:
                m.weight.uniform_(0.8, 1.2)
                if m.bias is not None:
                    m.bias.uniform_(-0.1, 0.1)
    _randomize_bn(model)
    m = positional(model, kind)

    g = torch.Generator().manual_seed(1)
    if kind in ("vit", "img"):
        n = 16 if kind == "vit" else 32
        return m, (torch.randn(2, 3, n, n, generator=g),)
    if kind == "audio":
        return m, (torch.randn(2, 400, generator=g),)
    ids = torch.randint(2, 100, (2, 8), generator=g)
    if kind == "lm":
        return m, (ids,)
    if kind == "whisper":
        return m, (torch.randn(2, 16, 32, generator=g), ids)
    mask = torch.ones(2, 8, dtype=torch.int64)
    mask[1, 6:] = 0
    if kind == "s2s":
        return m, (ids, mask, torch.randint(2, 100, (2, 6), generator=g))
    return m, (ids, mask)


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
        # compile the object here, in the worker (in parallel); the fixture only links
        p = subprocess.run([os.environ.get("CC", "gcc"), "-c", "-fPIC", *CFLAGS, "-o", str(Path(b.dir) / f"{cname}.o"),
                            str(Path(b.dir) / f"{cname}.c")], capture_output=True, text=True)
        if p.returncode != 0:
            b.error = "C build: " + p.stderr[-1500:]
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
        cmd = [os.environ.get("CC", "gcc"), "-shared", "-o", str(lib),
               *[str(Path(b.dir) / f"hf_{b.name}.o") for b in ok], "-lm"]
        p = subprocess.run(cmd, capture_output=True, text=True)
        for b in ok:
            if p.returncode == 0:
                b.lib = str(lib)
            else:
                one = root / f"hf_{b.name}.so"
                q = subprocess.run(cmd[:-len(ok) - 2] + [str(one), str(Path(b.dir) / f"hf_{b.name}.o"), "-lm"],
                                   capture_output=True, text=True)
                b.lib, b.error = (str(one), None) if q.returncode == 0 else (None, "C link: " + q.stderr[-1500:])
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
