"""SaPE2: positions from gates, efficient = direct interpolation, Q/K modes, gradients."""
import pytest
import torch

from mmposenc.models.layers import SaPE2
from mmposenc.models.layers.sape2 import sape2_axis_positions, sape2_axis_vectors


@pytest.mark.parametrize('n', [1, 2, 5, 9])
def test_all_gates_one_give_plain_relative_positions(n):
    gates = torch.ones(3, n, n)
    c = torch.arange(n, dtype=torch.float32)
    expected = (c[None, :] - c[:, None]).expand(3, n, n)  # p[c, c'] = c' - c
    torch.testing.assert_close(sape2_axis_positions(gates), expected)


def test_positions_are_sums_of_gates():
    """Loop reference of Eq. 10 for random gates."""
    g = torch.rand(2, 6, 6)
    p = sape2_axis_positions(g)
    for b in range(2):
        for i in range(6):
            for j in range(6):
                if j > i:
                    ref = g[b, i, i + 1:j + 1].sum()
                elif j < i:
                    ref = -g[b, i, j:i].sum()
                else:
                    ref = torch.tensor(0.)
                torch.testing.assert_close(p[b, i, j], ref)


def test_all_gates_one_in_the_module(monkeypatch):
    """With every gate forced to 1 the module's bias is that of plain relative positions:
    e at integer c' - c, no interpolation."""
    import mmposenc.models.layers.sape2 as mod
    monkeypatch.setattr(mod.torch, 'sigmoid', lambda x: torch.ones_like(x))
    pe = SaPE2(8, num_heads=1, max_rel_pos=8)
    q, k = torch.randn(1, 1, 3, 4, 8), torch.randn(1, 1, 3, 4, 8)
    s = sape2_axis_vectors(q, k, pe.pos_embed_x[0], 8, 'q')
    e = pe.pos_embed_x[0]
    for r in range(3):
        for c in range(4):
            for c2 in range(4):
                torch.testing.assert_close(s[0, 0, r, c, c2], q[0, 0, r, c] @ e[c2 - c + 8])


@pytest.mark.parametrize('mode', ['q', 'k'])
def test_efficient_equals_direct_interpolation(mode):
    """Eq. 13-14 (interpolate the scalars q.e[p]) equals Eq. 11 (interpolate the
    embeddings, then the dot product)."""
    torch.manual_seed(0)
    L = 3
    q, k = torch.randn(2, 2, 3, 5, 8), torch.randn(2, 2, 3, 5, 8)
    e = torch.randn(2 * L + 1, 8)
    s = sape2_axis_vectors(q, k, e, L, mode, scale=0.5)
    pos = sape2_axis_positions(torch.sigmoid(q @ k.transpose(-2, -1) * 0.5))
    p = pos.clamp(-L, L) + L
    lo, w = p.floor().long(), p - p.floor()
    hi = (lo + 1).clamp(max=2 * L)
    e_interp = w[..., None] * e[hi] + (1 - w[..., None]) * e[lo]  # (..., c, c', d)
    vec = q.unsqueeze(-2) if mode == 'q' else k.unsqueeze(-3)
    torch.testing.assert_close(s, (e_interp * vec).sum(-1), atol=1e-5, rtol=1e-5)


def test_bias_is_distance_of_sape2_vectors():
    torch.manual_seed(0)
    pe = SaPE2(16, num_heads=2, num_extra_tokens=1)
    q, k = torch.randn(2, 2, 1 + 12, 8), torch.randn(2, 2, 1 + 12, 8)
    bias = pe.attn_bias(q, k, (3, 4), 0)
    s_x, s_y = pe.sape2_vectors(q, k, (3, 4), 0)
    assert s_x.shape == (2, 2, 12, 4) and s_y.shape == (2, 2, 12, 3)
    i, n = 5, 10
    ref = -((s_x[..., i, :] - s_x[..., n, :]).norm(dim=-1) +
            (s_y[..., i, :] - s_y[..., n, :]).norm(dim=-1))
    torch.testing.assert_close(bias[..., 1 + i, 1 + n], ref)
    assert (bias[..., 0, :] == 0).all() and (bias[..., :, 0] == 0).all()  # cls token
    assert torch.allclose(bias.diagonal(dim1=-2, dim2=-1), torch.zeros(()))


def test_q_and_k_modes_differ():
    torch.manual_seed(0)
    pe_q = SaPE2(16, num_heads=2, mode='q')
    pe_k = SaPE2(16, num_heads=2, mode='k')
    pe_k.load_state_dict(pe_q.state_dict())
    q, k = torch.randn(2, 2, 20, 8), torch.randn(2, 2, 20, 8)
    assert not torch.allclose(pe_q.attn_bias(q, k, (4, 5), 0),
                              pe_k.attn_bias(q, k, (4, 5), 0), atol=1e-4)


@pytest.mark.parametrize('mode', ['q', 'k'])
def test_gradients_reach_every_parameter_and_input(mode):
    torch.manual_seed(0)
    pe = SaPE2(16, num_heads=2, num_layers=2, mode=mode, num_extra_tokens=1)
    q = torch.randn(2, 2, 1 + 20, 8, requires_grad=True)
    k = torch.randn(2, 2, 1 + 20, 8, requires_grad=True)
    loss = sum((pe.attn_bias(q, k, (4, 5), i) * torch.randn(2, 2, 21, 21)).sum()
               for i in range(2))
    loss.backward()
    for name, p in pe.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
        for layer in range(2):
            assert p.grad[layer].abs().sum() > 0, (name, layer)
    for t in (q, k):  # the gates (and thus positions) are differentiable
        assert torch.isfinite(t.grad).all() and t.grad[:, :, 1:].abs().sum() > 0


def test_positions_beyond_the_table_are_clamped():
    pe = SaPE2(8, max_rel_pos=2)
    q = k = torch.randn(1, 1, 6 * 7, 8)
    assert torch.isfinite(pe.attn_bias(q, k, (6, 7), 0)).all()


def test_bad_arguments():
    with pytest.raises(ValueError, match='mode'):
        SaPE2(16, mode='v')
    with pytest.raises(ValueError, match='max_rel_pos'):
        SaPE2(16, max_rel_pos=0)
    with pytest.raises(ValueError, match='tokens'):
        SaPE2(16).attn_bias(torch.rand(1, 1, 10, 16), torch.rand(1, 1, 10, 16), (3, 4), 0)
