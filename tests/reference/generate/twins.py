"""Fixtures of PEG from Meituan-AutoML/Twins (``gvt.py``: ``PosCNN``, the CPVT position
encoding generator of CPVTv2 / PCPVT / ALTGVT), for ``tests/test_reference/test_twins.py``.

For the stride-1 PEG (``X + DWConv3x3(X)``) and the strided one (``s=2``, no residual) on
square, non-square and larger grids, in train and eval mode (PosCNN has no mode-dependent
part; both are recorded to show it): the input tokens, the official parameters
(``proj.0.weight`` / ``proj.0.bias``, initialised as ``CPVTV2._init_weights`` does:
``N(0, sqrt(2 / fan_out))``, then the bias set to random values so it is exercised), the
output and the gradients w.r.t. the input, weight and bias.

Usage::

    python tests/reference/generate/twins.py --src /path/to/Twins [--commit SHA]

``gvt.py`` imports timm (any timm 0.4 - 1.0 works for ``PosCNN``).
"""
import math
import os.path as osp
import sys

import torch

sys.path.insert(0, osp.dirname(osp.abspath(__file__)))
from _common import GRIDS, grad_of, parse_args, save  # noqa: E402

REPO = 'Meituan-AutoML/Twins'
CHANNELS = 8


def main():
    args = parse_args(__doc__.splitlines()[0], REPO)
    from gvt import PosCNN

    cases = []
    for si, s in enumerate((1, 2)):
        torch.manual_seed(si)
        peg = PosCNN(CHANNELS, CHANNELS, s=s)
        conv = peg.proj[0]
        fan_out = conv.kernel_size[0] * conv.kernel_size[1] * conv.out_channels // conv.groups
        with torch.no_grad():
            conv.weight.normal_(0, math.sqrt(2.0 / fan_out))
            conv.bias.normal_(0, 0.1)
        for gi, (gname, (H, W)) in enumerate(GRIDS.items()):
            for mode in ('train', 'eval'):
                seed = 100 * si + 10 * gi + (mode == 'eval')
                peg.train(mode == 'train')
                torch.manual_seed(seed)
                x = torch.randn(2, H * W, CHANNELS, requires_grad=True)
                out = peg(x, H, W)
                grads = grad_of(out, (x, conv.weight, conv.bias), seed)
                cases.append(dict(name=f'stride{s}/{gname}/{mode}', stride=s, hw=[H, W],
                                  mode=mode, weight=conv.weight, bias=conv.bias, x=x,
                                  out=out, probe_seed=seed, grad_x=grads[0],
                                  grad_weight=grads[1], grad_bias=grads[2]))
    save(args, 'twins_peg', REPO, ['gvt.py:PosCNN'], cases,
         extra=dict(channels=CHANNELS), extra_versions=('timm', ))


if __name__ == '__main__':
    main()
