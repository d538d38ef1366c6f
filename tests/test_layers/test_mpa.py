"""MPA: fused softmax(QK^T tau + log Phi_p) equals the official exp * Phi_p / L1 form;
content-free variant; extra tokens; DeiT + PPE through PEViT's attention-bias hook."""
import importlib.util
import os.path as osp

import pytest
import torch
import torch.nn.functional as F

from mmposenc.models.backbones import PEViT
from mmposenc.models.layers import MPA, PeripheralPE
from mmposenc.models.layers.attention.mpa import gate_to_bias

_spec = importlib.util.spec_from_file_location(
    'pervit_reference', osp.join(osp.dirname(osp.dirname(__file__)), 'pervit_reference.py'))
ref = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ref)


def _official_sd(mpa):
    ppe = mpa.ppe
    return {
        'rpe_proj.weight': ppe.dist_embed.weight, 'rpe_proj.bias': ppe.dist_embed.bias,
        'a.to_qkv.weight': mpa.qkv.weight,
        'a.proj.weight': mpa.proj.weight, 'a.proj.bias': mpa.proj.bias,
        'a.activation.conv1.weight': ppe.proj1.weight, 'a.activation.conv1.bias': ppe.proj1.bias,
        'a.activation.gn1.weight': ppe.norm1.weight, 'a.activation.gn1.bias': ppe.norm1.bias,
        'a.activation.conv2.weight': ppe.proj2.weight, 'a.activation.conv2.bias': ppe.proj2.bias,
        'a.activation.gn2.weight': ppe.norm2.weight, 'a.activation.gn2.bias': ppe.norm2.bias,
    }


@pytest.mark.parametrize('hw_shape', [(14, 14), (6, 11)])
@pytest.mark.parametrize('train', [False, True])
def test_mpa_equals_official_formulation(hw_shape, train):
    """Identical weights: fused MPA == official exp(dots - max) * Phi_p, L1-normalised."""
    torch.manual_seed(0)
    mpa = MPA(48, 4).double().train(train)
    with torch.no_grad():
        for p in mpa.ppe.parameters():
            p.add_(0.05 * torch.randn_like(p))
        mpa.ppe.norm2.weight.copy_(torch.tensor([3.0, 1.0, 0.3, 0.01]))  # local ... global
    x = torch.randn(3, hw_shape[0] * hw_shape[1], 48, dtype=torch.float64)
    sd = _official_sd(mpa)
    rpe = ref.official_rpe_proj(sd, hw_shape)
    expected = ref.official_mpa(sd, 'a.', x, rpe, hw_shape, 4)
    got = mpa(x, hw_shape)
    torch.testing.assert_close(got, expected, rtol=1e-9, atol=1e-10)


def test_float32_parity_at_14x14_with_cache():
    torch.manual_seed(1)
    mpa = MPA(192, 4).eval()
    x = torch.randn(2, 196, 192)
    sd = {k: v.double() for k, v in _official_sd(mpa).items()}
    expected = ref.official_mpa(sd, 'a.', x.double(), ref.official_rpe_proj(sd, (14, 14)),
                                (14, 14), 4)
    for _ in range(2):  # the second call reads the cached bias
        torch.testing.assert_close(mpa(x, (14, 14)).double(), expected, rtol=1e-4, atol=1e-5)


