"""Models for bench/ab.py outside the zoo (`--models bench/models.py:<function>`): each function returns
(model in eval mode, example inputs), with random weights and a fixed seed.  They need `transformers`."""

from __future__ import annotations

import torch


def mobilenet_v2_tf():
    """transformers' MobileNetV2 at 224 x 224 with TF "same" padding (tf_padding=True, the default): an
    explicit pad before each conv."""
    from transformers import MobileNetV2Config, MobileNetV2Model

    torch.manual_seed(0)
    return MobileNetV2Model(MobileNetV2Config(tf_padding=True)).eval(), (torch.randn(1, 3, 224, 224),)


def bit_50():
    """transformers' BiT (ResNet-v2 50 with weight-standardised convs: each conv standardises its own weight
    in forward) at 224 x 224."""
    from transformers import BitConfig, BitModel

    torch.manual_seed(0)
    return BitModel(BitConfig()).eval(), (torch.randn(1, 3, 224, 224),)


class _RuntimeWeights(torch.nn.Module):
    """Convs whose weights are inputs (a hypernetwork, dynamic filters): packed at every run."""

    def forward(self, x, w1, w2):
        y = torch.relu(torch.nn.functional.conv2d(x, w1, padding=1))
        return torch.nn.functional.conv2d(y, w2, stride=2, padding=1)


def runtime_weight_convs():
    """two 3x3 convs at 56 x 56 (64 -> 64 -> 128 channels) with their weights as inputs"""
    torch.manual_seed(0)
    return _RuntimeWeights().eval(), (torch.randn(1, 64, 56, 56), torch.randn(64, 64, 3, 3) * 0.05,
                                      torch.randn(128, 64, 3, 3) * 0.05)


class _LogitsOnly(torch.nn.Module):
    def __init__(self, lm):
        super().__init__()
        self.lm = lm

    def forward(self, ids):
        return self.lm(input_ids=ids, use_cache=False).logits


class HiddenStates(torch.nn.Module):
    """An encoder called with (input_ids, attention_mask), returning its last hidden state."""

    def __init__(self, enc):
        super().__init__()
        self.enc = enc

    def forward(self, ids, mask):
        return self.enc(input_ids=ids, attention_mask=mask).last_hidden_state


def bert_base():
    """transformers' BERT-base (default configuration, 110M parameters), 128 tokens, last hidden state"""
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    cfg = BertConfig(attn_implementation="sdpa")
    return HiddenStates(BertModel(cfg, add_pooling_layer=False)).eval(), (torch.randint(0, 30522, (1, 128)),
                                                                     torch.ones(1, 128, dtype=torch.int64))


def gpt2_124m():
    """transformers' GPT-2 at its default (124M-parameter) configuration, 64 tokens, logits only"""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    return _LogitsOnly(GPT2LMHeadModel(GPT2Config())).eval(), (torch.randint(0, 50257, (1, 64)),)


def llama_1b():
    """a 1.1B-parameter Llama (TinyLlama's shape: 22 layers, 2048 wide, 32000 tokens; random weights), 64
    tokens, logits only"""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(hidden_size=2048, intermediate_size=5632, num_hidden_layers=22, num_attention_heads=32,
                      num_key_value_heads=4, vocab_size=32000)
    return _LogitsOnly(LlamaForCausalLM(cfg)).eval(), (torch.randint(0, 32000, (1, 64)),)


def mixtral_2l():
    """transformers' Mixtral at bench/corpus.py's scaled-down width (768 wide, 8 experts of 3072, top 2, 12 heads
    with 4 key/value heads, 32000 tokens) with 2 layers, 128 tokens, batched experts (static shapes), logits only"""
    from transformers import MixtralConfig, MixtralForCausalLM

    torch.manual_seed(0)
    cfg = MixtralConfig(hidden_size=768, intermediate_size=3072, num_hidden_layers=2, num_attention_heads=12,
                        num_key_value_heads=4, num_local_experts=8, num_experts_per_tok=2, vocab_size=32000,
                        sliding_window=None, use_cache=False)
    cfg._attn_implementation = "sdpa"
    cfg._experts_implementation = "batched_mm"
    return _LogitsOnly(MixtralForCausalLM(cfg)).eval(), (torch.randint(0, 32000, (1, 128)),)


def regnet_y_040():
    """transformers' RegNet at its default configuration (RegNetY-4.0GF: grouped 3x3 convs of group width 64,
    squeeze-and-excitation) at 224 x 224"""
    from transformers import RegNetConfig, RegNetModel

    torch.manual_seed(0)
    return RegNetModel(RegNetConfig()).eval(), (torch.randn(1, 3, 224, 224),)


def efficientnet_b7():
    """transformers' EfficientNet at its default configuration (B7: 600 x 600, depthwise 3x3 / 5x5 convs with
    TF "same" padding, squeeze-and-excitation)"""
    from transformers import EfficientNetConfig, EfficientNetModel

    torch.manual_seed(0)
    cfg = EfficientNetConfig()
    return EfficientNetModel(cfg).eval(), (torch.randn(1, 3, cfg.image_size, cfg.image_size),)
