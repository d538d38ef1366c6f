"""SaPE2 against the paper: Eq. 10 suffix sums, Q/K modes, and the bias of Appendix D's code.

``appendix_d_bias`` below is our transcription of the SaPE2 paper's Appendix D (``SaPE_unit``
and ``SaPE``): same steps, same tensor layout (one ``(1, head_dim, npos_max)`` table per axis,
``H = W = sqrt(N)``, no class token). Appendix D shows only Q mode; K mode changes one line,
the product with the table uses the key (Eq. 12, key mode ``z~_ir = k_i . e``).
"""
import math

import pytest
import torch

from mmposenc.models.layers import SaPE2
from mmposenc.models.layers.encodings.sape2 import sape2_axis_positions, sape2_axis_vectors


# ----------------------------------------------------------- transcription of Appendix D
def _appendix_d_unit(q, k, pos_emb, scale, mode):
    """One axis; q, k: (lines, heads, L, d); pos_emb: (1, d, npos_max)."""
    npos_max = pos_emb.shape[-1]
    gates = torch.sigmoid((q * scale) @ k.transpose(-2, -1))
    pos = gates.flip(-1).cumsum(dim=-1).flip(-1)  # suffix sums
    pos = pos.clamp(max=npos_max - 1)
    pos_ceil, pos_floor = pos.ceil(), pos.floor()
    logits_int = torch.matmul(q if mode == 'q' else k, pos_emb)  # (lines, heads, L, npos)
    logits_ceil = logits_int.gather(-1, pos_ceil.long())
    logits_floor = logits_int.gather(-1, pos_floor.long())
    w = pos - pos_floor
    return logits_ceil * w + logits_floor * (1 - w)


def appendix_d_bias(query, key, pos_emb_x, pos_emb_y, mode):
    """query, key: (B, heads, N, d) with N a square; returns (B, heads, N, N)."""
    B, heads, seq_len, head_dim = query.shape
    H = W = int(math.sqrt(seq_len))
    scale = head_dim**-0.5
    query = query.reshape(B, heads, H, W, head_dim)
    key = key.reshape(B, heads, H, W, head_dim)
    q_x = query.permute(0, 2, 1, 3, 4).reshape(B * H, heads, W, head_dim)
    q_y = query.permute(0, 3, 1, 2, 4).reshape(B * W, heads, H, head_dim)
    k_x = key.permute(0, 2, 1, 3, 4).reshape(B * H, heads, W, head_dim)
    k_y = key.permute(0, 3, 1, 2, 4).reshape(B * W, heads, H, head_dim)
    w_x = _appendix_d_unit(q_x, k_x, pos_emb_x, scale, mode).reshape(B, H, heads, W, H)
    w_y = _appendix_d_unit(q_y, k_y, pos_emb_y, scale, mode).reshape(B, W, heads, H, W)
    w_x = w_x.permute(0, 2, 1, 3, 4).reshape(B * heads, H * W, H)
    w_y = w_y.permute(0, 2, 3, 1, 4).reshape(B * heads, H * W, H)
    pe_res_x = torch.cdist(w_x, w_x, p=2).reshape(B, heads, H * W, H * W)
    pe_res_y = torch.cdist(w_y, w_y, p=2).reshape(B, heads, H * W, H * W)
    return pe_res_x + pe_res_y


def _tables(pe, layer):
    """Our (M + 1, d) tables as Appendix D's (1, d, npos_max)."""
    return (pe.pos_embed_x[layer].t().unsqueeze(0), pe.pos_embed_y[layer].t().unsqueeze(0))


# ------------------------------------------------------------------------------ tests
@pytest.mark.parametrize('mode', ['q', 'k'])
@pytest.mark.parametrize('side,max_pos', [(4, 16), (8, 16), (7, 3)])
def test_bias_equals_appendix_d(mode, side, max_pos):
    """Same parameters, same q and k: our bias is Appendix D's (<= 1e-5), in both modes, with
    and without clamping (7 gates can sum past M = 3). q, k scaled up so that the gates
    spread over (0, 1) and positions are fractional."""
    torch.manual_seed(side)
    heads, d, B = 3, 16, 2
    pe = SaPE2(heads * d, num_heads=heads, num_layers=2, mode=mode, max_pos=max_pos)
    with torch.no_grad():
        pe.pos_embed_x.normal_()
        pe.pos_embed_y.normal_()
    pe.double()  # both sides in float64: the comparison tests the function, not rounding
    q, k = 3 * torch.randn(2, B, heads, side * side, d, dtype=torch.float64)
    for layer in range(2):
        ours = pe.attn_bias(q, k, (side, side), layer)
        ref = appendix_d_bias(q, k, *_tables(pe, layer), mode)
        assert (ours - ref).abs().max() <= 1e-5
        assert ref.abs().max() > 1  # a bias of real size, not a trivially small one
    if max_pos == 3:  # the clamp was exercised
        g = torch.sigmoid(q[0, 0, :side] @ k[0, 0, :side].t() * d**-0.5)  # first row
        assert sape2_axis_positions(g).max() > max_pos


