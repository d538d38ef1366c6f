"""PerViT backbone: official parity (through the converter), any input size, multi-scale
outputs, shared w_r, gradients, arch checks."""
import importlib.util
import os.path as osp

import pytest
import torch
import torch.nn.functional as F

from mmposenc.models.backbones import PerViT
from mmposenc.models.layers import peripheral_init_schedule

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))


def _load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ref = _load('pervit_reference', osp.join(ROOT, 'tests', 'pervit_reference.py'))
conv = _load('pervit_converter',
             osp.join(ROOT, 'tools', 'model_converters', 'pervit_official_to_mmposenc.py'))

SMALL = dict(embed_dims=[16, 24, 32, 40], depths=[2, 2, 6, 2], num_heads=2,
             stem_channels=[8, 8, 12, 16])


def test_block_stack_matches_official_forward_at_14x14():
    """Official-layout weights -> converter -> PerViT + linear head == official forward."""
    sd = ref.random_official_state_dict([16, 24, 32, 40], [3, 8, 8, 12, 16], num_heads=2,
                                        num_classes=5)
    converted = conv.convert(sd)
    model = PerViT(arch=SMALL, out_indices=3).double().eval()
    conv.load_strict(model, converted)
    img = torch.randn(2, 3, 224, 224, dtype=torch.float64)
    with torch.no_grad():
        feat = model(img)[0]
        assert feat.shape == (2, 40, 14, 14)
        logits = F.linear(feat.mean(dim=(2, 3)), converted['head.fc.weight'],
                          converted['head.fc.bias'])
        expected = ref.official_forward(sd, img, num_heads=2, depth=12)
    torch.testing.assert_close(logits, expected, rtol=1e-8, atol=1e-9)


@pytest.mark.parametrize('arch,params_m', [('tiny', 7.6), ('small', 21.4), ('medium', 43.8)])
def test_arch_zoo_parameter_counts_match_the_paper(arch, params_m):
    model = PerViT(arch=arch)
    n = sum(p.numel() for p in model.parameters())
    heads = model.embed_dims[-1] * 1000 + 1000  # the classifier head lives in ImageClassifier
    assert abs((n + heads) / 1e6 - params_m) / params_m < 0.02, (n + heads) / 1e6


def test_multiscale_outputs_any_resolution():
    model = PerViT(arch=SMALL, out_indices=(0, 1, 2, 3), featmap_scales=(4, 2, 1, 0.5)).eval()
    outs = model(torch.randn(1, 3, 96, 160))
    assert [tuple(o.shape) for o in outs] == [(1, 24, 24, 40), (1, 32, 12, 20),
                                               (1, 40, 6, 10), (1, 40, 3, 5)]
    assert model.out_channels == [24, 32, 40, 40]
    plain = PerViT(arch=SMALL, out_indices=(2, 0)).eval()
    outs = plain(torch.randn(1, 3, 80, 48))
    assert [tuple(o.shape) for o in outs] == [(1, 40, 5, 3), (1, 24, 5, 3)]


def test_gradients_reach_every_parameter_and_shared_w_r():
    torch.manual_seed(0)
    arch = dict(SMALL, depths=[1, 1, 1, 1])
    model = PerViT(arch=arch, out_indices=(0, 3), featmap_scales=(2, 1),
                   drop_path_rate=0.1, ppe_cfg=dict(train_chunk_elems=3 * 8 * 6 * 8))  # 3 queries
    model.init_weights()
    model.train()
    outs = model(torch.randn(2, 3, 64, 96))  # 4 x 6 tokens
    sum(o.square().mean() for o in outs).backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
        assert p.grad.abs().sum() > 0, name
    names = [n for n, _ in model.named_parameters() if 'distance_embed' in n]
    assert names == ['distance_embed.weight', 'distance_embed.bias']
    assert all(b.attn.ppe.dist_embed is model.distance_embed for b in model.blocks)


def test_initialisation_follows_eq9_schedule():
    model = PerViT(arch=SMALL)
    model.init_weights()
    schedule = peripheral_init_schedule(12)
    for blk, (s, v) in zip(model.blocks, schedule):
        torch.testing.assert_close(blk.attn.ppe.norm2.bias, torch.full((2, ), s))
        torch.testing.assert_close(blk.attn.ppe.norm2.weight, torch.full((2, ), v))
        assert torch.all(blk.attn.ppe.proj1.weight == 0.02)
    assert torch.all(model.distance_embed.weight == -0.02)
    conv_init = PerViT(arch=SMALL, ppe_init='conv')
    assert all(torch.all(b.attn.ppe.norm2.bias == -5.0) for b in conv_init.blocks)


def test_eval_caches_phi_p_per_shape():
    model = PerViT(arch=SMALL).eval()
    x = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        a = model(x)[0]
        ppe = model.blocks[5].attn.ppe
        cached = dict(ppe._cache)
        b = model(x)[0]
    assert len(cached) == 1 and next(iter(cached))[0] == (4, 4)
    assert next(iter(ppe._cache.values())) is next(iter(cached.values()))
    torch.testing.assert_close(a, b)


def test_drop_path_defaults_per_arch():
    assert PerViT('tiny').blocks[-1].drop_path.drop_prob == 0
    assert PerViT('small').blocks[-1].drop_path.drop_prob == pytest.approx(0.1)
    assert PerViT('medium').blocks[-1].drop_path.drop_prob == pytest.approx(0.2)


def test_bad_arguments():
    with pytest.raises(ValueError, match='not in default archs'):
        PerViT(arch='huge')
    with pytest.raises(ValueError, match='same length'):
        PerViT(arch=dict(SMALL, depths=[2, 2, 6]))
    with pytest.raises(ValueError, match='out of range'):
        PerViT(arch=SMALL, out_indices=4)
    with pytest.raises(ValueError, match='one scale per out index'):
        PerViT(arch=SMALL, out_indices=(0, 1), featmap_scales=(2, ))
    with pytest.raises(ValueError, match='featmap scale'):
        PerViT(arch=SMALL, out_indices=(0, ), featmap_scales=(3, ))
    with pytest.raises(ValueError, match='ppe_init'):
        PerViT(arch=SMALL, ppe_init='zeros')
