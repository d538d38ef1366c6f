"""PeripheralPositionEncoding (PerViT Phi_p): parity with the official computation, any grid,
initialisations, eval cache, chunked/checkpointed training path, devices."""
import importlib.util
import os.path as osp

import pytest
import torch

from mmposenc.models.layers import (PeripheralDistanceEmbedding, PeripheralLearnableEmbedding,
                                    PeripheralPositionEncoding, pairwise_distances,
                                    peripheral_init_schedule, ppe_init_schedule)
from mmposenc.models.layers.generators.peripheral import _ChunkedPeripheral, _window_affine

_spec = importlib.util.spec_from_file_location(
    'pervit_reference', osp.join(osp.dirname(osp.dirname(__file__)), 'pervit_reference.py'))
ref = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ref)


def _perturbed(num_heads=4, init='peripheral', seed=0, **kwargs):
    torch.manual_seed(seed)
    ppe = PeripheralPositionEncoding(num_heads, init=init, **kwargs).double()
    with torch.no_grad():
        for p in ppe.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return ppe


def _official_layout(ppe):
    e = ppe.dist_embed
    return {
        'rpe_proj.weight': e.weight, 'rpe_proj.bias': e.bias,
        'a.conv1.weight': ppe.proj1.weight, 'a.conv1.bias': ppe.proj1.bias,
        'a.gn1.weight': ppe.norm1.weight, 'a.gn1.bias': ppe.norm1.bias,
        'a.conv2.weight': ppe.proj2.weight, 'a.conv2.bias': ppe.proj2.bias,
        'a.gn2.weight': ppe.norm2.weight, 'a.gn2.bias': ppe.norm2.bias,
    }


@pytest.mark.parametrize('init', ['peripheral', 'conv', 'rand'])
@pytest.mark.parametrize('hw_shape', [(14, 14), (5, 9), (8, 3)])
def test_matches_official_formulation(init, hw_shape):
    ppe = _perturbed(init=init)
    sd = _official_layout(ppe)
    with torch.no_grad():
        expected = ref.official_phi_p(sd, 'a.', ref.official_rpe_proj(sd, hw_shape), hw_shape)[0]
        got = ppe(hw_shape)
    n = hw_shape[0] * hw_shape[1]
    assert got.shape == expected.shape == (4, n, n)
    torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-12)