def test_bias_equals_appendix_d_with_a_class_token_and_eq16_scaling():
    """A leading class token gets zero rows/columns; the patch block is Appendix D's; with
    scale_bias=True (Eq. 16) it is divided by sqrt(d)."""
    torch.manual_seed(0)
    pe = SaPE2(32, num_heads=2, num_extra_tokens=1, scale_bias=True).double()
    q, k = torch.randn(2, 2, 2, 1 + 25, 16, dtype=torch.float64)
    bias = pe.attn_bias(q, k, (5, 5), 0)
    ref = appendix_d_bias(q[:, :, 1:], k[:, :, 1:], *_tables(pe, 0), 'k')
    assert (bias[..., 1:, 1:] - ref / 4).abs().max() <= 1e-5
    assert (bias[..., 0, :] == 0).all() and (bias[..., :, 0] == 0).all()


def test_attention_adds_the_bias_to_the_scaled_logits():
    """The bias enters with a plus sign (Eq. 16, Appendix D) and, by default, after the
    1/sqrt(d): the attention weights are softmax(q.k/sqrt(d) + b); scale_bias=True gives
    softmax((q.k + b)/sqrt(d))."""
    from mmposenc.models.layers import PEMultiheadAttention
    torch.manual_seed(0)
    for scale_bias in (False, True):
        pe = SaPE2(32, num_heads=2, scale_bias=scale_bias)
        attn = PEMultiheadAttention(32, num_heads=2).eval()
        x = torch.randn(2, 16, 32)
        out = attn(x, (4, 4), [pe], 0)
        qkv = attn.qkv(x).reshape(2, 16, 3, 2, 16).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        raw = q @ k.transpose(-2, -1)
        b = appendix_d_bias(q, k, *_tables(pe, 0), 'k')
        logits = (raw + b) / 4 if scale_bias else raw / 4 + b
        ref = (logits.softmax(-1) @ v).transpose(1, 2).reshape(2, 16, 32)
        torch.testing.assert_close(out, attn.proj(ref), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize('mode', ['q', 'k'])
def test_non_square_grids_match_the_loop_definition(mode):
    """Appendix D needs H = W; ours takes any H x W. Checked against a loop over Eq. 9-15 on
    a 3 x 5 grid (and a 1 x 6 grid)."""
    torch.manual_seed(1)
    d, M = 8, 4
    pe = SaPE2(d, num_heads=1, mode=mode, max_pos=M)
    for H, W in ((3, 5), (1, 6)):
        q, k = 2 * torch.randn(2, 1, 1, H * W, d)
        bias = pe.attn_bias(q, k, (H, W), 0)[0, 0]
        qg, kg = q[0, 0].reshape(H, W, d), k[0, 0].reshape(H, W, d)

        def vector(line_q, line_k, e, i):  # SaPE2 vector of patch i of a line (Eq. 9-14)
            g = torch.sigmoid(line_q[i] @ line_k.t() / math.sqrt(d))
            v = line_q[i] if mode == 'q' else line_k[i]
            out = []
            for m in range(len(line_q)):
                p = min(g[m:].sum().item(), M)  # Eq. 10: x_m <= x_j
                lo, hi = math.floor(p), math.ceil(p)
                e_p = (p - lo) * e[hi] + (1 - p + lo) * e[lo]  # Eq. 11
                out.append(v @ e_p)  # Eq. 12
            return torch.stack(out)

        s_x = [vector(qg[r], kg[r], pe.pos_embed_x[0], c) for r in range(H) for c in range(W)]
        s_y = [vector(qg[:, c], kg[:, c], pe.pos_embed_y[0], r) for r in range(H)
               for c in range(W)]
        for i in range(H * W):
            for n in range(H * W):
                ref = (s_x[i] - s_x[n]).norm() + (s_y[i] - s_y[n]).norm()  # Eq. 15-16
                torch.testing.assert_close(bias[i, n], ref, atol=1e-5, rtol=1e-5)


def test_positions_are_suffix_sums_of_the_own_gates():
    """Eq. 10: p_im = sum_{j >= m} g_ij; all gates 1 give L - m (0-based m)."""
    g = torch.rand(2, 6, 6)
    p = sape2_axis_positions(g)
    for b in range(2):
        for i in range(6):
            for m in range(6):
                torch.testing.assert_close(p[b, i, m], g[b, i, m:].sum())
    n = 5
    ones = sape2_axis_positions(torch.ones(n, n))
    assert torch.equal(ones, (n - torch.arange(n, dtype=torch.float32)).expand(n, n))


@pytest.mark.parametrize('mode', ['q', 'k'])
def test_k_mode_uses_the_own_key(mode):
    """Row i of the SaPE2 vectors depends on q_i (Q) or k_i (K) through z_i = v_i . e:
    replacing e by 2e doubles the vectors; replacing, in K mode, the query of patch i by
    anything changes the gates only."""
    torch.manual_seed(0)
    q, k = torch.randn(2, 1, 5, 8), torch.randn(2, 1, 5, 8)
    e = torch.randn(7, 8)
    s = sape2_axis_vectors(q, k, e, mode)
    torch.testing.assert_close(sape2_axis_vectors(q, k, 2 * e, mode), 2 * s)
    gates = torch.sigmoid(q @ k.transpose(-2, -1))
    pos = sape2_axis_positions(gates).clamp(max=6)
    lo = pos.floor()
    w = pos - lo
    e_interp = (w[..., None] * e[pos.ceil().long()] + (1 - w[..., None]) * e[lo.long()])
    vec = q if mode == 'q' else k  # (.., i, d) meets e[p_im] for every m
    torch.testing.assert_close(s, (e_interp * vec[..., :, None, :]).sum(-1))


def test_position_enters_only_through_gates_that_vary():
    """With constant gates (q = 0 in K mode: every gate 0.5) p_im depends on m only, every
    patch's vector is its key against the same interpolated table, and the bias is a function
    of content alone: shuffling the patches shuffles the bias. Gates that vary along a line
    (q != 0) make it depend on where the patches are."""
    torch.manual_seed(0)
    pe = SaPE2(16, num_heads=2, mode='k')
    with torch.no_grad():
        pe.pos_embed_x.normal_()
        pe.pos_embed_y.normal_()
    k = torch.randn(1, 2, 20, 8)
    perm = torch.randperm(20)
    for q, invariant in ((torch.zeros_like(k), True), (3 * torch.randn_like(k), False)):
        b = pe.attn_bias(q, k, (4, 5), 0)
        b_perm = pe.attn_bias(q[:, :, perm], k[:, :, perm], (4, 5), 0)
        same = torch.allclose(b_perm, b[:, :, perm][:, :, :, perm], atol=1e-5)
        assert same == invariant


def test_q_and_k_modes_differ_and_k_is_the_default():
    torch.manual_seed(0)
    pe_q = SaPE2(16, num_heads=2, mode='q')
    pe_k = SaPE2(16, num_heads=2)
    assert pe_k.mode == 'k' and not pe_k.scale_bias
    pe_k.load_state_dict(pe_q.state_dict())
    q, k = torch.randn(2, 2, 20, 8), torch.randn(2, 2, 20, 8)
    assert not torch.allclose(pe_q.attn_bias(q, k, (4, 5), 0),
                              pe_k.attn_bias(q, k, (4, 5), 0), atol=1e-4)


@pytest.mark.parametrize('mode', ['q', 'k'])
def test_gradients_reach_every_parameter_and_input(mode):
    torch.manual_seed(0)
    pe = SaPE2(16, num_heads=2, num_layers=2, mode=mode, num_extra_tokens=1, max_pos=6)
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


def test_bad_arguments():
    with pytest.raises(ValueError, match='mode'):
        SaPE2(16, mode='v')
    with pytest.raises(ValueError, match='max_pos'):
        SaPE2(16, max_pos=0)
    with pytest.raises(TypeError):
        SaPE2(16, max_rel_pos=16)  # the old signed-table argument is gone
    with pytest.raises(ValueError, match='tokens'):
        SaPE2(16).attn_bias(torch.rand(1, 1, 10, 16), torch.rand(1, 1, 10, 16), (3, 4), 0)
