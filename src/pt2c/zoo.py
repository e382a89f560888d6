"""Small model factories for tests, demos and benchmarks.

Every factory has the signature ``f(size: str = "tiny") -> (model, example_inputs)``
(``mlp`` additionally takes ``batch``).  Models are returned in ``eval()`` mode with
deterministic random weights (``torch.manual_seed`` is called inside each factory),
and the example inputs are generated from the same seed.

Sizes:
  * ``"tiny"``  -- a few channels / short sequences; exports in well under 5 s.
  * ``"bench"`` -- realistic sizes for benchmarking.

All factories export with::

    torch.export.export(model, inputs, strict=False)

No extra flags are needed.  Notes per family:
  * transformers models are built from configs (no hub downloads) and wrapped so
    that ``forward`` returns a single tensor.  ``use_cache=False`` /
    ``return_dict=False`` avoid cache objects in the outputs.
  * BERT/GPT-2/Llama use ``attn_implementation="sdpa"``, which exports cleanly
    (to ``aten.scaled_dot_product_attention``) with transformers 5.x.
  * ``transformers`` is imported lazily so importing this module only needs torch.
  * LSTM/GRU export to ``aten.lstm.input`` / ``aten.gru.input`` (decomposed by
    ``run_decompositions`` into per-timestep linear/sigmoid/tanh); export emits a
    harmless UserWarning about ``rnn._flat_weights`` being assigned during export.
  * Pre-decomposition graphs contain in-place activations (``relu_``,
    ``hardtanh_``, ``hardswish_``) from ``inplace=True`` modules; they are
    functionalized by ``ep.run_decompositions()``.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

_SIZES = ("tiny", "bench")


def _check_size(size: str) -> None:
    if size not in _SIZES:
        raise ValueError(f"size must be one of {_SIZES}, got {size!r}")


def _randomize_bn(model: nn.Module) -> None:
    """Give every BatchNorm non-trivial affine params and running stats."""
    for m in model.modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm):
            with torch.no_grad():
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.2, 0.2)
                m.running_mean.uniform_(-0.3, 0.3)
                m.running_var.uniform_(0.5, 2.0)


# --------------------------------------------------------------------------- MLP


class MLP(nn.Module):
    def __init__(self, dims):
        super().__init__()
        layers = []
        for i in range(len(dims) - 1):
            layers.append(nn.Linear(dims[i], dims[i + 1]))
            if i < len(dims) - 2:
                layers.append(nn.ReLU())
        self.net = nn.Sequential(*layers)

    def forward(self, x):
        return self.net(x)


def mlp(size: str = "tiny", batch: int | None = None):
    _check_size(size)
    torch.manual_seed(0)
    if size == "tiny":
        dims, b = (32, 64, 64, 10), 4
    else:
        dims, b = (784, 1024, 1024, 10), 1
    if batch is not None:
        b = batch
    model = MLP(dims).eval()
    x = torch.randn(b, dims[0])
    return model, (x,)


# ------------------------------------------------------------------------ ResNet


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inp, out, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(inp, out, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(out)
        self.conv2 = nn.Conv2d(out, out, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(out)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = None
        if stride != 1 or inp != out:
            self.downsample = nn.Sequential(
                nn.Conv2d(inp, out, 1, stride, bias=False), nn.BatchNorm2d(out)
            )

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        y = self.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return self.relu(y + identity)


class ResNet18(nn.Module):
    def __init__(self, width=64, num_classes=1000):
        super().__init__()
        w = width
        self.conv1 = nn.Conv2d(3, w, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(w)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        chans = [w, 2 * w, 4 * w, 8 * w]
        layers = []
        inp = w
        for i, c in enumerate(chans):
            stride = 1 if i == 0 else 2
            layers.append(nn.Sequential(BasicBlock(inp, c, stride), BasicBlock(c, c, 1)))
            inp = c
        self.layer1, self.layer2, self.layer3, self.layer4 = layers
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(inp, num_classes)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        x = torch.flatten(self.avgpool(x), 1)
        return self.fc(x)


def resnet18(size: str = "tiny"):
    _check_size(size)
    torch.manual_seed(0)
    if size == "tiny":
        model = ResNet18(width=8, num_classes=10)
        x = torch.randn(2, 3, 32, 32)
    else:
        model = ResNet18(width=64, num_classes=1000)
        x = torch.randn(1, 3, 224, 224)
    _randomize_bn(model)
    return model.eval(), (x,)


# ------------------------------------------------------------------- MobileNetV2


def _make_divisible(v, divisor=8, min_value=None):
    min_value = min_value or divisor
    new_v = max(min_value, int(v + divisor / 2) // divisor * divisor)
    if new_v < 0.9 * v:
        new_v += divisor
    return new_v


class ConvBNAct(nn.Sequential):
    def __init__(self, inp, out, k=3, stride=1, groups=1, act=nn.ReLU6):
        layers = [
            nn.Conv2d(inp, out, k, stride, (k - 1) // 2, groups=groups, bias=False),
            nn.BatchNorm2d(out),
        ]
        if act is not None:
            layers.append(act(inplace=True))
        super().__init__(*layers)


class InvertedResidual(nn.Module):
    def __init__(self, inp, out, stride, expand):
        super().__init__()
        hidden = int(round(inp * expand))
        self.use_res = stride == 1 and inp == out
        layers = []
        if expand != 1:
            layers.append(ConvBNAct(inp, hidden, 1))
        layers += [
            ConvBNAct(hidden, hidden, 3, stride, groups=hidden),  # depthwise
            ConvBNAct(hidden, out, 1, act=None),  # linear bottleneck
        ]
        self.conv = nn.Sequential(*layers)

    def forward(self, x):
        y = self.conv(x)
        return x + y if self.use_res else y


class MobileNetV2(nn.Module):
    # t, c, n, s
    SETTING = [
        (1, 16, 1, 1),
        (6, 24, 2, 2),
        (6, 32, 3, 2),
        (6, 64, 4, 2),
        (6, 96, 3, 1),
        (6, 160, 3, 2),
        (6, 320, 1, 1),
    ]

    def __init__(self, width_mult=1.0, num_classes=1000, setting=None, last_channel=1280):
        super().__init__()
        setting = setting or self.SETTING
        inp = _make_divisible(32 * width_mult)
        last = _make_divisible(last_channel * max(1.0, width_mult))
        feats = [ConvBNAct(3, inp, 3, 2)]
        for t, c, n, s in setting:
            out = _make_divisible(c * width_mult)
            for i in range(n):
                feats.append(InvertedResidual(inp, out, s if i == 0 else 1, t))
                inp = out
        # Head uses hardswish (MobileNetV3-style) to cover that activation.
        feats.append(ConvBNAct(inp, last, 1, act=nn.Hardswish))
        self.features = nn.Sequential(*feats)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(last, num_classes))

    def forward(self, x):
        x = self.features(x)
        x = F.adaptive_avg_pool2d(x, (1, 1))
        x = torch.flatten(x, 1)
        return self.classifier(x)


def mobilenetv2(size: str = "tiny"):
    _check_size(size)
    torch.manual_seed(0)
    if size == "tiny":
        setting = [(1, 8, 1, 1), (4, 8, 2, 2), (4, 16, 2, 2), (4, 24, 1, 1)]
        model = MobileNetV2(width_mult=0.25, num_classes=10, setting=setting, last_channel=64)
        x = torch.randn(2, 3, 32, 32)
    else:
        model = MobileNetV2(width_mult=1.0, num_classes=1000)
        x = torch.randn(1, 3, 224, 224)
    _randomize_bn(model)
    return model.eval(), (x,)


# -------------------------------------------------------------- transformers


class BertWrapper(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask):
        return self.model(
            input_ids=input_ids, attention_mask=attention_mask, return_dict=False
        )[0]


class CausalLMWrapper(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids):
        return self.model(input_ids=input_ids, use_cache=False, return_dict=False)[0]


def _hf_init(model: nn.Module) -> nn.Module:
    # HF init uses std=0.02, which makes tiny models nearly constant.  Re-seed
    # with larger random weights so numerical checks are meaningful.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                p.normal_(0.0, 0.2 if "embed" in name or "wte" in name or "wpe" in name else 0.1)
            elif "norm" in name.lower() or name.endswith("ln_1.weight") or name.endswith("ln_2.weight") or name.endswith("ln_f.weight"):
                if name.endswith("weight"):
                    p.uniform_(0.8, 1.2)
                else:
                    p.uniform_(-0.1, 0.1)
            else:
                p.uniform_(-0.1, 0.1)
    return model


def bert(size: str = "tiny"):
    _check_size(size)
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    if size == "tiny":
        cfg = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                   intermediate_size=64, vocab_size=100, max_position_embeddings=64)
        b, s = 2, 8
    else:
        cfg = dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
                   intermediate_size=1024, vocab_size=30522, max_position_embeddings=512)
        b, s = 1, 128
    config = BertConfig(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                        attn_implementation="sdpa", **cfg)
    model = BertModel(config, add_pooling_layer=False)
    _hf_init(model)
    model = BertWrapper(model).eval()
    input_ids = torch.randint(0, cfg["vocab_size"], (b, s), dtype=torch.int64)
    attention_mask = torch.ones(b, s, dtype=torch.int64)
    attention_mask[-1, s - max(1, s // 4):] = 0  # padding at the end of the last sequence
    return model, (input_ids, attention_mask)


def gpt2(size: str = "tiny"):
    _check_size(size)
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    if size == "tiny":
        cfg = dict(n_embd=32, n_layer=2, n_head=2, vocab_size=100, n_positions=64,
                   bos_token_id=0, eos_token_id=0)
        b, s = 2, 8
    else:
        cfg = dict(n_embd=256, n_layer=4, n_head=4, vocab_size=50257, n_positions=1024)
        b, s = 1, 64
    config = GPT2Config(resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                        use_cache=False, attn_implementation="sdpa", **cfg)
    model = GPT2LMHeadModel(config)
    _hf_init(model)
    model.tie_weights()
    model = CausalLMWrapper(model).eval()
    input_ids = torch.randint(0, cfg["vocab_size"], (b, s), dtype=torch.int64)
    return model, (input_ids,)


def llama(size: str = "tiny"):
    _check_size(size)
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    if size == "tiny":
        cfg = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                   num_key_value_heads=2, intermediate_size=64, vocab_size=100,
                   max_position_embeddings=64)
        b, s = 2, 8
    else:
        cfg = dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=8,
                   num_key_value_heads=4, intermediate_size=688, vocab_size=32000,
                   max_position_embeddings=512)
        b, s = 1, 64
    config = LlamaConfig(use_cache=False, attn_implementation="sdpa",
                         tie_word_embeddings=False, **cfg)
    model = LlamaForCausalLM(config)
    _hf_init(model)
    model = CausalLMWrapper(model).eval()
    input_ids = torch.randint(0, cfg["vocab_size"], (b, s), dtype=torch.int64)
    return model, (input_ids,)


# --------------------------------------------------------------------- RNNs


class RNNHead(nn.Module):
    def __init__(self, cell: str, inp, hidden, layers, out):
        super().__init__()
        rnn_cls = nn.LSTM if cell == "lstm" else nn.GRU
        self.rnn = rnn_cls(inp, hidden, num_layers=layers, batch_first=True)
        self.head = nn.Linear(hidden, out)

    def forward(self, x):
        y, _ = self.rnn(x)
        return self.head(y)


def _rnn(cell: str, size: str):
    _check_size(size)
    torch.manual_seed(0)
    if size == "tiny":
        inp, hidden, seq, b, out = 8, 16, 5, 2, 4
    else:
        inp, hidden, seq, b, out = 128, 256, 64, 1, 32
    model = RNNHead(cell, inp, hidden, 2, out).eval()
    x = torch.randn(b, seq, inp)
    return model, (x,)


def lstm(size: str = "tiny"):
    return _rnn("lstm", size)


def gru(size: str = "tiny"):
    return _rnn("gru", size)


FAMILIES = {
    "mlp": mlp,
    "resnet18": resnet18,
    "mobilenetv2": mobilenetv2,
    "bert": bert,
    "gpt2": gpt2,
    "llama": llama,
    "lstm": lstm,
    "gru": gru,
}


def bench_model(spec: str):
    """A family at its "bench" size by name, or "mlp_b64": the MLP at batch 64 (bench/ scripts)."""
    return mlp("bench", batch=64) if spec == "mlp_b64" else FAMILIES[spec]("bench")
