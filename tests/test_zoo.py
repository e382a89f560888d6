"""Tests for the model zoo: every tiny family exports and matches eager."""

import os
import sys

import pytest
import torch

try:
    from pt2c import zoo
except ImportError:  # running from a checkout without installing the package
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))
    from pt2c import zoo

FAMILIES = sorted(zoo.FAMILIES)


def _as_tensor(out):
    assert isinstance(out, torch.Tensor), f"expected a single tensor, got {type(out)}"
    return out


@pytest.mark.parametrize("family", FAMILIES)
def test_export_matches_eager(family):
    model, inputs = zoo.FAMILIES[family]("tiny")
    assert not model.training
    with torch.no_grad():
        ref = _as_tensor(model(*inputs))
    ep = torch.export.export(model, inputs, strict=False)
    with torch.no_grad():
        out = _as_tensor(ep.module()(*inputs))
    assert out.shape == ref.shape and out.dtype == ref.dtype
    assert torch.isfinite(ref).all()
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("family", FAMILIES)
def test_deterministic(family):
    m1, in1 = zoo.FAMILIES[family]("tiny")
    m2, in2 = zoo.FAMILIES[family]("tiny")
    sd1, sd2 = m1.state_dict(), m2.state_dict()
    assert sd1.keys() == sd2.keys()
    for k in sd1:
        assert torch.equal(sd1[k], sd2[k]), k
    assert len(in1) == len(in2)
    for a, b in zip(in1, in2):
        assert torch.equal(a, b)


def test_bn_stats_randomised():
    model, _ = zoo.resnet18("tiny")
    bns = [m for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    assert bns
    for bn in bns:
        assert bn.running_mean.abs().max() > 0
        assert not torch.allclose(bn.running_var, torch.ones_like(bn.running_var))


def test_bert_mask_has_padding():
    model, (ids, mask) = zoo.bert("tiny")
    assert ids.dtype == torch.int64 and mask.dtype == torch.int64
    assert (mask == 0).any() and (mask == 1).any()
    with torch.no_grad():
        a = model(ids, mask)
        b = model(ids, torch.ones_like(mask))
    assert not torch.allclose(a, b)


def test_mlp_batch():
    _, (x,) = zoo.mlp("bench", batch=64)
    assert x.shape == (64, 784)
    _, (x,) = zoo.mlp("bench")
    assert x.shape == (1, 784)


def test_bad_size():
    with pytest.raises(ValueError):
        zoo.mlp("huge")
