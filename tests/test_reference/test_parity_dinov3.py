"""DINOv3RoPE and PEMultiheadAttention against DINOv3's own ``RopePositionEmbedding`` and
``SelfAttention`` (facebookresearch/dinov3; fixtures by ``tests/reference/generate/dinov3.py``).

Shared parameters: the official periods buffer is compared with ours (computed by our module
from the same ``base`` / ``min_period`` / ``max_period``), and the official ``qkv`` / ``proj``
weights are loaded into our attention. Eval mode: ``sin`` / ``cos`` of every grid for the
'separate', 'max' and 'min' coordinate modes, and the attention output with its gradients
w.r.t. the input and ``qkv.weight``. Training mode: the same global seed before the official
module's successive calls and ours gives the same shift / jitter / rescale draws, so every
call's rotation matches. DINOv3 calls its RoPE inside the block loop, so the successive calls
are the draws of successive blocks: ``train_draw='per_block'`` (ours by default) matches them
call by call, ``'per_forward'`` (timm's port) repeats the first. bf16 cases: DINOv3's
``pos_embed_rope_dtype='bf16'`` against our ``rope_dtype='bf16'``.
"""
import math

import pytest
import torch

from mmposenc.models.layers import DINOv3RoPE, PEMultiheadAttention
from reference_parity import load_fixture, probe

FIX = load_fixture('dinov3_rope')
CASES = FIX['cases']
ATOL = 2e-6  # float32 sin / cos of angles up to ~2 pi * 2 * 2 / 0.5


def build(case, training, **kwargs):
    cfg = dict(FIX['configs'][case['config']])
    cfg.setdefault('rescale_coords', None)  # the official default; ours defaults to 2
    cfg['rope_dtype'] = cfg.pop('dtype', 'fp32')
    rope = DINOv3RoPE(FIX['embed_dims'], FIX['num_heads'], num_extra_tokens=case['prefix'],
                      **cfg, **kwargs)
    return rope.train(training)


def ids(cases):
    return [c['name'] for c in cases]


def describe(parity, case, what, function='RopePositionEmbedding.forward'):
    if FIX['configs'][case['config']].get('dtype') == 'bf16':
        what += ", rope_dtype='bf16'"
    parity.describe(method='DINOv3 RoPE', ours=what, reference='dinov3_rope', function=function,
                    grids='4x4, 3x5, 6x5')


def our_sincos(rope, hw, layer_idx=0):
    a = rope.angles(hw, layer_idx)[0, 0]  # (HW, d/2): row periods first, then column
    return a.sin(), a.cos()


@pytest.mark.parametrize('case', CASES, ids=ids(CASES))
def test_periods(case, parity):
    """Periods from base, or geometric from min_period to max_period."""
    describe(parity, case, 'DINOv3RoPE.periods', 'RopePositionEmbedding.periods')
    parity.check(build(case, False).periods, case['periods'], atol=0, rtol=1e-6,
                 what='periods')


@pytest.mark.parametrize('case', [c for c in CASES if not c['training']],
                         ids=ids([c for c in CASES if not c['training']]))
def test_eval_sincos(case, parity):
    """Eval rotation of every grid and coordinate mode ('separate', 'max', 'min')."""
    describe(parity, case, 'DINOv3RoPE angles (eval)')
    sin, cos = our_sincos(build(case, False), case['hw'])
    parity.check(sin, case['sin'], ATOL, what='sin')
    parity.check(cos, case['cos'], ATOL, what='cos')


TRAIN = [c for c in CASES if c['training']]


@pytest.mark.parametrize('case', TRAIN, ids=ids(TRAIN))
def test_train_draws_per_block(case, parity):
    """Successive blocks after one seed: shift, jitter and rescale drawn as DINOv3 does,
    one draw per block (``train_draw='per_block'``)."""
    describe(parity, case, 'DINOv3RoPE angles (train, per-block seeded draws)')
    rope = build(case, True, train_draw='per_block')
    torch.manual_seed(case['draw_seed'])
    rope.start_forward()
    for i in range(FIX['num_draws']):
        sin, cos = our_sincos(rope, case['hw'], layer_idx=i)
        parity.check(sin, case['sin'][i], 5 * ATOL, what=f'sin of block {i}')
        parity.check(cos, case['cos'][i], 5 * ATOL, what=f'cos of block {i}')


@pytest.mark.parametrize('case', TRAIN, ids=ids(TRAIN))
def test_train_draws_per_forward(case, parity):
    """``train_draw='per_forward'``: successive forwards get DINOv3's successive draws and
    every block of a forward the same one."""
    describe(parity, case, 'DINOv3RoPE angles (train, per-forward seeded draws)')
    rope = build(case, True, train_draw='per_forward')
    torch.manual_seed(case['draw_seed'])
    for i in range(FIX['num_draws']):
        rope.start_forward()  # what transform_qk does at layer 0 of every forward
        for layer in range(2):
            sin, cos = our_sincos(rope, case['hw'], layer_idx=layer)
            parity.check(sin, case['sin'][i], 5 * ATOL, what=f'sin of forward {i}')
            parity.check(cos, case['cos'][i], 5 * ATOL, what=f'cos of forward {i}')


@pytest.mark.parametrize('case', CASES, ids=ids(CASES))
def test_attention(case, parity):
    """SelfAttention(x, rope) == PEMultiheadAttention(x, [DINOv3RoPE]) with shared weights,
    outputs and gradients; training cases use the first seeded draw."""
    describe(parity, case, 'PEMultiheadAttention + DINOv3RoPE', 'SelfAttention.forward')
    rope = build(case, case['training'])
    p = FIX['params'][case['config']]
    attn = PEMultiheadAttention(FIX['embed_dims'], FIX['num_heads'])
    attn.load_state_dict({'qkv.weight': p['qkv_weight'], 'qkv.bias': p['qkv_bias'],
                          'proj.weight': p['proj_weight'], 'proj.bias': p['proj_bias']})
    x = case['x'].clone().requires_grad_()
    if case['training']:
        torch.manual_seed(case['draw_seed'])
    out = attn(x, case['hw'], [rope], layer_idx=0)
    parity.check(out, case['out'], 1e-5, 1e-5, what='output')
    wrt = [x] + ([attn.qkv.weight] if 'grad_qkv_weight' in case else [])
    grads = torch.autograd.grad((out * probe(out.shape, case['probe_seed'])).sum(), wrt)
    parity.check(grads[0], case['grad_x'], 1e-5, 1e-5, what='grad x')
    if len(grads) > 1:
        parity.check(grads[1], case['grad_qkv_weight'], 1e-5, 1e-5, what='grad qkv.weight')


def test_fixture_covers_modes():
    """The fixture holds every coordinate mode, both period forms, and training draws."""
    configs = FIX['configs'].values()
    assert {c.get('normalize_coords', 'separate') for c in configs} == {'separate', 'max', 'min'}
    assert any(c.get('base') is None for c in configs)
    assert {c['training'] for c in CASES} == {True, False}
    assert any(c.get('dtype') == 'bf16' for c in configs)
    assert not math.isclose(CASES[0]['periods'][0].item(), CASES[0]['periods'][-1].item())