def test_log_gate_is_exact_log_without_underflow():
    ppe = _perturbed()
    with torch.no_grad():
        ppe.norm2.weight.fill_(200.)  # drives sigmoid to exactly 0 in float32 for far keys
        log_gate = ppe.float().compute((9, 9), log=True)
        gate = ppe.compute((9, 9), log=False)
    assert torch.isfinite(log_gate).all()
    assert (gate == 0).any(), 'test must exercise sigmoid underflow'
    assert log_gate.min() < -100
    ok = gate > 1e-30
    torch.testing.assert_close(log_gate[ok], gate[ok].log(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize('hw_shape', [(1, 1), (1, 6), (4, 1), (2, 3)])
def test_degenerate_and_small_grids(hw_shape):
    ppe = _perturbed()
    n = hw_shape[0] * hw_shape[1]
    out = ppe(hw_shape)
    assert out.shape == (4, n, n)
    assert ((out > 0) & (out < 1)).all()


def test_distances_are_normalised_per_axis():
    d = pairwise_distances((3, 5))
    assert d.shape == (15, 15)
    assert d[0, 14].item() == pytest.approx(8**0.5)  # corner to corner in [-1, 1]^2
    assert d[0, 1].item() == pytest.approx(0.5)  # one step along W (spacing 2 / 4)
    assert d[0, 5].item() == pytest.approx(1.0)  # one step along H (spacing 2 / 2)


def test_peripheral_init_values_eq9():
    schedule = peripheral_init_schedule(12)
    assert schedule[0] == pytest.approx((-5.0, 3.0))
    assert schedule[-1] == pytest.approx((4.0, 0.01))
    assert schedule[5][0] == pytest.approx(-5.0 + 5 * 9 / 11)
    embed = PeripheralDistanceEmbedding(16)
    assert torch.all(embed.weight == -0.02) and torch.all(embed.bias == 0)
    s, v = schedule[7]
    ppe = PeripheralPositionEncoding(4, distance_embed=embed, init_norm_bias=s,
                                     init_norm_weight=v)
    for proj in (ppe.proj1, ppe.proj2):
        assert torch.all(proj.weight == 0.02) and torch.all(proj.bias == 0)
    assert torch.all(ppe.norm1.weight == 1) and torch.all(ppe.norm1.bias == 0)
    torch.testing.assert_close(ppe.norm2.bias, torch.full((4, ), s))
    torch.testing.assert_close(ppe.norm2.weight, torch.full((4, ), v))
    # a generic Conv2d init of a parent must not survive init_weights()
    torch.nn.init.normal_(ppe.proj1.weight)
    ppe.init_weights()
    assert torch.all(ppe.proj1.weight == 0.02)


def test_peripheral_init_is_local_early_and_global_late():
    (s0, v0), (s1, v1) = peripheral_init_schedule(12)[0], peripheral_init_schedule(12)[-1]
    hw = (14, 14)
    centre = 7 * 14 + 7
    first = PeripheralPositionEncoding(4, init_norm_bias=s0, init_norm_weight=v0)(hw)
    last = PeripheralPositionEncoding(4, init_norm_bias=s1, init_norm_weight=v1)(hw)
    d = pairwise_distances(hw)[centre]
    assert first[0, centre].argmax() == centre
    near, far = d <= 0.2, d >= 1.0
    assert first[0, centre, near].min() > 0.5 > first[0, centre, far].max()
    assert last[0, centre].min() > 0.9  # almost uniform: global


def test_conv_init_is_the_peripheral_init_at_s_minus5_v3_and_nothing_else():
    """Table 5 "conv": s_l = -5, v_l = 3; every other parameter as Eq. 9, no per-head offsets."""
    conv = PeripheralPositionEncoding(4, init='conv', init_norm_bias=-5.0, init_norm_weight=3.0)
    peri = PeripheralPositionEncoding(4, init='peripheral', init_norm_bias=-5.0,
                                      init_norm_weight=3.0)
    for (name, a), (_, b) in zip(conv.state_dict().items(), peri.state_dict().items()):
        assert torch.equal(a, b), name
    assert torch.all(conv.proj2.weight == 0.02) and torch.all(conv.norm2.bias == -5.0)
    out = conv((9, 9))
    for h in range(1, 4):  # every head the same map, peaked at the query
        assert torch.equal(out[h], out[0])
    assert out[0, 40].argmax() == 40
    assert ppe_init_schedule('conv', 12) == [(-5.0, 3.0)] * 12
    assert ppe_init_schedule('peripheral', 12) == peripheral_init_schedule(12)


@pytest.mark.parametrize('multi_layer', [True, False])
def test_rand_init_draws_every_phi_p_parameter(multi_layer):
    """Table 5 "rand": w_r, b_r, the projections and both norms' weights and biases."""
    torch.manual_seed(0)
    a = PeripheralPositionEncoding(4, init='rand', multi_layer=multi_layer)
    b = PeripheralPositionEncoding(4, init='rand', multi_layer=multi_layer)
    peri = PeripheralPositionEncoding(4, multi_layer=multi_layer)
    names = [n for n, _ in a.named_parameters()]
    assert {'norm2.weight', 'norm2.bias', 'distance_embed.weight',
            'distance_embed.bias'} <= set(names)
    if multi_layer:
        assert {'norm1.weight', 'norm1.bias', 'proj1.weight'} <= set(names)
    for (n, pa), pb, pp in zip(a.named_parameters(), b.parameters(), peri.parameters()):
        assert pa.unique().numel() > 0.9 * pa.numel(), n  # drawn, not constant
        assert not torch.equal(pa, pb) and not torch.equal(pa, pp), n
    for norm in a.norms:  # U(-1, 1), not the GroupNorm default 1 / 0
        assert norm.weight.abs().max() <= 1 and norm.weight.min() < 0.9
        assert norm.bias.abs().max() > 0
    a.init_weights()  # redraws, never falls back to Eq. 9
    assert a.norm2.weight.unique().numel() == 4


def _closed_form(ppe, hw_shape, multi_layer):
    """Phi_p of a K = 1 design from its definition on the (N, N) distance matrix."""
    r = ppe.dist_embed(pairwise_distances(hw_shape, dtype=torch.float64))  # (N, N, D_r)
    x = r.permute(2, 0, 1)  # (D_r, q, k): a per-query image over the keys
    if multi_layer:
        x = torch.einsum('or,rqk->oqk', ppe.proj1.weight[:, :, 0, 0], x) + \
            ppe.proj1.bias[:, None, None]
        if ppe.with_norms:
            x = torch.nn.functional.group_norm(x.transpose(0, 1), x.shape[0],
                                               ppe.norm1.weight, ppe.norm1.bias).transpose(0, 1)
        x = x.relu()
    x = torch.einsum('hr,rqk->hqk', ppe.proj2.weight[:, :, 0, 0], x) + \
        ppe.proj2.bias[:, None, None]
    if ppe.with_norms:
        x = torch.nn.functional.group_norm(x.transpose(0, 1), x.shape[0], ppe.norm2.weight,
                                           ppe.norm2.bias).transpose(0, 1)
    return x.sigmoid()


@pytest.mark.parametrize('multi_layer,with_norms', [(False, True), (False, False),
                                                   (True, False), (True, True)])
def test_designs_without_neighbourhood_match_their_definition(multi_layer, with_norms):
    """Table 5 designs with K = 1: "Euc" (one projection), "Euc + ML" (Eq. 6 / Eq. 8)."""
    init = 'rand' if multi_layer and not with_norms else 'peripheral'
    ppe = _perturbed(init=init, kernel_size=1, multi_layer=multi_layer, with_norms=with_norms)
    for hw in [(5, 7), (1, 3)]:
        with torch.no_grad():
            torch.testing.assert_close(ppe(hw), _closed_form(ppe, hw, multi_layer),
                                       rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize('design', [dict(), dict(kernel_size=1), dict(multi_layer=False),
                                    dict(embedding='lrn'), dict(with_norms=False)])
def test_generic_path_equals_fused_path_and_gets_gradients(design):
    init = 'rand' if design.get('with_norms') is False else 'peripheral'
    ppe = _perturbed(init=init, **design)
    fused = ppe.compute((4, 6), chunk_queries=5)
    ppe._force_generic = True
    generic = ppe.compute((4, 6), chunk_queries=5)
    torch.testing.assert_close(generic, fused, rtol=1e-10, atol=1e-10)
    generic.exp().sum().backward()
    ref.check_gradients(ppe)


def test_two_projections_without_norms_reject_the_peripheral_init():
    """Without the norms Eq. 9's P1(-c1 ||q - k||) < 0 everywhere: the ReLU zeroes it."""
    with pytest.raises(ValueError, match="init='rand'"):
        PeripheralPositionEncoding(4, with_norms=False)
    dead = PeripheralPositionEncoding(4, init='rand', with_norms=False)
    with torch.no_grad():
        dead.dist_embed.weight.fill_(-0.02)
        dead.dist_embed.bias.zero_()
        dead.proj1.weight.fill_(0.02)
        dead.proj1.bias.zero_()
    out = dead.compute((5, 5), log=False)
    assert torch.allclose(out, out[:, :1, :1].expand_as(out))  # constant sigmoid(b2)
    out.sum().backward()
    assert dead.proj1.weight.grad.abs().sum() == 0 and dead.dist_embed.weight.grad.abs().sum() == 0


def test_lrn_starts_equal_to_euc_and_resamples_for_other_grids():
    """Table 5 "Lrn": a learnable R per offset, shared; it starts as -c1 ||q - k||."""
    torch.manual_seed(0)
    lrn = PeripheralLearnableEmbedding(16)
    assert lrn.table.shape == (16, 31, 31)  # offsets of 14 x 14 tokens + 2 for the projections
    euc = PeripheralPositionEncoding(4)
    ppe = PeripheralPositionEncoding(4, distance_embed=lrn)
    assert ppe.embedding == 'lrn' and 'lrn' in repr(ppe)
    with torch.no_grad():  # 14 x 14 reads the table itself: the same Phi_p as Euc
        torch.testing.assert_close(ppe((14, 14)), euc((14, 14)), rtol=1e-5, atol=1e-6)
    assert lrn.offset_image((14, 14), (15, 15)) is lrn.table
    assert ppe((5, 9)).shape == (4, 45, 45)  # other grids: a bicubic resampling
    ppe.compute((6, 6)).sum().backward()
    assert lrn.table.grad is not None and lrn.table.grad.abs().sum() > 0
    assert PeripheralLearnableEmbedding(16, init='rand').table.abs().max() <= 1
    own = PeripheralPositionEncoding(2, embedding='lrn', kernel_size=1)
    assert own.dist_embed.radius_pad == 0 and own((3, 4)).shape == (2, 12, 12)
    with pytest.raises(ValueError, match='padded'):
        PeripheralPositionEncoding(2, distance_embed=PeripheralLearnableEmbedding(8, radius_pad=1))


def test_frozen_phi_p_is_cached_in_training():
    ppe = _perturbed().float().train()
    a = ppe.log_gate((5, 6))
    assert a.requires_grad and not ppe.frozen
    ppe.requires_grad_(False)
    ppe.dist_embed.requires_grad_(False)
    assert ppe.frozen
    b = ppe.log_gate((5, 6))
    assert ppe.log_gate((5, 6)) is b and not b.requires_grad  # served from the cache
    torch.testing.assert_close(a.detach(), b)


def test_eval_cache_hit_and_invalidation():
    ppe = _perturbed().float().eval()
    calls = []
    original = ppe.compute

    def counting(*args, **kwargs):
        calls.append(args)
        return original(*args, **kwargs)

    ppe.compute = counting
    a = ppe.log_gate((6, 7))
    b = ppe.log_gate((6, 7))
    assert a is b and len(calls) == 1  # cache hit
    ppe.log_gate((7, 6))
    assert len(calls) == 2  # other shape
    ppe.log_gate((6, 7))
    assert len(calls) == 2  # both shapes kept (max_cache=2)
    with torch.no_grad():
        ppe.norm2.bias.add_(0.5)  # an optimizer step / load_state_dict
    c = ppe.log_gate((6, 7))
    assert len(calls) == 3 and not torch.equal(a, c)
    with torch.no_grad():
        ppe.dist_embed.weight.data.mul_(2)  # even .data edits are seen
    ppe.log_gate((6, 7))
    assert len(calls) == 4
    ppe.train()
    ppe.log_gate((6, 7))
    ppe.log_gate((6, 7))
    assert len(calls) == 6  # training recomputes every time
    ppe.eval()
    ppe.log_gate((6, 7))
    assert len(calls) == 7  # train()/eval() cleared the cache


def test_cached_gate_follows_shared_embedding():
    embed = PeripheralDistanceEmbedding(16)
    ppe = PeripheralPositionEncoding(4, distance_embed=embed).eval()
    a = ppe.log_gate((5, 5)).clone()
    with torch.no_grad():
        embed.weight.mul_(3)
    assert not torch.allclose(a, ppe.log_gate((5, 5)))
    assert 'distance_embed' not in dict(ppe.named_children())
    assert not any(n.startswith('distance_embed') for n, _ in ppe.named_parameters())


@pytest.mark.parametrize('with_cp', [True, False])
def test_chunked_equals_unchunked_with_gradients(with_cp):
    ppe = _perturbed(with_cp=with_cp)
    hw = (4, 6)
    g = torch.randn(4, 24, 24, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    grads, outs = [], []
    for queries in (None, 1, 4, 12):
        ppe.zero_grad()
        out = ppe.compute(hw, chunk_queries=queries)
        (out * g).sum().backward()
        outs.append(out.detach())
        grads.append([p.grad.clone() for p in ppe.parameters()])
    for o, gr in zip(outs[1:], grads[1:]):
        torch.testing.assert_close(o, outs[0], rtol=1e-12, atol=1e-12)
        for a, b in zip(gr, grads[0]):
            torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-10)


def test_gradients_reach_every_parameter_and_gradcheck():
    ppe = _perturbed(num_heads=2, train_chunk_elems=1)  # one query per chunk, checkpointed
    out = ppe.compute((4, 3), log=True)
    out.square().sum().backward()
    ref.check_gradients(ppe)

    small = _perturbed(num_heads=1, dist_dims=2, hidden_dims=2)
    hw = (2, 3)
    conv1_map = small.conv1_map(hw)
    scale, shift = _window_affine(conv1_map, small.norm1.weight, small.norm1.bias, (4, 5), 1e-5)
    inputs = [t.detach().requires_grad_() for t in (
        conv1_map.permute(1, 2, 0).contiguous(), scale, shift, small.proj2.weight,
        small.proj2.bias, small.norm2.weight, small.norm2.bias)]
    for queries in (2, 3):  # a row segment, a whole row
        meta = (hw, 1, queries, 1e-5, True)
        assert torch.autograd.gradcheck(lambda *t: _ChunkedPeripheral.apply(*t, meta), inputs,
                                        fast_mode=True)


def test_device_and_dtype_follow_module():
    ppe = PeripheralPositionEncoding(2).double()
    assert ppe((3, 4)).dtype == torch.float64
    meta = PeripheralPositionEncoding(2).to('meta')
    out = meta.compute((3, 4))
    assert out.device.type == 'meta' and out.shape == (2, 12, 12)


def test_bad_arguments():
    with pytest.raises(ValueError, match='init must be one of'):
        PeripheralPositionEncoding(4, init='xavier')
    with pytest.raises(ValueError, match='odd'):
        PeripheralPositionEncoding(4, kernel_size=4)
    with pytest.raises(ValueError, match='does not match the shared'):
        PeripheralPositionEncoding(4, distance_embed=PeripheralDistanceEmbedding(8),
                                   dist_dims=16)
    with pytest.raises(ValueError, match='hw_shape'):
        PeripheralPositionEncoding(4)((0, 3))
    with pytest.raises(ValueError, match='embedding must be one of'):
        PeripheralPositionEncoding(4, embedding='sin')
    with pytest.raises(TypeError, match='distance_embed must be'):
        PeripheralPositionEncoding(4, distance_embed=torch.nn.Linear(1, 16))
    assert 'init=' in repr(PeripheralPositionEncoding(4))