def test_log_bias_identity_with_zero_gate():
    """softmax(s + log g) == Normalize[exp(s) * g], also where g underflows to 0."""
    torch.manual_seed(0)
    s = torch.randn(2, 3, 10, 10) * 3
    g = torch.rand(3, 10, 10)
    g[:, :, :4] = 0.
    g[0, 5] = 0.  # a whole row gated off
    expected = F.normalize(torch.exp(s - s.amax(-1, keepdim=True)) * g, p=1, dim=-1)
    got = torch.softmax(s + gate_to_bias(g), dim=-1)
    ok = torch.ones(10, dtype=torch.bool)
    ok[5] = False
    torch.testing.assert_close(got[:, 1:], expected[:, 1:], rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(got[:, 0, ok], expected[:, 0, ok], rtol=1e-6, atol=1e-7)
    assert torch.isfinite(got).all()  # the official form gives 0 rows there, never nan here


def test_content_free_is_normalised_phi_p_times_v():
    """Table 1 (c), Phi_c off."""
    torch.manual_seed(0)
    mpa = MPA(32, 2, with_phi_c=False).double()
    assert mpa.content_free and 'with_phi_c=False' in repr(mpa)
    assert not hasattr(mpa, 'qkv')
    x = torch.randn(2, 12, 32, dtype=torch.float64)
    phi = mpa.ppe((3, 4))
    v = mpa.v(x).reshape(2, 12, 2, 16).transpose(1, 2)
    out = (phi / phi.sum(-1, keepdim=True)) @ v
    expected = mpa.proj(out.transpose(1, 2).reshape(2, 12, 32))
    torch.testing.assert_close(mpa(x, (3, 4)), expected)


def test_without_phi_p_attention_ignores_positions():
    """Table 1 (b), Phi_p off: MHSA; permuting the tokens permutes the output."""
    torch.manual_seed(0)
    mpa = MPA(32, 4, with_phi_p=False).double()
    assert mpa.ppe is None and mpa.position_bias((3, 4)) is None
    x = torch.randn(2, 12, 32, dtype=torch.float64)
    perm = torch.randperm(12)
    torch.testing.assert_close(mpa(x[:, perm], (3, 4)), mpa(x, (3, 4))[:, perm])
    q, k, v = mpa.qkv(x).reshape(2, 12, 3, 4, 8).permute(2, 0, 3, 1, 4)
    expected = torch.softmax(q @ k.transpose(-1, -2) / 8**0.5, -1) @ v
    torch.testing.assert_close(mpa(x, (3, 4)),
                               mpa.proj(expected.transpose(1, 2).reshape(2, 12, 32)))
    with_p = MPA(32, 4).double()  # with Phi_p the same permutation changes the output
    with torch.no_grad():
        with_p.qkv.weight.copy_(mpa.qkv.weight)
        with_p.proj.load_state_dict(mpa.proj.state_dict())
    assert not torch.allclose(with_p(x[:, perm], (3, 4)), with_p(x, (3, 4))[:, perm])
    with pytest.raises(ValueError, match='Phi_p or Phi_c'):
        MPA(32, 4, with_phi_p=False, with_phi_c=False)


@pytest.mark.parametrize('kwargs', [dict(), dict(with_phi_p=False), dict(with_phi_c=False)])
def test_attention_maps_are_the_factors_of_the_attention(kwargs):
    """phi_c = exp(QK^T tau - max), phi_a = phi_c * phi_p; Normalize[phi_a] V is the MPA."""
    torch.manual_seed(0)
    mpa = MPA(32, 4, **kwargs).double().eval()
    x = torch.randn(2, 20, 32, dtype=torch.float64)
    maps = mpa.attention_maps(x, (4, 5))
    assert maps['phi_c'].shape == maps['phi_a'].shape == (2, 4, 20, 20)
    assert maps['phi_p'].shape == (4, 20, 20)
    torch.testing.assert_close(maps['phi_a'], maps['phi_c'] * maps['phi_p'])
    if mpa.with_phi_c:
        assert torch.all(maps['phi_c'].amax(-1) == 1)
    else:
        assert torch.all(maps['phi_c'] == 1)
    assert mpa.with_phi_p or torch.all(maps['phi_p'] == 1)
    attn = maps['phi_a'] / maps['phi_a'].sum(-1, keepdim=True)
    if mpa.content_free:
        v = mpa.v(x).reshape(2, 20, 4, 8).transpose(1, 2)
    else:
        v = mpa.qkv(x).reshape(2, 20, 3, 4, 8).permute(2, 0, 3, 1, 4)[2]
    out = mpa.proj((attn @ v).transpose(1, 2).reshape(2, 20, 32))
    torch.testing.assert_close(out, mpa(x, (4, 5)))


def test_extra_tokens_are_not_gated():
    torch.manual_seed(0)
    mpa = MPA(32, 2, num_extra_tokens=1)
    bias = mpa.position_bias((3, 4))
    assert bias.shape == (2, 13, 13)
    assert torch.all(bias[:, 0] == 0) and torch.all(bias[:, :, 0] == 0)
    assert mpa(torch.randn(2, 13, 32), (3, 4)).shape == (2, 13, 32)
    with pytest.raises(ValueError, match='tokens'):
        mpa(torch.randn(2, 12, 32), (3, 4))


def test_gradients_reach_every_parameter():
    torch.manual_seed(0)
    mpa = MPA(32, 4, ppe_cfg=dict(train_chunk_elems=1))
    mpa(torch.randn(2, 20, 32), (4, 5)).square().sum().backward()
    ref.check_gradients(mpa)


def test_deit_plus_ppe_in_pevit():
    torch.manual_seed(0)
    arch = dict(embed_dims=48, num_layers=3, num_heads=3, feedforward_channels=96)
    # avg_featmap: with the cls token alone, the last layer's patch rows reach no output
    vit = PEViT(arch=arch, img_size=32, patch_size=8, out_type='avg_featmap',
                pos_encoding=dict(type='mmposenc.PeripheralPE'))
    vit.init_weights()
    pe = vit.pos_encodings[0]
    assert isinstance(pe, PeripheralPE) and len(pe.ppes) == 3
    # peripheral schedule over the 3 layers, one shared w_r
    torch.testing.assert_close(pe.ppes[0].norm2.bias, torch.full((3, ), -5.0))
    torch.testing.assert_close(pe.ppes[2].norm2.bias, torch.full((3, ), 4.0))
    assert all(m.dist_embed is pe.distance_embed for m in pe.ppes)
    names = [n for n, _ in vit.named_parameters() if 'distance_embed' in n]
    assert names == ['pos_encodings.0.distance_embed.weight', 'pos_encodings.0.distance_embed.bias']
    out = vit(torch.randn(2, 3, 32, 40))[0]
    assert out.shape == (2, 48)
    out.sum().backward()
    ref.check_gradients(pe)
    # the bias equals log Phi_p of the layer, padded for the class token
    q = torch.randn(1, 3, 1 + 16, 16)
    bias = pe.attn_bias(q, q, (4, 4), 1)
    torch.testing.assert_close(bias[0, :, 1:, 1:].exp(), pe.ppes[1]((4, 4)))


@pytest.mark.parametrize('init', ['conv', 'rand'])
def test_deit_plus_ppe_inits(init):
    """Table 5 inits in DeiT + PPE: conv = (s_l, v_l) = (-5, 3) in every layer; rand draws
    the norms too."""
    torch.manual_seed(0)
    pe = PeripheralPE(embed_dims=48, num_heads=3, num_layers=4, init=init)
    pe.init_weights()
    if init == 'conv':
        for m in pe.ppes:
            assert torch.all(m.norm2.bias == -5.0) and torch.all(m.norm2.weight == 3.0)
            assert torch.all(m.proj2.weight == 0.02)
    else:
        assert not torch.equal(pe.ppes[0].norm2.weight, pe.ppes[1].norm2.weight)
        assert pe.ppes[0].norm1.bias.abs().sum() > 0
