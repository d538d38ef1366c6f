"""PVTPEG against the official Twins-PCPVT backbone (``gvt.py``: ``CPVTV2`` with its
spatial-reduction ``Block`` and ``PosCNN``, as ``pcpvt_small_v0`` builds it; fixtures by
``tests/reference/generate/twins.py``), at a tiny width.

Shared parameters: the official state dict goes through our converter
(``tools/model_converters/twins_pcpvt_to_pvtpeg.py``) into ``PVTPEG`` (strict load). Images
of 32 x 32 (the size the model is built for), 32 x 64 and 64 x 64, train and eval mode (no
dropout): the tokens after each of the first three stages, the pooled final-normalised
features (the official ``forward_features``; ours is the mean of the last map), and the
gradients w.r.t. the PEG weights and, on the non-square image, the image.
"""
import importlib.util
import os.path as osp

import pytest
import torch

from mmposenc.models.backbones import PVTPEG
from reference_parity import load_fixture, probe

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
_spec = importlib.util.spec_from_file_location(
    'twins_pcpvt_to_pvtpeg',
    osp.join(ROOT, 'tools', 'model_converters', 'twins_pcpvt_to_pvtpeg.py'))
converter = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(converter)

FIX = load_fixture('twins_pcpvt')
CASES = FIX['cases']


def build():
    model = PVTPEG(arch=dict(FIX['arch']), patch_size=4, out_indices=(0, 1, 2, 3),
                   drop_path_rate=0.)
    model.load_state_dict(converter.convert(FIX['state_dict']), strict=True)
    return model


@pytest.mark.parametrize('mode', ['train', 'eval'])
@pytest.mark.parametrize('case', CASES, ids=[c['name'] for c in CASES])
def test_pcpvt(case, mode, parity):
    parity.describe(method='PEG + GAP backbone (Twins-PCPVT)', ours='PVTPEG',
                    reference='twins_pcpvt', function='CPVTV2.forward_features',
                    grids='images 32x32, 32x64, 64x64 (stage grids 8x8 ... 2x2); train, eval')
    model = build().train(mode == 'train')
    img = case['img'].clone().requires_grad_(mode == 'train')
    outs = model(img)
    feat = outs[-1].mean(dim=(2, 3))
    parity.check(feat, case[f'features_{mode}'], 1e-5, 1e-5, what='pooled features')
    if mode == 'eval':
        return
    for i, tokens in enumerate(case['stages'][:3]):
        parity.check(outs[i].flatten(2).transpose(1, 2), tokens, 1e-5, 1e-5,
                     what=f'stage {i} tokens')
    pegs = [model.pegs[i].proj[0].weight for i in range(len(model.pegs))]
    wrt = pegs + ([img] if 'grad_img' in case else [])
    grads = torch.autograd.grad((feat * probe(feat.shape, case['probe_seed'])).sum(), wrt)
    for i, (g, ref) in enumerate(zip(grads, case['grad_peg_weights'])):
        parity.check(g, ref, 1e-5, 1e-4, what=f'grad PEG {i} weight')
    if 'grad_img' in case:
        parity.check(grads[-1], case['grad_img'], 1e-6, 1e-4, what='grad image')
