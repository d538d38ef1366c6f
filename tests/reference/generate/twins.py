"""Fixtures of PEG from Meituan-AutoML/Twins (``gvt.py``: ``PosCNN``, the CPVT position
encoding generator of CPVTv2 / PCPVT / ALTGVT), for ``tests/test_reference/test_parity_twins.py``.

For the stride-1 PEG (``X + DWConv3x3(X)``) and the strided one (``s=2``, no residual) on
square, non-square and larger grids, in train and eval mode (PosCNN has no mode-dependent
part; both are recorded to show it): the input tokens, the official parameters
(``proj.0.weight`` / ``proj.0.bias``, initialised as ``CPVTV2._init_weights`` does:
``N(0, sqrt(2 / fan_out))``, then the bias set to random values so it is exercised), the
output and the gradients w.r.t. the input, weight and bias.

Usage::

    python tests/reference/generate/twins.py --src /path/to/Twins [--commit SHA]

Also a whole PCPVT backbone (``CPVTV2`` with ``gvt.py``'s spatial-reduction ``Block``, as
``pcpvt_small_v0`` builds it, at a tiny width: embed dims 8, 16, 16, 24, one block per
stage, sr ratios 4, 2, 2, 1, LayerNorm eps 1e-6, no dropout) with random weights (its own
init, then every parameter perturbed so the LayerNorms and biases are not at their
initial values): its state dict, images of 32 x 32, 32 x 64 and 64 x 64, each stage's output
tokens (forward hooks on the module that ends each stage: the PEG after its one block) and
the pooled final-normalised features of ``forward_features`` in train and eval mode, with
the gradients w.r.t. the PEG weights (and, on the non-square image, the image).

``gvt.py`` imports timm (any timm 0.4 - 1.0 works for ``PosCNN`` and ``CPVTV2``).
"""
import math
import os.path as osp
import sys

import torch

sys.path.insert(0, osp.dirname(osp.abspath(__file__)))
from _common import GRIDS, grad_of, parse_args, save  # noqa: E402

REPO = 'Meituan-AutoML/Twins'
CHANNELS = 8


PCPVT_ARCH = dict(embed_dims=[8, 16, 16, 24], num_heads=[1, 2, 2, 2], mlp_ratios=[2, 2, 2, 2],
                  depths=[1, 1, 1, 1], sr_ratios=[4, 2, 2, 1])
PCPVT_IMAGES = dict(square=(32, 32), nonsquare=(32, 64), off_training=(64, 64))


def pcpvt_cases():
    from functools import partial

    from gvt import CPVTV2, Block
    torch.manual_seed(7)
    model = CPVTV2(img_size=32, patch_size=4, num_classes=0, qkv_bias=True,
                   norm_layer=partial(torch.nn.LayerNorm, eps=1e-6), block_cls=Block,
                   **PCPVT_ARCH)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    stages = []
    for blocks, peg in zip(model.blocks, model.pos_block):
        # a stage ends with its last block; with one block, with the PEG after it
        last = peg if len(blocks) == 1 else blocks[-1]
        last.register_forward_hook(lambda m, i, o: stages.append(o))
    state = {k: v for k, v in model.state_dict().items()}
    cases = []
    for gi, (gname, (H, W)) in enumerate(PCPVT_IMAGES.items()):
        seed = 500 + 10 * gi
        torch.manual_seed(seed)
        img = torch.randn(1, 3, H, W, requires_grad=True)
        case = dict(name=f'pcpvt/{gname}', hw=[H, W], img=img, probe_seed=seed)
        for mode in ('train', 'eval'):
            model.train(mode == 'train')
            stages.clear()
            feat = model.forward_features(img)
            case[f'features_{mode}'] = feat
            if mode == 'train':  # the stages and gradients once (no dropout: the same)
                case['stages'] = [t.detach() for t in stages]
                pegs = [model.pos_block[i].proj[0].weight for i in range(len(model.pos_block))]
                wrt = pegs + ([img] if gname == 'nonsquare' else [])
                grads = grad_of(feat, wrt, seed)
                case['grad_peg_weights'] = list(grads[:len(pegs)])
                if gname == 'nonsquare':
                    case['grad_img'] = grads[-1]
        cases.append(case)
    return state, cases


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
    state, cases = pcpvt_cases()
    save(args, 'twins_pcpvt', REPO, ['gvt.py:CPVTV2', 'gvt.py:Block', 'gvt.py:PosCNN'], cases,
         extra=dict(arch=PCPVT_ARCH, state_dict=state), extra_versions=('timm', ))


if __name__ == '__main__':
    main()
