"""PEG against ``PosCNN`` of Meituan-AutoML/Twins (``gvt.py``, the PEG of CPVTv2 / PCPVT /
ALTGVT; fixtures by ``tests/reference/generate/twins.py``).

Shared parameters: the official ``proj.0.weight`` / ``proj.0.bias`` load into our PEG under
the same keys. Stride 1 (``X + DWConv(X)``) and stride 2 (no residual), square, non-square
and larger grids, train and eval mode: outputs and gradients w.r.t. the tokens and both
parameters.
"""
import pytest
import torch

from mmposenc.models.layers import PEG
from reference_parity import load_fixture, probe

FIX = load_fixture('twins_peg')
CASES = FIX['cases']


@pytest.mark.parametrize('case', CASES, ids=[c['name'] for c in CASES])
def test_peg(case, parity):
    parity.describe(method='PEG (CPVT)', ours=f'PEG(stride={case["stride"]})',
                    reference='twins_peg', grids='4x4, 3x5, 6x5; train, eval',
                    function='PosCNN.forward')
    peg = PEG(FIX['channels'], stride=case['stride'])
    peg.load_state_dict({'proj.0.weight': case['weight'], 'proj.0.bias': case['bias']})
    peg.train(case['mode'] == 'train')
    x = case['x'].clone().requires_grad_()
    out = peg(x, case['hw'])
    parity.check(out, case['out'], 1e-6, 1e-6, what='output')
    conv = peg.proj[0]
    grads = torch.autograd.grad((out * probe(out.shape, case['probe_seed'])).sum(),
                                (x, conv.weight, conv.bias))
    parity.check(grads[0], case['grad_x'], 1e-6, 1e-6, what='grad x')
    parity.check(grads[1], case['grad_weight'], 1e-5, 1e-5, what='grad weight')
    parity.check(grads[2], case['grad_bias'], 1e-5, 1e-5, what='grad bias')
