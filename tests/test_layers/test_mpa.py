"""MPA: fused softmax(QK^T tau + log Phi_p) equals the official exp * Phi_p / L1 form;
content-free variant; extra tokens; DeiT + PPE through PEViT's attention-bias hook."""
import importlib.util
import os.path as osp

import pytest
import torch
import torch.nn.functional as F

from mmposenc.models.backbones import PEViT
from mmposenc.models.layers import MPA, PeripheralPE
from mmposenc.models.layers.mpa import gate_to_bias

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
    torch.manual_seed(0)
    mpa = MPA(32, 2, content_free=True).double()
    assert not hasattr(mpa, 'qkv')
    x = torch.randn(2, 12, 32, dtype=torch.float64)
    phi = mpa.ppe((3, 4))
    v = mpa.v(x).reshape(2, 12, 2, 16).transpose(1, 2)
    out = (phi / phi.sum(-1, keepdim=True)) @ v
    expected = mpa.proj(out.transpose(1, 2).reshape(2, 12, 32))
    torch.testing.assert_close(mpa(x, (3, 4)), expected)


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
    for name, p in mpa.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


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
    for n, p in pe.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, n
    # the bias equals log Phi_p of the layer, padded for the class token
    q = torch.randn(1, 3, 1 + 16, 16)
    bias = pe.attn_bias(q, q, (4, 4), 1)
    torch.testing.assert_close(bias[0, :, 1:, 1:].exp(), pe.ppes[1]((4, 4)))
