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


@pytest.mark.parametrize('arch,params_m,phi_p_m,gflops,ours,matmul',
                         [(('tiny', 7.59, 0.035), 7.6, 0.04, 1.6, 1.55, 0.20),
                          (('small', 21.32, 0.140), 21.3, 0.14, 4.4, 4.42, 0.33),
                          (('medium', 43.72, 0.313), 43.7, 0.31, 9.0, 8.97, 0.47)])
def test_arch_zoo_sizes_and_flops_match_table_a5(arch, params_m, phi_p_m, gflops, ours, matmul):
    """Table A5: size (M), Phi_p size (M), FLOPs (G), to the paper's precision."""
    arch, our_params, our_phi_p = arch  # our counts, as configs/pervit/README.md states them
    model = PerViT(arch=arch)
    n = sum(p.numel() for p in model.parameters())
    heads = model.embed_dims[-1] * 1000 + 1000  # the classifier head lives in ImageClassifier
    assert round((n + heads) / 1e6, 1) == params_m, (n + heads) / 1e6
    phi_p = sum(p.numel() for p in model.phi_p_parameters())
    assert round(phi_p / 1e6, 2) == phi_p_m
    assert round((n + heads) / 1e6, 2) == our_params and round(phi_p / 1e6, 3) == our_phi_p
    # convolutions and linear layers (1.55 / 4.42 / 8.97 G): within the paper's rounding
    assert abs(model.flops() / 1e9 - gflops) <= 0.051, model.flops() / 1e9
    assert round(model.flops() / 1e9, 2) == ours  # the numbers of configs/pervit/README.md
    assert round((model.flops(attention_matmul=True) - model.flops()) / 1e9, 2) == matmul


TINY = dict(SMALL, depths=[1, 1, 1, 1])


def _copy_common(dst, src):
    """Load the parameters ``dst`` shares with ``src`` (same names and shapes)."""
    sd = {k: v for k, v in src.state_dict().items()
          if k in dst.state_dict() and dst.state_dict()[k].shape == v.shape}
    dst.load_state_dict(sd, strict=False)
    return sd


def test_without_phi_p_is_mhsa():
    """Table 1 (b): no Phi_p; equal to PerViT whose Phi_p is constant (v_l = 0)."""
    torch.manual_seed(0)
    full = PerViT(arch=TINY).eval()
    with torch.no_grad():
        for b in full.blocks:
            b.attn.ppe.norm2.weight.zero_()  # Phi_p = sigmoid(s_l) everywhere
    plain = PerViT(arch=TINY, with_phi_p=False).eval()
    _copy_common(plain, full)
    assert plain.distance_embed is None and plain.phi_p_parameters() == []
    assert all(b.attn.ppe is None for b in plain.blocks)
    x = torch.randn(2, 3, 64, 80)
    with torch.no_grad():
        torch.testing.assert_close(plain(x)[0], full(x)[0], rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match='freeze_phi_p'):
        PerViT(arch=TINY, with_phi_p=False, freeze_phi_p=True)


def test_without_phi_c_flop_matched_width():
    """Table 1 (c) and footnote 8: no Q K^T; the widths grow until the FLOPs match (a)."""
    full = PerViT(arch='tiny')
    plain = PerViT(arch='tiny', with_phi_c=False)
    matched = PerViT(arch='tiny', with_phi_c=False, flop_match=True)
    assert plain.embed_dims == full.embed_dims
    assert matched.embed_dims == [140, 208, 244, 304]
    assert matched.arch_settings['stem_channels'] == [48, 64, 96, 140]
    assert all(d % 4 == 0 for d in matched.embed_dims)
    assert plain.flops() < 0.9 * full.flops()
    assert round(plain.flops() / 1e9, 2) == 1.33 and round(matched.flops() / 1e9, 2) == 1.54
    assert abs(matched.flops() / full.flops() - 1) < 0.01
    assert not hasattr(matched.blocks[0].attn, 'qkv') and matched.blocks[0].attn.content_free
    small = PerViT(arch=TINY, with_phi_c=False, flop_match=True)
    assert small(torch.randn(1, 3, 64, 64))[0].shape[1] == small.out_channels[-1]
    assert PerViT(arch=TINY, flop_match=True).embed_dims == TINY['embed_dims']  # (a) itself


def test_patchify_stem():
    """Table 1 (d): one 16 x 16 stride-16 convolution instead of the C-stem."""
    model = PerViT(arch=TINY, conv_stem=False, out_indices=(0, 3))
    assert isinstance(model.stem, torch.nn.Conv2d) and model.stem.stride == (16, 16)
    assert not any(isinstance(m, torch.nn.BatchNorm2d) for m in model.modules())
    outs = model(torch.randn(2, 3, 100, 70))
    c_stem = PerViT(arch=TINY, out_indices=(0, 3))(torch.randn(2, 3, 100, 70))
    assert [o.shape for o in outs] == [o.shape for o in c_stem]  # ceil(H / 16) x ceil(W / 16)
    matched = PerViT(arch='tiny', conv_stem=False, flop_match=True)
    assert abs(matched.flops() / PerViT(arch='tiny').flops() - 1) < 0.01
    assert round(PerViT(arch='tiny', conv_stem=False).flops() / 1e9, 2) == 1.40
    assert round(matched.flops() / 1e9, 2) == 1.55


