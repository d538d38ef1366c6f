"""Convert a Twins-PCPVT checkpoint (official / timm, or mmpretrain's) to :class:`PVTPEG`.

Twins-PCPVT-S/B/L are PVT-Small/Medium/Large with PEG and GAP, i.e. ``PVTPEG(arch='small' |
'medium' | 'large')``. Two source formats are recognised from their keys:

- official Twins (Meituan-AutoML/Twins ``gvt.py``) and timm ``twins_pcpvt_*``:
  ``blocks.i.j.mlp.fc1`` -> ``stages.i.j.ffn.layers.0.0``, ``pos_block.i.proj.0`` ->
  ``pegs.i.proj.0``, ``patch_embeds.i.proj`` -> ``patch_embeds.i.projection``, ...;
- mmpretrain's ``PCPVT`` (the ``twins-pcpvt-*`` checkpoints OpenMMLab users download, usually
  an ``ImageClassifier`` with ``backbone.`` keys and a ``head.fc``): its blocks already use our
  names (``stages.i.j.*``, ``patch_embeds.i.projection``); ``position_encodings.i.proj`` ->
  ``pegs.i.proj.0`` and ``norm_after_stage3`` (the last stage's norm) -> ``norm``.

The result is loaded strictly into a freshly built ``PVTPEG`` and saved; any source key the
mapping does not know is reported by name. The source is loaded safely
(``weights_only=True``, see :mod:`mmposenc.engine.checkpoint`).

Usage::

    python tools/model_converters/twins_pcpvt_to_pvtpeg.py pcpvt_small.pth pvtpeg-s.pth
    python tools/model_converters/twins_pcpvt_to_pvtpeg.py \
        twins-pcpvt-small_3rdparty_8xb128_in1k.pth pvtpeg-s.pth  # mmpretrain's
    # an mmpretrain classifier checkpoint of PVTPEG (backbone. prefix, head.fc.*):
    python tools/model_converters/twins_pcpvt_to_pvtpeg.py pcpvt_small.pth out.pth --classifier
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

#: (source regex, target template) pairs; the first match wins.
KEY_MAP = [
    (r'^patch_embeds\.(\d+)\.proj\.(weight|bias)$', r'patch_embeds.\1.projection.\2'),
    (r'^patch_embeds\.(\d+)\.norm\.(weight|bias)$', r'patch_embeds.\1.norm.\2'),
    (r'^blocks\.(\d+)\.(\d+)\.(norm1|norm2)\.(weight|bias)$', r'stages.\1.\2.\3.\4'),
    (r'^blocks\.(\d+)\.(\d+)\.attn\.(q|kv|proj|sr|norm)\.(weight|bias)$',
     r'stages.\1.\2.attn.\3.\4'),
    (r'^blocks\.(\d+)\.(\d+)\.mlp\.fc1\.(weight|bias)$', r'stages.\1.\2.ffn.layers.0.0.\3'),
    (r'^blocks\.(\d+)\.(\d+)\.mlp\.fc2\.(weight|bias)$', r'stages.\1.\2.ffn.layers.1.\3'),
    (r'^pos_block\.(\d+)\.proj\.0\.(weight|bias)$', r'pegs.\1.proj.0.\2'),
    (r'^norm\.(weight|bias)$', r'norm.\1'),
]
HEAD_RE = re.compile(r'^head\.(weight|bias)$')

#: mmpretrain ``PCPVT`` (keys without the ``backbone.`` prefix): (source regex, target).
MMPRETRAIN_KEY_MAP = [
    (r'^patch_embeds\.(\d+)\.(projection|norm)\.(weight|bias)$', r'patch_embeds.\1.\2.\3'),
    (r'^stages\.(\d+)\.(\d+)\.(norm1|norm2)\.(weight|bias)$', r'stages.\1.\2.\3.\4'),
    (r'^stages\.(\d+)\.(\d+)\.attn\.(q|kv|proj|sr|norm)\.(weight|bias)$',
     r'stages.\1.\2.attn.\3.\4'),
    (r'^stages\.(\d+)\.(\d+)\.ffn\.layers\.(0\.0|1)\.(weight|bias)$',
     r'stages.\1.\2.ffn.layers.\3.\4'),
    (r'^position_encodings\.(\d+)\.proj\.(weight|bias)$', r'pegs.\1.proj.0.\2'),
]
MMPRETRAIN_HEAD_RE = re.compile(r'^head\.fc\.(weight|bias)$')
MMPRETRAIN_MARKERS = ('position_encodings.', 'stages.', 'norm_after_stage')

#: Twins-PCPVT size -> PVTPEG arch (by the depths of the stages).
DEPTHS_TO_ARCH = {(2, 2, 2, 2): 'tiny', (3, 4, 6, 3): 'small', (3, 4, 18, 3): 'medium',
                  (3, 8, 27, 3): 'large'}


def source_format(state_dict):
    """``'mmpretrain'`` for mmpretrain ``PCPVT`` weights, else ``'official'`` (Twins / timm)."""
    keys = [k[len('backbone.'):] if k.startswith('backbone.') else k
            for k in unwrap_state_dict(state_dict)]
    return 'mmpretrain' if any(k.startswith(MMPRETRAIN_MARKERS) for k in keys) else 'official'


def _rename(state_dict, key_map, head_re, with_head, source):
    """Rename every key by the first ``(regex, template)`` of ``key_map`` that matches;
    classifier keys (``head_re``, its group 1 the parameter name) become ``head.fc.*`` when
    ``with_head``, else are dropped. Raises :class:`UnmappedKeysError` naming ``source`` and
    every key without a mapping."""
    out, unmapped = OrderedDict(), []
    for key, value in state_dict.items():
        head = head_re.match(key)
        if head:
            if with_head:
                out[f'head.fc.{head.group(1)}'] = value
            continue
        for pattern, target in key_map:
            if re.match(pattern, key):
                out[re.sub(pattern, target, key)] = value
                break
        else:
            unmapped.append(key)
    check_all_mapped(unmapped, source, 'PVTPEG')
    return out


def _convert_mmpretrain(state_dict, with_head):
    state = OrderedDict((k[len('backbone.'):] if k.startswith('backbone.') else k, v)
                        for k, v in state_dict.items())
    stages = [int(m.group(1)) for k in state for m in [re.match(r'^stages\.(\d+)\.', k)] if m]
    # PVTPEG normalises the last stage only: its norm_after_stage<i> becomes norm
    last_norm = [(rf'^norm_after_stage0*{max(stages)}\.(weight|bias)$', r'norm.\1')
                 ] if stages else []
    return _rename(state, last_norm + MMPRETRAIN_KEY_MAP, MMPRETRAIN_HEAD_RE, with_head,
                   'mmpretrain PCPVT')


def convert(state_dict, with_head=False):
    """Rename Twins-PCPVT keys to PVTPEG keys.

    Args:
        state_dict (dict): Official Twins or timm ``twins_pcpvt_*`` weights, or mmpretrain
            ``PCPVT`` weights (a backbone or a ``backbone.``-prefixed ``ImageClassifier``
            state dict); the format is recognised by :func:`source_format`.
        with_head (bool): Keep the classifier as ``head.fc.*`` (mmpretrain
            ``LinearClsHead``) instead of dropping it.

    Returns:
        OrderedDict: PVTPEG weights (plus ``head.fc.*`` when ``with_head``).

    Raises:
        UnmappedKeysError: listing every source key that has no mapping.
    """
    if source_format(state_dict) == 'mmpretrain':
        return _convert_mmpretrain(unwrap_state_dict(state_dict), with_head)
    return _rename(unwrap_state_dict(state_dict), KEY_MAP, HEAD_RE, with_head, 'Twins-PCPVT')


def infer_arch(state_dict):
    """The PVTPEG arch of converted weights, from the blocks per stage."""
    depths = []
    for i in range(4):
        ids = {int(m.group(1)) for k in state_dict
               for m in [re.match(rf'^stages\.{i}\.(\d+)\.', k)] if m}
        depths.append(max(ids) + 1 if ids else 0)
    if tuple(depths) not in DEPTHS_TO_ARCH:
        raise ValueError(f'stage depths {depths} match no PVTPEG arch {DEPTHS_TO_ARCH}')
    return DEPTHS_TO_ARCH[tuple(depths)]


def load_strict(backbone_state, arch=None):
    """Build ``PVTPEG`` and load the converted weights with ``strict=True``."""
    from mmposenc.models.backbones import PVTPEG
    model = PVTPEG(arch or infer_arch(backbone_state), out_indices=(0, 1, 2, 3))
    model.load_state_dict(backbone_state, strict=True)
    return model


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('src', help='Twins/timm twins_pcpvt checkpoint')
    parser.add_argument('dst', help='output checkpoint')
    parser.add_argument('--classifier', action='store_true',
                        help='write an mmpretrain ImageClassifier checkpoint (backbone. '
                        'prefix and head.fc.*) instead of backbone-only weights')
    args = parser.parse_args()
    from mmposenc.engine import init_info_silenced, load_local_checkpoint
    src = load_local_checkpoint(args.src, map_location='cpu')
    state = convert(src, with_head=args.classifier)
    backbone = {k: v for k, v in state.items() if not k.startswith('head.')}
    with init_info_silenced():
        load_strict(backbone)
    if args.classifier:
        state = OrderedDict((k if k.startswith('head.') else f'backbone.{k}', v)
                            for k, v in state.items())
    torch.save({'state_dict': state, 'meta': {'converted_from': args.src}}, args.dst)
    print(f'saved {len(state)} tensors ({source_format(src)} PCPVT, PVTPEG arch '
          f'{infer_arch(backbone)!r}) to {args.dst}')


if __name__ == '__main__':
    main()
