"""Baseline position encodings: the property each one promises."""
import pytest
import torch

from mmposenc.models.layers import (CoPE, LearnableAbsolutePE, NoPositionEncoding,
                                    PEMultiheadAttention, RelativePositionBias2d, RoPE2d,
                                    SaPE2, SinCos2dPE)
from mmposenc.models.layers.encodings.cope import cope_positions, interpolate_integer_positions
from mmposenc.models.utils.pos_embed import resize_pos_embed
from mmposenc.models.layers.encodings.rel_pos_bias import clipped_relative_index
from mmposenc.models.layers.encodings.rope2d import apply_rotary, build_rope2d_angles
from mmposenc.models.layers.encodings.sincos import build_2d_sincos_embedding


def test_no_pe_attention_is_permutation_equivariant():
    torch.manual_seed(0)
    attn = PEMultiheadAttention(16, 2).eval()
    x = torch.randn(2, 12, 16)
    perm = torch.randperm(12)
    pes = [NoPositionEncoding(16, 2)]
    torch.testing.assert_close(attn(x, (3, 4), pes)[:, perm], attn(x[:, perm], (3, 4), pes))
    # ... and a relative encoding breaks it
    pes = [RelativePositionBias2d(16, 2)]
    assert not torch.allclose(attn(x, (3, 4), pes)[:, perm], attn(x[:, perm], (3, 4), pes))


def test_learnable_abs_same_grid_is_identity_and_resizes_bicubically():
    pe = LearnableAbsolutePE(8, num_extra_tokens=1, grid_size=(4, 4))
    x = torch.zeros(2, 17, 8)
    torch.testing.assert_close(pe.add_to_tokens(x, (4, 4)), pe.pos_embed.expand(2, -1, -1))
    out = pe.add_to_tokens(torch.zeros(1, 1 + 6 * 5, 8), (6, 5))
    torch.testing.assert_close(out[:, 0], pe.pos_embed[:, 0])  # cls embedding kept
    grid = pe.pos_embed[:, 1:].reshape(1, 4, 4, 8).permute(0, 3, 1, 2)
    ref = torch.nn.functional.interpolate(grid, (6, 5), mode='bicubic', align_corners=False)
    torch.testing.assert_close(out[:, 1:], ref.flatten(2).transpose(1, 2))
    t = pe.pos_embed[:, 1:]
    assert resize_pos_embed(t, (4, 4), (4, 4)) is t  # same grid: no resampling


def test_sincos_matches_formula():
    emb = build_2d_sincos_embedding((3, 4), 8, temperature=10.)
    r, c = 2, 3
    w = torch.tensor([1., 10**-0.5])
    ref = torch.cat([torch.sin(c * w), torch.cos(c * w), torch.sin(r * w), torch.cos(r * w)])
    torch.testing.assert_close(emb[r * 4 + c], ref)
    # larger grids extend (do not resize) the smaller one
    big = build_2d_sincos_embedding((5, 6), 8, temperature=10.).view(5, 6, 8)
    torch.testing.assert_close(big[:3, :4].reshape(12, 8), emb)
    pe = SinCos2dPE(8, num_extra_tokens=1)
    assert (pe.add_to_tokens(torch.zeros(1, 13, 8), (3, 4))[:, 0] == 0).all()


