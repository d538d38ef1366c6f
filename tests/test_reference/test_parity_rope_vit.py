"""RoPEMixed, RoPE2d (axial) and PEMultiheadAttention against naver-ai/rope-vit
(``deit/models_v2_rope.py``; fixtures by ``tests/reference/generate/rope_vit.py``).

Shared parameters: the official ``freqs`` (2, depth, heads * d/2) are loaded into
``RoPEMixed.freqs`` (2, depth, heads, d/2) by a reshape, and the official ``qkv`` / ``proj``
weights into our attention. Compared: our initial frequencies with the official
``init_random_2d_freqs`` after the same seed, the rotations (``compute_mixed_cis`` /
``compute_axial_cis`` as cos / sin) of square, non-square and larger-than-training grids,
``apply_rotary_emb`` outputs with gradients w.r.t. the queries, keys and ``freqs``, and the
``RoPEAttention`` output (class token unrotated) in train and eval mode.
"""
import pytest
import torch

from mmposenc.models.layers import PEMultiheadAttention, RoPE2d, RoPEMixed
from mmposenc.models.layers.encodings.rope_mixed import init_mixed_freqs
from reference_parity import load_fixture, probe

FIX = load_fixture('rope_vit')
CASES = FIX['cases']
E, NH, DEPTH = FIX['embed_dims'], FIX['num_heads'], FIX['depth']
D = E // NH
GRIDS = '4x4, 3x5, 6x5'


def build(kind, num_extra_tokens=0):
    if kind == 'axial':
        return RoPE2d(E, NH, num_extra_tokens=num_extra_tokens, theta=100.)
    rope = RoPEMixed(E, NH, DEPTH, num_extra_tokens=num_extra_tokens, theta=10.)
    with torch.no_grad():
        rope.freqs.copy_(FIX['freqs'].view(2, DEPTH, NH, D // 2))
    return rope


def ours_name(kind):
    return 'RoPEMixed' if kind == 'mixed' else 'RoPE2d'


@pytest.mark.parametrize('case', CASES, ids=[c['name'] for c in CASES])
def test_rotation(case, parity):
    """cos / sin of the official rotation (complex ``freqs_cis``) of every grid and layer."""
    parity.describe(method=f'RoPE-{case["kind"].capitalize()}',
                    ours=f'{ours_name(case["kind"])} angles', reference='rope_vit', grids=GRIDS,
                    function=f'compute_{case["kind"]}_cis')
    rope = build(case['kind'])
    if case['kind'] == 'mixed':
        angles = rope.angles(case['hw'], case['layer'])[0]  # (heads, N, d/2)
    else:
        from mmposenc.models.layers.encodings.rope2d import build_rope2d_angles
        angles = build_rope2d_angles(case['hw'], D, 100.)  # (N, d/2)
    cis = case['cis']
    parity.check(angles.cos(), cis[..., 0], 1e-6, what='cos')
    parity.check(angles.sin(), cis[..., 1], 1e-6, what='sin')


@pytest.mark.parametrize('case', CASES, ids=[c['name'] for c in CASES])
def test_apply_rotary(case, parity):
    """``apply_rotary_emb(q, k, freqs_cis)`` == ``transform_qk``: values and gradients
    w.r.t. the queries, keys and (mixed) the frequencies."""
    parity.describe(method=f'RoPE-{case["kind"].capitalize()}',
                    ours=f'{ours_name(case["kind"])}.transform_qk', reference='rope_vit',
                    grids=GRIDS, function='apply_rotary_emb')
    rope = build(case['kind'])
    q = case['q'].clone().requires_grad_()
    k = case['k'].clone().requires_grad_()
    q_out, k_out = rope.transform_qk(q, k, case['hw'], case['layer'])
    parity.check(q_out, case['q_out'], 1e-6, 1e-6, what='q')
    parity.check(k_out, case['k_out'], 1e-6, 1e-6, what='k')
    out = torch.cat((q_out, k_out), dim=-1)
    wrt = [q, k] + ([rope.freqs] if case['kind'] == 'mixed' else [])
    grads = torch.autograd.grad((out * probe(out.shape, case['probe_seed'])).sum(), wrt)
    parity.check(grads[0], case['grad_q'], 1e-6, 1e-6, what='grad q')
    parity.check(grads[1], case['grad_k'], 1e-6, 1e-6, what='grad k')
    if case['kind'] == 'mixed':
        # the official gradient is w.r.t. all layers' frequencies; only this layer's is nonzero
        parity.check(grads[2], case['grad_freqs'].view(2, DEPTH, NH, D // 2), 1e-4, 1e-5,
                     what='grad freqs')


@pytest.mark.parametrize('mode', ['train', 'eval'])
@pytest.mark.parametrize('case', CASES, ids=[c['name'] for c in CASES])
def test_attention(case, mode, parity):
    """``RoPEAttention(x, freqs_cis)`` == ``PEMultiheadAttention(x, [rope])`` with the class
    token unrotated, shared weights, train and eval mode."""
    parity.describe(method=f'RoPE-{case["kind"].capitalize()}',
                    ours=f'PEMultiheadAttention + {ours_name(case["kind"])}',
                    reference='rope_vit', grids=GRIDS + '; train, eval',
                    function='RoPEAttention.forward')
    p = FIX['params']
    attn = PEMultiheadAttention(E, NH)
    attn.load_state_dict({'qkv.weight': p['qkv_weight'], 'qkv.bias': p['qkv_bias'],
                          'proj.weight': p['proj_weight'], 'proj.bias': p['proj_bias']})
    rope = build(case['kind'], num_extra_tokens=1)
    attn.train(mode == 'train')
    rope.train(mode == 'train')
    with torch.no_grad():
        out = attn(case['x'], case['hw'], [rope], layer_idx=case['layer'])
    parity.check(out, case[f'attn_out_{mode}'], 1e-6, 1e-5, what='attention output')


def test_init_frequencies(parity):
    """``init_mixed_freqs`` with a generator seeded as the official global seed draws the
    official ``init_random_2d_freqs`` frequencies (one direction per layer and head)."""
    parity.describe(method='RoPE-Mixed', ours='init_mixed_freqs', reference='rope_vit',
                    grids='-', function='init_random_2d_freqs')
    g = torch.Generator().manual_seed(FIX['init_seed'])
    ours = init_mixed_freqs(D, NH, DEPTH, theta=10., generator=g)
    parity.check(ours, FIX['freqs'].view(2, DEPTH, NH, D // 2), 1e-6, 1e-6, what='freqs')
