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