def test_rope2d_logits_depend_only_on_relative_position():
    torch.manual_seed(0)
    d = 16
    angles = build_rope2d_angles((6, 6), d).view(6, 6, d // 2)
    q, k = torch.randn(d), torch.randn(d)

    def logit(pq, pk):
        return apply_rotary(q[None], angles[pq][None]) @ apply_rotary(k[None], angles[pk][None]).T

    torch.testing.assert_close(logit((1, 2), (3, 5)), logit((2, 0), (4, 3)))
    assert not torch.allclose(logit((1, 2), (3, 5)), logit((1, 2), (3, 4)))
    # norms are preserved; the cls token is not rotated
    rope = RoPE2d(32, num_heads=2, num_extra_tokens=1)
    qq = torch.randn(2, 2, 13, 16)
    q2, _ = rope.transform_qk(qq, qq, (3, 4), 0)
    torch.testing.assert_close(q2.norm(dim=-1), qq.norm(dim=-1))
    torch.testing.assert_close(q2[:, :, 0], qq[:, :, 0])


def test_rel_pos_bias_clips_distances():
    idx = clipped_relative_index((1, 10), max_distance=2)
    assert idx[0, 5] == idx[0, 9] == idx[0, 3]  # dx = 5, 9, 3 all clip to 2
    assert idx[0, 1] != idx[0, 2]
    rpb = RelativePositionBias2d(8, num_heads=2, num_layers=2, max_distance=2,
                                 num_extra_tokens=1)
    q = torch.zeros(1, 2, 1 + 20, 4)
    b0, b1 = rpb.attn_bias(q, q, (4, 5), 0), rpb.attn_bias(q, q, (4, 5), 1)
    assert not torch.allclose(b0, b1)  # one table per layer
    assert (b0[..., 0, :] == 0).all() and (b0[..., :, 0] == 0).all()
    # translation invariance: pairs with the same displacement share the bias
    torch.testing.assert_close(b0[0, :, 1 + 0, 1 + 6], b0[0, :, 1 + 7, 1 + 13])


def test_cope_positions_and_interpolation():
    g = torch.rand(5, 5)
    p_past, p_future = cope_positions(g)
    torch.testing.assert_close(p_past[4, 1], g[4, 1:5].sum())
    torch.testing.assert_close(p_future[1, 4], g[1, 1:5].sum())
    z = torch.tensor([0., 10., 20., 30.])
    torch.testing.assert_close(interpolate_integer_positions(z, torch.tensor([1.25, 7.])),
                               torch.tensor([12.5, 30.]))
    cope = CoPE(16, num_heads=2, num_layers=2, npos_max=8, num_extra_tokens=1)
    q = torch.randn(2, 2, 13, 8, requires_grad=True)
    (cope.attn_bias(q, q, (3, 4), 1) ** 2).sum().backward()
    assert cope.pos_embed_past.grad[1].abs().sum() > 0
    assert cope.pos_embed_future.grad[1].abs().sum() > 0
    assert q.grad[:, :, 1:].abs().sum() > 0


@pytest.mark.parametrize('cls,kwargs,match', [
    (SinCos2dPE, dict(embed_dims=10), 'divisible by 4'),
    (RoPE2d, dict(embed_dims=24, num_heads=4), 'divisible by 4'),
    (RelativePositionBias2d, dict(embed_dims=8, max_distance=0), 'max_distance'),
    (CoPE, dict(embed_dims=8, npos_max=1), 'npos_max'),
    (LearnableAbsolutePE, dict(embed_dims=8, grid_size=(0, 3)), 'grid_size'),
    (NoPositionEncoding, dict(embed_dims=8, num_heads=3), 'num_heads'),
])
def test_bad_arguments(cls, kwargs, match):
    with pytest.raises(ValueError, match=match):
        cls(**kwargs)


def test_wrong_token_count_is_a_clear_error():
    with pytest.raises(ValueError, match=r'1 \+ 3 \* 4 = 13'):
        LearnableAbsolutePE(8, num_extra_tokens=1, grid_size=4).add_to_tokens(
            torch.zeros(1, 12, 8), (3, 4))


@pytest.mark.parametrize('cls,kwargs,tables', [
    (LearnableAbsolutePE, dict(grid_size=(3, 3)), ('pos_embed', )),
    (RelativePositionBias2d, dict(max_distance=2), ('bias_table', )),
    (CoPE, dict(npos_max=8), ('pos_embed_past', 'pos_embed_future')),
    (SaPE2, dict(max_pos=4), ('pos_embed_x', 'pos_embed_y')),
])
def test_learnable_tables_init(tmp_path, cls, kwargs, tables):
    """The shared ``trunc_normal_tables`` init: construction and ``init_weights`` draw the
    named tables in that order from a truncated normal (std 0.02); an ``init_cfg`` is
    followed instead of redrawing."""

    def drawn(seed):
        torch.manual_seed(seed)
        return [torch.nn.init.trunc_normal_(torch.empty_like(getattr(pe, t)), std=0.02)
                for t in tables]

    torch.manual_seed(0)
    pe = cls(16, num_heads=2, num_layers=2, **kwargs)
    assert pe.trunc_normal_tables == tables
    assert sorted(dict(pe.named_parameters())) == sorted(tables)  # every table listed
    for t, ref in zip(tables, drawn(0)):
        torch.testing.assert_close(getattr(pe, t).data, ref, rtol=0, atol=0)
    # init_weights without init_cfg: a fresh draw of every table, in the same order
    with torch.no_grad():
        for t in tables:
            getattr(pe, t).fill_(3.)
    torch.manual_seed(1)
    pe.init_weights()
    for t, ref in zip(tables, drawn(1)):
        torch.testing.assert_close(getattr(pe, t).data, ref, rtol=0, atol=0)
    # with an init_cfg (here a checkpoint) mmengine's init runs and nothing is redrawn
    ckpt = str(tmp_path / 'pe.pth')
    torch.save({k: torch.full_like(v, 0.5) for k, v in pe.state_dict().items()}, ckpt)
    loaded = cls(16, num_heads=2, num_layers=2, **kwargs,
                 init_cfg=dict(type='Pretrained', checkpoint=ckpt))
    loaded.init_weights()
    assert all(bool((p == 0.5).all()) for p in loaded.parameters())



@pytest.mark.parametrize('hw, K', [((3, 5), 2), ((5, 3), 1), ((4, 6), 3)])
def test_rel_pos_bias_index_on_a_non_square_grid(hw, K):
    """Pair (i, j) of the row-major grid reads entry (clip(y_j - y_i) + K) * (2K + 1) +
    clip(x_j - x_i) + K of the table: each axis with its own sign and its own offset (a 1 x W
    grid cannot see dy, a symmetric check cannot see a sign). Written pair by pair."""
    H, W = hw

    def clip(d):
        return max(-K, min(K, d))

    expected = torch.tensor([[(clip(j // W - i // W) + K) * (2 * K + 1) + clip(j % W - i % W) + K
                              for j in range(H * W)] for i in range(H * W)])
    assert torch.equal(clipped_relative_index(hw, K), expected)
    rpb = RelativePositionBias2d(8, num_heads=2, num_layers=2, max_distance=K,
                                 num_extra_tokens=1)
    with torch.no_grad():
        rpb.bias_table.copy_(torch.randn(rpb.bias_table.shape))
    q = torch.zeros(1, 2, 1 + H * W, 4)
    for layer in (0, 1):
        bias = rpb.attn_bias(q, q, hw, layer)[0, :, 1:, 1:]  # (heads, HW, HW)
        torch.testing.assert_close(bias, rpb.bias_table[layer][expected].permute(2, 0, 1),
                                   rtol=0, atol=0)
    # the token one row below and one column right of token 0 reads (dy, dx) = (1, 1)
    assert expected[0, W + 1] == (1 + K) * (2 * K + 1) + 1 + K
