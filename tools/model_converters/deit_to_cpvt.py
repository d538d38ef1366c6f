"""Convert an mmpretrain DeiT / ViT checkpoint to :class:`CPVT`.

CPVT keeps DeiT's parameter names (``patch_embed.projection``, ``layers.i.{ln1,attn,ln2,ffn}``,
``cls_token``, ``ln1``), so the conversion drops the learnable ``pos_embed`` (or keeps it for the
"PEG + LE" variant with ``--keep-pos-embed``) and adds the PEG weights, which DeiT does not have:
by default they are zero (``F(X) = 0``, the converted model starts as DeiT without its position
embedding), or freshly initialised with ``--init-peg random``. The result is loaded strictly into
``CPVT`` before saving; any DeiT key without a mapping is reported by name.

Usage::

    python tools/model_converters/deit_to_cpvt.py deit-tiny.pth cpvt-tiny-init.pth
"""
import argparse
import os.path as osp
import re
from collections import OrderedDict
import sys

import torch


# this checkout's mmposenc first (a tool of a clone imports the clone's, installed or not)
sys.path.insert(0, osp.dirname(osp.dirname(osp.dirname(osp.realpath(__file__)))))
from mmposenc.utils.checkpoint_conversion import (  # noqa: E402
    UnmappedKeysError, check_all_mapped, unwrap_state_dict)  # noqa: F401  (UnmappedKeysError)

BACKBONE_RE = [
    r'^patch_embed\.projection\.(weight|bias)$', r'^cls_token$', r'^pos_embed$',
    r'^layers\.\d+\.(ln1|ln2)\.(weight|bias)$', r'^layers\.\d+\.attn\.(qkv|proj)\.(weight|bias)$',
    r'^layers\.\d+\.ffn\.layers\.(0\.0|1)\.(weight|bias)$', r'^(ln1|ln2)\.(weight|bias)$',
]
EMBED_TO_ARCH = {192: 'tiny', 384: 'small', 768: 'base'}


def convert(state_dict, keep_pos_embed=False):
    """Map mmpretrain ``VisionTransformer`` weights (optionally ``backbone.``-prefixed
    classifier weights, whose ``head.*`` keys are kept unchanged) to CPVT.

    Returns:
        tuple[OrderedDict, OrderedDict]: backbone weights and head weights.

    Raises:
        UnmappedKeysError: listing every key that has no mapping.
    """
    backbone, head, unmapped = OrderedDict(), OrderedDict(), []
    for key, value in unwrap_state_dict(state_dict).items():
        if key.startswith('head.'):
            head[key] = value
            continue
        name = key[len('backbone.'):] if key.startswith('backbone.') else key
        if not any(re.match(p, name) for p in BACKBONE_RE):
            unmapped.append(key)
        elif name == 'pos_embed' and not keep_pos_embed:
            continue
        elif name == 'ln2.weight' or name == 'ln2.bias':
            continue  # mmpretrain's extra norm of 'avg_featmap' (CPVT-GAP pools after ln1)
        else:
            backbone[name] = value
    check_all_mapped(unmapped, 'DeiT', 'CPVT')
    return backbone, head


def build_cpvt(backbone_state, init_peg='zeros', **cpvt_kwargs):
    """Build a CPVT matching ``backbone_state``, add its PEG weights and load strictly.

    Args:
        backbone_state (dict): Output of :func:`convert`.
        init_peg (str): ``'zeros'`` (PEG starts as the identity) or ``'random'``
            (the official conv initialisation).
        **cpvt_kwargs: Extra CPVT arguments (``peg_positions``, ``out_type``, ...).

    Returns:
        tuple[CPVT, OrderedDict]: the loaded model and its full state dict.
    """
    from mmposenc.models.backbones import CPVT
    if 'arch' not in cpvt_kwargs:
        dims = backbone_state['patch_embed.projection.weight'].shape[0]
        if dims not in EMBED_TO_ARCH:
            raise ValueError(f'embed_dims {dims} is not a DeiT size {EMBED_TO_ARCH}; pass '
                             'arch=dict(embed_dims=..., num_layers=..., num_heads=..., '
                             'feedforward_channels=...)')
        num_layers = 1 + max(
            int(k.split('.')[1]) for k in backbone_state if k.startswith('layers.'))
        cpvt_kwargs['arch'] = dict(CPVT.arch_zoo[EMBED_TO_ARCH[dims]], num_layers=num_layers)
    cpvt_kwargs.setdefault('with_cls_token', 'cls_token' in backbone_state)
    if 'pos_embed' in backbone_state:
        cpvt_kwargs.setdefault('with_pos_embed', True)
        n = backbone_state['pos_embed'].shape[1] - int('cls_token' in backbone_state)
        cpvt_kwargs.setdefault('img_size', int(round(n**0.5)) * cpvt_kwargs.get('patch_size', 16))
    model = CPVT(**cpvt_kwargs)
    from mmposenc.engine import init_weights_quietly
    init_weights_quietly(model)  # no ~600 lines of per-parameter init INFO
    state = OrderedDict(backbone_state)
    for k, v in model.state_dict().items():
        if k.startswith('pegs.'):
            state[k] = torch.zeros_like(v) if init_peg == 'zeros' else v.clone()
    model.load_state_dict(state, strict=True)
    return model, state


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('src', help='mmpretrain DeiT/ViT checkpoint')
    parser.add_argument('dst', help='output checkpoint')
    parser.add_argument('--keep-pos-embed', action='store_true',
                        help='keep the learnable PE (PEG + LE variant)')
    parser.add_argument('--init-peg', choices=['zeros', 'random'], default='zeros')
    parser.add_argument('--peg-positions', type=int, nargs='+', default=[0])
    parser.add_argument('--classifier', action='store_true',
                        help='write backbone.-prefixed weights plus the head.* keys')
    args = parser.parse_args()
    from mmposenc.engine import load_local_checkpoint
    src = load_local_checkpoint(args.src, map_location='cpu')  # safe, mmengine files too
    backbone, head = convert(src, keep_pos_embed=args.keep_pos_embed)
    _, state = build_cpvt(backbone, args.init_peg, peg_positions=tuple(args.peg_positions))
    if args.classifier:
        state = OrderedDict([(f'backbone.{k}', v) for k, v in state.items()] +
                            list(head.items()))
    torch.save({'state_dict': state, 'meta': {'converted_from': args.src}}, args.dst)
    print(f'saved {len(state)} tensors to {args.dst}')


if __name__ == '__main__':
    main()
