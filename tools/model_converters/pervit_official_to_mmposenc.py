"""Convert an official PerViT checkpoint (juhongm999/pervit) to mmposenc's layout.

The official ``VisionTransformer`` (``model/pervit.py``) names its parameters
``conv_layers.*`` (stem), ``rpe_proj`` (shared w_r), ``blocks.{i}.{conv,norm1,attn,norm2,mlp,
res_path}`` with ``attn.{to_qkv,proj,activation.{conv1,gn1,conv2,gn2}}``, ``norm`` and
``head``. The output is an mmpretrain ``ImageClassifier`` state dict (``backbone.*`` for
:class:`mmposenc.models.PerViT` with ``out_indices=3``, ``head.fc.*`` for ``LinearClsHead``),
or the backbone alone with ``--backbone-only``.

Every source key must be mapped (else an UnmappedKeysError, a KeyError, lists the unmapped
ones) and, when an arch is given, the result is loaded strictly into a freshly built PerViT (a
clear error lists missing and unexpected keys).

Usage:
    python tools/model_converters/pervit_official_to_mmposenc.py \
        pervit_tiny.pth pervit-tiny_mmposenc.pth --arch tiny
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
    check_all_mapped, unwrap_state_dict)

# (official regex, mmposenc template); the first match wins
RULES = [
    (r'^conv_layers\.conv_layers\.(\d+)\.0\.(weight|bias)$', r'backbone.stem.\1.conv.\2'),
    (r'^conv_layers\.conv_layers\.(\d+)\.1\.(weight|bias|running_mean|running_var|'
     r'num_batches_tracked)$', r'backbone.stem.\1.bn.\2'),
    (r'^conv_layers\.conv1x1\.(weight|bias)$', r'backbone.stem_proj.\1'),
    (r'^rpe_proj\.(weight|bias)$', r'backbone.distance_embed.\1'),
    (r'^blocks\.(\d+)\.conv\.proj\.(weight|bias)$', r'backbone.blocks.\1.cpe.\2'),
    (r'^blocks\.(\d+)\.(norm1|norm2)\.(weight|bias)$', r'backbone.blocks.\1.\2.\3'),
    (r'^blocks\.(\d+)\.res_path\.(weight|bias)$', r'backbone.blocks.\1.shortcut.\2'),
    (r'^blocks\.(\d+)\.attn\.to_qkv\.(weight|bias)$', r'backbone.blocks.\1.attn.qkv.\2'),
    (r'^blocks\.(\d+)\.attn\.proj\.(weight|bias)$', r'backbone.blocks.\1.attn.proj.\2'),
    (r'^blocks\.(\d+)\.attn\.activation\.conv1\.(weight|bias)$',
     r'backbone.blocks.\1.attn.ppe.proj1.\2'),
    (r'^blocks\.(\d+)\.attn\.activation\.conv2\.(weight|bias)$',
     r'backbone.blocks.\1.attn.ppe.proj2.\2'),
    (r'^blocks\.(\d+)\.attn\.activation\.gn1\.(weight|bias)$',
     r'backbone.blocks.\1.attn.ppe.norm1.\2'),
    (r'^blocks\.(\d+)\.attn\.activation\.gn2\.(weight|bias)$',
     r'backbone.blocks.\1.attn.ppe.norm2.\2'),
    (r'^blocks\.(\d+)\.mlp\.(fc1|fc2)\.(weight|bias)$', r'backbone.blocks.\1.mlp.\2.\3'),
    (r'^norm\.(weight|bias)$', r'backbone.norm3.\1'),
    (r'^head\.(weight|bias)$', r'head.fc.\1'),
]
_COMPILED = [(re.compile(p), t) for p, t in RULES]


def convert(state_dict, backbone_only: bool = False) -> OrderedDict:
    """Official PerViT keys -> mmposenc keys.

    Args:
        state_dict (dict): Official state dict or a checkpoint holding one
            (``module.`` prefixes are stripped).
        backbone_only (bool): Drop the head and the ``backbone.`` prefix.

    Returns:
        OrderedDict: Converted state dict.

    Raises:
        UnmappedKeysError: Listing every source key no rule maps (a KeyError).
    """
    out, unmapped = OrderedDict(), []
    for key, value in unwrap_state_dict(state_dict).items():
        src = key[len('module.'):] if key.startswith('module.') else key
        for pattern, template in _COMPILED:
            if pattern.match(src):
                new = pattern.sub(template, src)
                break
        else:
            unmapped.append(key)
            continue
        if backbone_only:
            if not new.startswith('backbone.'):
                continue
            new = new[len('backbone.'):]
        out[new] = value
    check_all_mapped(unmapped, 'official PerViT', 'mmposenc PerViT')
    return out


def load_strict(backbone: torch.nn.Module, converted: OrderedDict) -> None:
    """Load the ``backbone.*`` part of a converted state dict strictly into ``backbone``.

    Raises:
        RuntimeError: Listing missing and unexpected keys.
    """
    sub = OrderedDict((k[len('backbone.'):], v) for k, v in converted.items()
                      if k.startswith('backbone.'))
    if not sub:  # --backbone-only output
        sub = converted
    result = backbone.load_state_dict(sub, strict=False)
    if result.missing_keys or result.unexpected_keys:
        raise RuntimeError(
            'converted PerViT checkpoint does not match mmposenc PerViT: '
            f'missing keys {result.missing_keys}, unexpected keys {result.unexpected_keys}')


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('src', help='official checkpoint (.pth)')
    parser.add_argument('dst', help='output checkpoint (.pth)')
    parser.add_argument('--arch', default=None,
                        help="verify by strict loading into PerViT(arch=...), e.g. 'tiny'")
    parser.add_argument('--backbone-only', action='store_true',
                        help='write the backbone alone, without the "backbone." prefix')
    args = parser.parse_args()

    from mmposenc.engine import load_local_checkpoint
    # weights_only=True; the official training checkpoints also hold the argparse arguments
    checkpoint = load_local_checkpoint(args.src, map_location='cpu',
                                       extra_safe_globals=[argparse.Namespace])
    converted = convert(checkpoint, backbone_only=args.backbone_only)
    if args.arch:
        from mmposenc.models.backbones import PerViT
        load_strict(PerViT(arch=args.arch, out_indices=3), converted)
        print(f'strict load into PerViT(arch={args.arch!r}) OK')
    torch.save({'state_dict': converted, 'meta': {'converted_from': 'juhongm999/pervit'}},
               args.dst)
    print(f'{len(converted)} tensors written to {args.dst}')


if __name__ == '__main__':
    main()