def test_without_cpe():
    """Table 1 (e): no CPE; equal to PerViT whose CPE is the identity kernel."""
    torch.manual_seed(0)
    full = PerViT(arch=TINY).eval()
    with torch.no_grad():
        for b in full.blocks:
            b.cpe.weight.zero_()
            b.cpe.weight[:, :, 1, 1] = 1
            b.cpe.bias.zero_()
    plain = PerViT(arch=TINY, with_cpe=False).eval()
    _copy_common(plain, full)
    assert all(b.cpe is None for b in plain.blocks)
    assert not any('cpe' in n for n, _ in plain.named_parameters())
    x = torch.randn(2, 3, 64, 48)
    with torch.no_grad():
        torch.testing.assert_close(plain(x)[0], full(x)[0], rtol=1e-5, atol=1e-5)


def test_conv_and_rand_inits_table5():
    conv = PerViT(arch=SMALL, ppe_init='conv')
    conv.init_weights()
    ref_ppe = conv.blocks[0].attn.ppe.state_dict()
    for b in conv.blocks:  # every layer: Eq. 9 with s_l = -5, v_l = 3, nothing else
        for k, v in b.attn.ppe.state_dict().items():
            assert torch.equal(v, ref_ppe[k]), k
    assert torch.all(conv.blocks[-1].attn.ppe.norm2.bias == -5.0)
    assert torch.all(conv.blocks[-1].attn.ppe.norm2.weight == 3.0)
    assert torch.all(conv.distance_embed.weight == -0.02)
    torch.manual_seed(0)
    rand = PerViT(arch=SMALL, ppe_init='rand')
    rand.init_weights()
    a, b = rand.blocks[0].attn.ppe, rand.blocks[5].attn.ppe
    for (n, pa), pb in zip(a.named_parameters(), b.parameters()):
        assert not torch.equal(pa, pb), n
    assert rand.distance_embed.weight.std() > 0.1
    assert a.norm1.weight.std() > 0.1 and a.norm2.bias.std() > 0.1


def test_frozen_phi_p_gets_no_gradient_and_stays():
    """Table A3 "fixed": Phi_p at its initialisation during training."""
    torch.manual_seed(0)
    model = PerViT(arch=TINY, freeze_phi_p=True)
    model.init_weights()
    frozen = {id(p) for p in model.phi_p_parameters()}
    assert len(frozen) == 2 + 4 * 8  # the shared w_r, b_r + 8 tensors in each of 4 blocks
    before = [p.clone() for p in model.phi_p_parameters()]
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=0.1)
    model.train()
    for _ in range(2):
        opt.zero_grad()
        model(torch.randn(2, 3, 64, 64))[0].square().mean().backward()
        opt.step()
    for name, p in model.named_parameters():
        if id(p) in frozen:
            assert p.grad is None and not p.requires_grad, name
        else:
            assert p.grad is not None and p.grad.abs().sum() > 0, name
    for a, b in zip(before, model.phi_p_parameters()):
        assert torch.equal(a, b)
    assert len(model.blocks[0].attn.ppe._cache) == 1  # cached in training


@pytest.mark.parametrize('ppe_cfg,init', [
    (dict(multi_layer=False, kernel_size=1), 'peripheral'),  # Table 5 "Euc"
    (dict(kernel_size=1), 'peripheral'),  # "Euc + ML"
    (dict(multi_layer=False), 'peripheral'),  # one projection with N (Fig. A6)
    (dict(embedding='lrn'), 'peripheral'),  # "Lrn + N + ML"
    (dict(embedding='lrn', kernel_size=1), 'peripheral'),  # "Lrn + ML"
    (dict(embedding='lrn', multi_layer=False, kernel_size=1), 'rand'),  # "Lrn"
    (dict(with_norms=False, kernel_size=1), 'rand'),  # Eq. 6 as written
])
def test_phi_p_designs_table5(ppe_cfg, init):
    torch.manual_seed(0)
    model = PerViT(arch=TINY, ppe_init=init, ppe_cfg=ppe_cfg)
    model.init_weights()
    ppe = model.blocks[0].attn.ppe
    assert ppe.multi_layer == ppe_cfg.get('multi_layer', True)
    assert ppe.kernel_size == ppe_cfg.get('kernel_size', 3)
    assert ppe.embedding == ppe_cfg.get('embedding', 'euc')
    assert all(b.attn.ppe.dist_embed is model.distance_embed for b in model.blocks)
    model(torch.randn(2, 3, 64, 80))[0].square().mean().backward()
    ref.check_gradients(model)


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
    ref.check_gradients(model)
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
    with pytest.raises(ValueError, match='cannot both be False'):
        PerViT(arch=SMALL, with_phi_p=False, with_phi_c=False)
