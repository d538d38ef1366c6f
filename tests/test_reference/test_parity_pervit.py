"""MPA and PeripheralPositionEncoding against juhongm999/pervit (``model/pervit.py``:
``MPA``, ``PeripheralPositionEncoding``; ``model/utils.py``: ``OffsetGenerator``; fixtures by
``tests/reference/generate/pervit.py``).

Shared parameters: the official ``rpe_proj``, ``to_qkv``, ``proj`` and gate
(``activation.conv1/gn1/conv2/gn2``) load into ours (``ppe.distance_embed``, ``qkv``, ``proj``,
``ppe.proj1/norm1/proj2/norm2``). Square grids only (the official code is square-only): its
14 x 14 training grid, 4 x 4 and 9 x 9. Compared: the gate ``Phi_p``, the MPA output in train
mode (gate computed every forward) and eval mode (the official ``init_rpe`` cache vs ours),
and the train-mode gradients w.r.t. the input and every parameter.
"""
import pytest
import torch

from mmposenc.models.layers import MPA
from reference_parity import load_fixture, probe

FIX = load_fixture('pervit_mpa')
CASES = FIX['cases']
#: official key -> ours
KEYS = {'to_qkv_weight': 'qkv.weight', 'proj_weight': 'proj.weight', 'proj_bias': 'proj.bias',
        'rpe_proj_weight': 'ppe.distance_embed.weight', 'rpe_proj_bias': 'ppe.distance_embed.bias',
        'activation.conv1.weight': 'ppe.proj1.weight', 'activation.conv1.bias': 'ppe.proj1.bias',
        'activation.gn1.weight': 'ppe.norm1.weight', 'activation.gn1.bias': 'ppe.norm1.bias',
        'activation.conv2.weight': 'ppe.proj2.weight', 'activation.conv2.bias': 'ppe.proj2.bias',
        'activation.gn2.weight': 'ppe.norm2.weight', 'activation.gn2.bias': 'ppe.norm2.bias'}
GRIDS = '14x14 (official training grid), 4x4, 9x9; square only'


def build(case):
    mpa = MPA(FIX['embed_dims'], FIX['num_heads'])
    sd = mpa.state_dict()
    mapped = {ours: case[theirs] for theirs, ours in KEYS.items()}
    assert set(mapped) == {k for k, v in sd.items() if v.is_floating_point()}
    sd.update(mapped)
    mpa.load_state_dict(sd)
    return mpa


@pytest.mark.parametrize('case', [c for c in CASES if 'phi_p' in c],
                         ids=[c['name'] for c in CASES if 'phi_p' in c])
def test_phi_p(case, parity):
    parity.describe(method='PerViT', ours='PeripheralPositionEncoding (Phi_p)',
                    function='PeripheralPositionEncoding + OffsetGenerator',
                    reference='pervit_mpa', grids='4x4, 9x9')
    mpa = build(case).eval()
    with torch.no_grad():
        got = mpa.ppe(case['hw'])
    # float32: group-norm statistics over ~10^4 values summed in another order
    parity.check(got, case['phi_p'][0], 1e-5, 1e-5, what='Phi_p')


@pytest.mark.parametrize('case', CASES, ids=[c['name'] for c in CASES])
def test_mpa_train(case, parity):
    """Train mode: output and gradients w.r.t. the input and all parameters."""
    parity.describe(method='PerViT', ours='MPA (train)', reference='pervit_mpa',
                    function='MPA.forward', grids=GRIDS)
    mpa = build(case).train()
    params = dict(mpa.named_parameters())
    x = case['x'].clone().requires_grad_()
    out = mpa(x, case['hw'])
    parity.check(out, case['out_train'], 1e-6, 1e-5, what='output')
    names = list(KEYS)
    grads = torch.autograd.grad((out * probe(out.shape, case['probe_seed'])).sum(),
                                [x] + [params[KEYS[n]] for n in names])
    parity.check(grads[0], case['grad_x'], 1e-6, 1e-5, what='grad x')
    for n, g in zip(names, grads[1:]):
        ref = case.get('grad_' + n)
        if ref is not None:  # proj has no recorded gradient
            parity.check(g, ref, 1e-5, 1e-4, what=f'grad {n}')


@pytest.mark.parametrize('case', CASES, ids=[c['name'] for c in CASES])
def test_mpa_eval(case, parity):
    """Eval mode (their ``init_rpe`` cache; ours caches the bias), called twice."""
    parity.describe(method='PerViT', ours='MPA (eval)', reference='pervit_mpa',
                    function='MPA.init_rpe + forward', grids=GRIDS)
    mpa = build(case).eval()
    with torch.no_grad():
        for _ in range(2):
            parity.check(mpa(case['x'], case['hw']), case['out_eval'], 1e-6, 1e-5,
                         what='output')
