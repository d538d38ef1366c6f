"""Malformed inputs and configs: every one raises a specific exception with a clear message.

Each case is ``(id, thunk, exception type, regex the message must match)``; none may crash
obscurely (a bare RuntimeError from deep inside torch) or return a silently wrong shape.
"""
import importlib.util
import os
import os.path as osp
import pickle
import subprocess
import sys

import cv2
import pytest
import torch

from conftest import REPO_ROOT, _shared_dir
from forked_runs import run_in_process

from mmposenc.models.backbones import CPVT, PEViT, PVTPEG, PerViT, SwinPEG
from mmposenc.models.layers import (CAPE1d, CAPE2d, MPA, PEG, MaskedPEG,
                                    MultiLevelMaskedPEG)
from mmposenc.registry import MODELS

TINY_VIT = dict(embed_dims=16, num_layers=2, num_heads=2, feedforward_channels=32)
TINY_PVT = dict(embed_dims=[16, 32], num_heads=[1, 2], mlp_ratios=[2, 2], depths=[1, 1],
                sr_ratios=[2, 1])
TINY_PERVIT = dict(embed_dims=[16, 16], depths=[1, 1], num_heads=2, stem_channels=[8, 16])
TINY_SWIN = dict(embed_dims=16, depths=[1, 1], num_heads=[1, 2])


def _tool(name):
    path = osp.join(REPO_ROOT, 'tools', 'model_converters', f'{name}.py')
    spec = importlib.util.spec_from_file_location(f'reliability_{name}', path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def t(*shape):
    return torch.randn(*shape)


def call(module_factory, *args, **kwargs):
    """A thunk building the module, then calling it (so construction errors count too)."""
    return lambda: module_factory()(*args, **kwargs)


CASES = []


def case(id, exc, match, marks=()):
    def deco(fn):
        CASES.append(pytest.param(fn, exc, match, id=id, marks=marks))
        return fn
    return deco


def add(id, fn, exc, match):
    CASES.append(pytest.param(fn, exc, match, id=id))


# ----------------------------------------------------------------------------- PEG
for k in (2, 4, 0, -3, 3.0, '3'):
    add(f'peg-kernel-{k!r}', lambda k=k: PEG(8, kernel_size=k), ValueError,
        'kernel_size must be an odd int >= 1')
add('peg-no-padding-grid-too-small', call(lambda: PEG(8, padding='none'), t(1, 4, 8), (2, 2)),
    ValueError, r"padding='none' shrinks the grid by 2")
for c in (0, -1, 2.5, None):
    add(f'peg-in-channels-{c!r}', lambda c=c: PEG(c), ValueError,
        'in_channels must be a positive int')
add('peg-extra-tokens-neg', lambda: PEG(8, num_extra_tokens=-1), ValueError,
    'num_extra_tokens must be an int >= 0')
add('peg-conv-type', lambda: PEG(8, conv_type='grouped'), ValueError, 'conv_type must be one of')
add('peg-num-layers-0', lambda: PEG(8, num_layers=0), ValueError, 'num_layers must be an int >= 1')
add('peg-padding', lambda: PEG(8, padding='mirror'), ValueError, 'padding must be one of')
add('peg-stride-0', lambda: PEG(8, stride=0), ValueError, 'stride must be an int >= 1')
add('peg-residual-stride', lambda: PEG(8, stride=2, residual=True), ValueError,
    'residual=True needs stride=1')
add('peg-padding-reflect', lambda: PEG(8, padding='reflect'), ValueError,
    r"padding must be one of \('zeros', 'none'\)")
add('peg-stride-padding', lambda: PEG(8, stride=2, padding='none'), ValueError,
    "strided PEG needs padding='zeros'")
add('peg-tokens-2d', call(lambda: PEG(8), t(2, 8), (2, 4)), ValueError,
    r'tokens of shape \(B, N, C\)')
add('peg-tokens-4d', call(lambda: PEG(8), t(1, 8, 2, 4), (2, 4)), ValueError,
    r'tokens of shape \(B, N, C\)')
add('peg-wrong-channels', call(lambda: PEG(8), t(2, 8, 6), (2, 4)), ValueError,
    r'PEG expects 8 channels')
add('peg-too-few-tokens', call(lambda: PEG(8), t(2, 7, 8), (2, 4)), ValueError,
    r'= 8 tokens, got 7')
add('peg-too-many-tokens', call(lambda: PEG(8), t(2, 9, 8), (2, 4)), ValueError,
    r'= 8 tokens, got 9')
add('peg-missing-cls', call(lambda: PEG(8, num_extra_tokens=1), t(2, 8, 8), (2, 4)), ValueError,
    r'1 \+ 2 \* 4 = 9 tokens, got 8')
add('peg-transposed-hw', call(lambda: PEG(8), t(2, 12, 8), (4, 4)), ValueError,
    r'= 16 tokens, got 12')
add('peg-hw-3d', call(lambda: PEG(8), t(2, 8, 8), (2, 2, 2)), ValueError,
    r'hw_shape must be \(H, W\)')
add('peg-hw-zero', call(lambda: PEG(8), t(2, 0, 8), (0, 4)), ValueError,
    r'hw_shape must be \(H, W\) with H, W >= 1')

# ----------------------------------------------------------------------------- MaskedPEG
for k in (2, 4, 6):
    add(f'maskedpeg-kernel-{k}', lambda k=k: MaskedPEG(8, kernel_size=k), ValueError,
        'kernel_size must be odd')
add('maskedpeg-ln-norm', lambda: MaskedPEG(8, norm_cfg=dict(type='LN')), ValueError,
    'norm_cfg must build a')
add('maskedpeg-tokens-2d', call(lambda: MaskedPEG(8), t(8, 8), (2, 4)), ValueError,
    'expected batch-first tokens')
add('maskedpeg-wrong-count', call(lambda: MaskedPEG(8), t(2, 9, 8), (2, 4)), ValueError,
    r'hw_shape \(2, 4\) gives 8 tokens but the input has 9')
add('maskedpeg-wrong-channels', call(lambda: MaskedPEG(8), t(2, 8, 4), (2, 4)), ValueError,
    'expected 8 channels, got 4')
add('maskedpeg-hw-1d', call(lambda: MaskedPEG(8), t(2, 8, 8), (8, )), ValueError,
    r'hw_shape must be \(h, w\)')
add('maskedpeg-mask-batch', call(lambda: MaskedPEG(8), t(2, 8, 8), (2, 4),
                                 torch.zeros(3, 8, dtype=torch.bool)), ValueError,
    r'key_padding_mask of shape \(3, 8\) does not match')
add('maskedpeg-mask-tokens', call(lambda: MaskedPEG(8), t(2, 8, 8), (2, 4),
                                  torch.zeros(2, 7, dtype=torch.bool)), ValueError,
    r'key_padding_mask of shape \(2, 7\) does not match')
add('maskedpeg-mask-grid', call(lambda: MaskedPEG(8), t(2, 8, 8), (2, 4),
                                torch.zeros(2, 4, 2, dtype=torch.bool)), ValueError,
    r'expected \(bs, h, w\) = \(2, 2, 4\)')
add('maskedpeg-mask-1d', call(lambda: MaskedPEG(8), t(2, 8, 8), (2, 4),
                              torch.zeros(16, dtype=torch.bool)), ValueError,
    r'key_padding_mask of shape \(16,\) does not match')
add('maskedpeg-mask-float-values', call(lambda: MaskedPEG(8), t(2, 8, 8), (2, 4),
                                        torch.full((2, 8), 0.5)), ValueError,
    'key_padding_mask must be a bool tensor .* or hold only 0 and 1')
add('maskedpeg-mask-int-values', call(lambda: MaskedPEG(8), t(2, 8, 8), (2, 4),
                                      torch.full((2, 8), 2)), ValueError,
    'key_padding_mask must be a bool tensor')
add('maskedpeg-all-padded', call(lambda: MaskedPEG(8), t(2, 8, 8), (2, 4),
                                 torch.ones(2, 8, dtype=torch.bool)), ValueError,
    r'level 0 \(2x4 grid\) has 0 valid cell\(s\).*needs at least 2')

# ------------------------------------------------------------------- MultiLevelMaskedPEG
add('mlpeg-levels', call(lambda: MultiLevelMaskedPEG(8, num_levels=2), t(2, 10, 8),
                         [(2, 4), (1, 2), (0, 0)]), ValueError,
    r'got 3 levels in spatial_shapes, expected num_levels=2')
add('mlpeg-token-sum', call(lambda: MultiLevelMaskedPEG(8, num_levels=2), t(2, 11, 8),
                            [(2, 4), (1, 2)]), ValueError, r'give 10 tokens but the input')
add('mlpeg-shapes-not-pairs', call(lambda: MultiLevelMaskedPEG(8, num_levels=2), t(2, 10, 8),
                                   [(2, 4, 1), (1, 2, 1)]), ValueError,
    r'spatial_shapes must be a list of \(h, w\)')
add('mlpeg-start-index', call(lambda: MultiLevelMaskedPEG(8, num_levels=2), t(2, 10, 8),
                              [(2, 4), (1, 2)], torch.tensor([0, 7])), ValueError,
    r'level_start_index .* does not match spatial_shapes')
add('mlpeg-mask-shape', call(lambda: MultiLevelMaskedPEG(8, num_levels=2), t(2, 10, 8),
                             [(2, 4), (1, 2)], None, torch.zeros(2, 9, dtype=torch.bool)),
    ValueError, r'key_padding_mask of shape \(2, 9\)')
add('mlpeg-kernel-even', lambda: MultiLevelMaskedPEG(8, kernel_size=4), ValueError,
    'kernel_size must be odd')

# ----------------------------------------------------------------------------- CAPE
for c in (7, 0, -2, 8.0, '8'):
    add(f'cape1d-dims-{c!r}', lambda c=c: CAPE1d(c), ValueError,
        'embed_dims must be a positive even int')
add('cape1d-auto-local', lambda: CAPE1d(8, max_local_shift='auto'), ValueError,
    "CAPE1d needs a number for max_local_shift")
add('cape1d-neg-shift', lambda: CAPE1d(8, max_global_shift=-1.0), ValueError,
    'max_global_shift must be >= 0')
add('cape1d-scaling-lt-1', lambda: CAPE1d(8, max_global_scaling=0.5), ValueError,
    'max_global_scaling must be >= 1')
add('cape1d-wrong-channels', call(lambda: CAPE1d(8), t(2, 5, 6)), ValueError,
    r'CAPE1d expects \(B, T, 8\) tokens')
add('cape1d-tokens-2d', call(lambda: CAPE1d(8), t(5, 8)), ValueError,
    r'CAPE1d expects \(B, T, 8\) tokens')
add('cape1d-mask-shape', call(lambda: CAPE1d(8), t(2, 5, 8), torch.zeros(2, 4, dtype=torch.bool)),
    ValueError, r'padding_mask must have shape \(2, 5\)')
add('cape2d-odd-dims', lambda: CAPE2d(7), ValueError, 'embed_dims must be even for CAPE2d')
add('cape2d-neg-local', lambda: CAPE2d(8, max_local_shift=-0.1), ValueError,
    "max_local_shift must be >= 0 or 'auto'")
add('cape2d-hw-zero', call(lambda: CAPE2d(8), (0, 3), 2), ValueError,
    r'hw_shape must be \(H, W\) with H, W >= 1')
add('cape2d-mask-shape', call(lambda: CAPE2d(8), (2, 3), 2, torch.zeros(2, 5, dtype=torch.bool)),
    ValueError, r'padding_mask must have shape \(B, 6\)')
add('cape2d-tokens', lambda: CAPE2d(8, num_heads=2).eval().add_to_tokens(t(2, 5, 8), (2, 3)),
    ValueError, r'expects num_extra_tokens \+ H \* W = 0 \+ 2 \* 3 = 6 tokens, got 5')

# ----------------------------------------------------------------------------- MPA / PPE
add('mpa-heads', lambda: MPA(10, num_heads=3), ValueError, 'must be divisible by num_heads')
add('mpa-tokens', call(lambda: MPA(8, num_heads=2), t(2, 7, 8), (2, 4)), ValueError,
    'got 7 tokens, expected 0 extra')
add('mpa-tokens-cls', call(lambda: MPA(8, num_heads=2, num_extra_tokens=1), t(2, 8, 8), (2, 4)),
    ValueError, 'got 8 tokens, expected 1 extra')
add('ppe-kernel-even', lambda: MODELS.build(dict(type='PeripheralPositionEncoding', num_heads=2,
                                                 kernel_size=4)),
    ValueError, 'kernel_size must be a positive odd number')
add('ppe-heads-0', lambda: MODELS.build(dict(type='PeripheralPositionEncoding', num_heads=0)),
    ValueError, 'num_heads must be >= 1')
add('ppe-init', lambda: MODELS.build(dict(type='PeripheralPositionEncoding', num_heads=2,
                                          init='gaussian')), ValueError, 'init must be one of')
add('ppe-hw', call(lambda: MODELS.build(dict(type='PeripheralPositionEncoding', num_heads=2)),
                   (0, 4)), ValueError, r'hw_shape must be \(H, W\) with H, W >= 1')
add('ppe-embed-type', lambda: MODELS.build(dict(type='PeripheralPositionEncoding', num_heads=2,
                                                distance_embed=torch.nn.Linear(1, 4))),
    TypeError, 'distance_embed must be a PeripheralDistanceEmbedding')
add('pde-init', lambda: MODELS.build(dict(type='PeripheralDistanceEmbedding', init='x')),
    ValueError, 'init must be one of')

# ----------------------------------------------- BasePositionEncoding types (PEViT plugins)
PE_TYPES = ['CoPE', 'DINOv3RoPE', 'LearnableAbsolutePE', 'NoPositionEncoding',
            'PEGPositionEncoding', 'PeripheralPE', 'RelativePositionBias2d', 'RoPE2d', 'RoPEMixed',
            'SaPE2', 'SinCos2dPE']
for name in PE_TYPES:
    add(f'{name}-heads-not-dividing', lambda name=name: MODELS.build(
        dict(type=name, embed_dims=10, num_heads=3)), ValueError,
        'num_heads must be a positive int dividing embed_dims')
    add(f'{name}-embed-0', lambda name=name: MODELS.build(dict(type=name, embed_dims=0)),
        ValueError, 'embed_dims must be a positive int')
add('rope-mixed-head-dims', lambda: MODELS.build(dict(type='RoPEMixed', embed_dims=12,
                                                     num_heads=2)),
    ValueError, 'RoPEMixed: embed_dims / num_heads must be divisible by 4')
add('rope-dinov3-rescale', lambda: MODELS.build(dict(type='DINOv3RoPE', embed_dims=8,
                                                     rescale_coords=0.5)),
    ValueError, 'rescale_coords is a bound >= 1')
add('cope-npos', lambda: MODELS.build(dict(type='CoPE', embed_dims=8, npos_max=1)), ValueError,
    'npos_max must be an int >= 2')
add('rpb-max-distance', lambda: MODELS.build(dict(type='RelativePositionBias2d', embed_dims=8,
                                                  max_distance=0)),
    ValueError, 'max_distance must be a positive int')
add('abs-grid', lambda: MODELS.build(dict(type='LearnableAbsolutePE', embed_dims=8,
                                          grid_size=0)), ValueError, 'grid_size must be')
add('pegpe-layer-index', lambda: MODELS.build(dict(type='PEGPositionEncoding', embed_dims=8,
                                                   num_layers=2, layer_indices=(2, ))),
    ValueError, 'layer index 2 out of range for 2 layers')
add('pegpe-no-padding', lambda: MODELS.build(dict(type='PEGPositionEncoding', embed_dims=8,
                                                  peg_cfg=dict(padding='none'))),
    ValueError, 'PEGPositionEncoding needs PEGs that keep the token grid')
add('pegpe-layer-dup', lambda: MODELS.build(dict(type='PEGPositionEncoding', embed_dims=8,
                                                 num_layers=2, layer_indices=(0, 0))),
    ValueError, 'layer_indices must be distinct')
add('peripheralpe-init', lambda: MODELS.build(dict(type='PeripheralPE', embed_dims=8,
                                                   init='x')), ValueError, 'init must be one of')
add('sincos-tokens', lambda: MODELS.build(dict(type='SinCos2dPE', embed_dims=8)).add_to_tokens(
    t(1, 5, 8), (2, 3)), ValueError, r'= 6 tokens, got 5')
add('abs-tokens', lambda: MODELS.build(dict(type='LearnableAbsolutePE', embed_dims=8,
                                            grid_size=2)).add_to_tokens(t(1, 5, 8), (2, 3)),
    ValueError, r'= 6 tokens, got 5')

# ----------------------------------------------------------------------------- CPVT
add('cpvt-arch-unknown', lambda: CPVT('huge'), ValueError, 'Arch huge is not in default archs')
add('cpvt-arch-missing-keys', lambda: CPVT(dict(embed_dims=16)), ValueError,
    'Custom arch needs a dict with keys')
add('cpvt-arch-list', lambda: CPVT([16, 2]), ValueError, 'Custom arch needs a dict with keys')
add('cpvt-out-type', lambda: CPVT(TINY_VIT, out_type='pooled'), ValueError,
    'out_type must be one of')
add('cpvt-cls-without-token', lambda: CPVT(TINY_VIT, with_cls_token=False), ValueError,
    "out_type='cls_token' needs with_cls_token=True")
add('cpvt-out-index', lambda: CPVT(TINY_VIT, out_indices=(2, )), ValueError,
    r'out_indices must be in \[0, 2\), got 2')
add('cpvt-out-index-neg', lambda: CPVT(TINY_VIT, out_indices=(-3, )), ValueError,
    r'out_indices must be in \[0, 2\)')
add('cpvt-peg-position', lambda: CPVT(TINY_VIT, peg_positions=(2, )), ValueError,
    r'peg_positions must be in \[-1, 1\], got 2')
add('cpvt-peg-kernel', lambda: CPVT(TINY_VIT, peg_cfg=dict(kernel_size=4)), ValueError,
    'kernel_size must be an odd int >= 1')
add('cpvt-heads', lambda: CPVT(dict(TINY_VIT, num_heads=3)), ValueError,
    'must be divisible by num_heads')
add('cpvt-input-channels', call(lambda: CPVT(TINY_VIT, img_size=16, patch_size=8),
                                t(1, 1, 16, 16)), RuntimeError,
    'expected input.* to have 3 channels, but got [14] channels')
# a single image without the batch axis: mmcv's PatchEmbed used to fail with an IndexError
for name, factory in [('cpvt', lambda: CPVT(TINY_VIT, img_size=16, patch_size=8)),
                      ('pevit', lambda: PEViT(TINY_VIT, img_size=16, patch_size=8)),
                      ('pvt', lambda: PVTPEG(TINY_PVT, out_indices=(1, ))),
                      ('swin', lambda: SwinPEG(TINY_SWIN, window_size=4, out_indices=(1, )))]:
    for shape in [(3, 16, 16), (1, 1, 3, 16, 16)]:
        add(f'{name}-input-{len(shape)}d', call(factory, t(*shape)), ValueError,
            r'expects images of shape \(B, C, H, W\), got \(' + str(shape[0]))
add('pervit-input-3d', call(lambda: PerViT(TINY_PERVIT, out_indices=(1, )), t(3, 32, 32)),
    ValueError, 'expected 4D input')
add('pervit-input-too-small', call(lambda: PerViT(TINY_PERVIT, out_indices=(1, )),
                                   t(1, 3, 2, 2)), ValueError,
    'Expected more than 1 value per channel when training')

# ----------------------------------------------------------------------------- PVTPEG
add('pvt-arch-unknown', lambda: PVTPEG('mega'), ValueError, 'Arch mega is not in default archs')
add('pvt-arch-keys', lambda: PVTPEG(dict(embed_dims=[16])), ValueError,
    'Custom arch needs a dict with keys')
add('pvt-arch-lengths', lambda: PVTPEG(dict(TINY_PVT, depths=[1, 1, 1])), ValueError,
    'per-stage lists of arch must have the same length')
add('pvt-out-index', lambda: PVTPEG(TINY_PVT, out_indices=(2, )), ValueError,
    r'out_indices must be in \[0, 2\), got 2')
add('pvt-heads', lambda: PVTPEG(dict(TINY_PVT, num_heads=[3, 2]), out_indices=(1, )), ValueError,
    'must be divisible by num_heads')
add('pvt-peg-kernel', lambda: PVTPEG(TINY_PVT, peg_cfg=dict(kernel_size=2), out_indices=(1, )), ValueError,
    'kernel_size must be an odd int >= 1')
add('pvt-input-channels', call(lambda: PVTPEG(TINY_PVT, out_indices=(1, )), t(1, 4, 32, 32)),
    RuntimeError,
    'expected input.* to have 3 channels, but got [14] channels')

# ----------------------------------------------------------------------------- SwinPEG
add('swin-arch-unknown', lambda: SwinPEG('xl'), ValueError, 'Arch xl is not in default archs')
add('swin-arch-keys', lambda: SwinPEG(dict(embed_dims=16)), ValueError,
    'Custom arch needs a dict with keys')
add('swin-arch-lengths', lambda: SwinPEG(dict(TINY_SWIN, num_heads=[1])), ValueError,
    'depths and num_heads must have the same length')
add('swin-out-index', lambda: SwinPEG(TINY_SWIN, out_indices=(5, )), ValueError,
    r'out_indices must be in \[0, 2\), got 5')
add('swin-peg-kernel', lambda: SwinPEG(TINY_SWIN, peg_cfg=dict(kernel_size=4), out_indices=(1, )), ValueError,
    'kernel_size must be an odd int >= 1')
add('swin-input-channels', call(lambda: SwinPEG(TINY_SWIN, window_size=4, out_indices=(1, )),
                                t(1, 1, 32, 32)), RuntimeError,
    'expected input.* to have 3 channels, but got [14] channels')

# ----------------------------------------------------------------------------- PerViT
add('pervit-arch-unknown', lambda: PerViT('giant'), ValueError,
    'Arch giant is not in default archs')
add('pervit-arch-keys', lambda: PerViT(dict(embed_dims=[16])), ValueError,
    'Custom arch needs a dict with keys')
add('pervit-arch-lengths', lambda: PerViT(dict(TINY_PERVIT, depths=[1, 1, 1])), ValueError,
    'embed_dims and depths must have the same length')
add('pervit-stem', lambda: PerViT(dict(TINY_PERVIT, stem_channels=[8, 12])), ValueError,
    'the last stem channel must equal embed_dims')
add('pervit-ppe-init', lambda: PerViT(TINY_PERVIT, ppe_init='uniform'), ValueError,
    'ppe_init must be one of')
add('pervit-out-index', lambda: PerViT(TINY_PERVIT, out_indices=(2, )), ValueError,
    'out index 2 out of range for 2 stages')
add('pervit-featmap-scales-len', lambda: PerViT(TINY_PERVIT, out_indices=(0, 1),
                                                featmap_scales=[1]), ValueError,
    'featmap_scales needs one scale per out index')
add('pervit-featmap-scale', lambda: PerViT(TINY_PERVIT, out_indices=(0, ),
                                           featmap_scales=[3]), ValueError,
    'featmap scale must be one of')
add('pervit-input-channels', call(lambda: PerViT(TINY_PERVIT, out_indices=(1, )),
                                  t(1, 1, 32, 32)), RuntimeError,
    'expected input.* to have 3 channels, but got [14] channels')

# ----------------------------------------------------------------------------- PEViT
add('pevit-arch-unknown', lambda: PEViT('colossal'), ValueError,
    'Arch colossal is not in default archs')
add('pevit-arch-keys', lambda: PEViT(dict(embed_dims=16)), ValueError,
    'Custom arch needs a dict with keys')
add('pevit-out-type', lambda: PEViT(TINY_VIT, out_type='pooled'), ValueError,
    'Unsupported out_type')
add('pevit-cls-without-token', lambda: PEViT(TINY_VIT, with_cls_token=False), ValueError,
    'out_type="cls_token" needs with_cls_token=True')
add('pevit-empty-pe', lambda: PEViT(TINY_VIT, pos_encoding=[]), ValueError,
    'pos_encoding needs at least one config')
add('pevit-unknown-pe', lambda: PEViT(TINY_VIT, pos_encoding=dict(type='NoSuchPE')), KeyError,
    "position encoding '(mmposenc\\.)?NoSuchPE' is not registered")
add('pevit-not-a-pe', lambda: PEViT(TINY_VIT, pos_encoding=dict(type='CAPE1d')), TypeError,
    'is not a BasePositionEncoding')
add('pevit-out-index', lambda: PEViT(TINY_VIT, out_indices=(4, )), ValueError,
    'out index 4 out of range for 2 layers')
add('pevit-pe-heads', lambda: PEViT(dict(TINY_VIT, num_heads=3)), ValueError,
    'num_heads must be a positive int dividing embed_dims')
add('pevit-input-channels', call(lambda: PEViT(TINY_VIT, img_size=16, patch_size=8),
                                 t(1, 1, 16, 16)), RuntimeError,
    'expected input.* to have 3 channels, but got [14] channels')

# ----------------------------------------------------------------------------- registry
for name in ('NoSuchBackbone', 'mmposenc.PEGG', 'mmposenc.cpvt'):
    add(f'registry-unknown-{name}', lambda name=name: MODELS.build(dict(type=name)), KeyError,
        'is not in the')
add('registry-cpvt-bad-kwarg', lambda: MODELS.build(dict(type='CPVT', depth=2)), TypeError,
    "unexpected keyword argument 'depth'")
add('registry-peg-missing-arg', lambda: MODELS.build(dict(type='PEG')), TypeError,
    "missing 1 required positional argument: 'in_channels'")
# a misspelt type names the closest registered ones, through our registry and through a
# host's (a config with default_scope='mmdet' builds `type='mmposenc.X'` in mmdet's registry)
add('registry-misspelt-PGE', lambda: MODELS.build(dict(type='mmposenc.PGE', in_channels=8)),
    KeyError, r"mmposenc\.PGE is not in the mmposenc::model registry; closest registered "
    r"names: 'mmposenc\.PEG'")
add('registry-misspelt-unscoped', lambda: MODELS.build(dict(type='MaskedPGE', in_channels=8)),
    KeyError, r"MaskedPGE is not in the .*closest registered names: 'mmposenc\.MaskedPEG'")
add('registry-misspelt-case', lambda: MODELS.build(dict(type='mmposenc.pvtpeg')), KeyError,
    r"closest registered names: 'mmposenc\.PVTPEG'")


def _host_build(host, cfg):
    import importlib

    from mmengine.registry import DefaultScope
    with DefaultScope.overwrite_default_scope(host):
        return importlib.import_module(f'{host}.registry').MODELS.build(cfg)


for host in ('mmdet', 'mmseg', 'mmpretrain'):
    add(f'registry-misspelt-under-{host}',
        lambda host=host: _host_build(host, dict(type='mmposenc.SwinPGE')), KeyError,
        r"mmposenc\.SwinPGE is not in the mmposenc::model registry; closest registered "
        r"names: 'mmposenc\.SwinPEG'")


# ----------------------------------------------------------------------------- converters
def _deit_with_extra():
    return {'patch_embed.projection.weight': t(16, 3, 16, 16), 'cls_token': t(1, 1, 16),
            'layers.0.attn.qkv.weight': t(48, 16), 'blocks.0.mlp.fc1.weight': t(32, 16),
            'dist_token': t(1, 1, 16)}


add('conv-deit-unmapped', lambda: _tool('deit_to_cpvt').convert(_deit_with_extra()), KeyError,
    r'2 DeiT keys have no CPVT mapping: .*blocks\.0\.mlp\.fc1\.weight')
add('conv-deit-unmapped-wrapped', lambda: _tool('deit_to_cpvt').convert(
    {'state_dict': {'backbone.foo.bar': t(1)}}), KeyError, r"1 DeiT keys .*backbone\.foo\.bar")
add('conv-deit-bad-size', lambda: _tool('deit_to_cpvt').build_cpvt(
    {'patch_embed.projection.weight': t(20, 3, 16, 16), 'layers.0.ln1.weight': t(20)}),
    ValueError, 'embed_dims 20 is not a DeiT size')
add('conv-twins-unmapped', lambda: _tool('twins_pcpvt_to_pvtpeg').convert(
    {'patch_embeds.0.proj.weight': t(64, 3, 4, 4), 'totally.unknown': t(1)}), KeyError,
    r'totally\.unknown')
add('conv-twins-depths', lambda: _tool('twins_pcpvt_to_pvtpeg').infer_arch(
    {'layers.0.0.norm1.weight': t(4)}), ValueError, 'match no PVTPEG arch')
add('conv-twins-mmpretrain-unmapped', lambda: _tool('twins_pcpvt_to_pvtpeg').convert(
    {'state_dict': {'backbone.position_encodings.0.proj.weight': t(64, 1, 3, 3),
                    'backbone.stages.0.0.norm1.weight': t(64),
                    'backbone.stages.1.0.norm1.weight': t(64),
                    'backbone.norm_after_stage0.weight': t(64)}}), KeyError,
    r"1 mmpretrain PCPVT keys have no PVTPEG mapping: \['norm_after_stage0\.weight'\]")
add('conv-pervit-unmapped', lambda: _tool('pervit_official_to_mmposenc').convert(
    {'module.not_a_pervit_key': t(1), 'xyz': t(1)}), KeyError,
    '2 official PerViT keys have no mmposenc PerViT mapping')


# ----------------------------------------------------------------------------- tools
def _run_tool_main(script, *args):
    """``python <script> <args>`` in this process (tests/forked_runs.py's run_in_process): the
    tool's own ``__main__`` block (its argument parsing and its one-line error handling),
    without the ~5 CPU-s of a fresh interpreter importing torch and the hosts; from the
    repository root, as the commands of these cases are written. Its SystemExit or exception
    propagates; the working directory, ``sys.argv``, ``sys.path`` and the environment
    (``LOCAL_RANK``, which the tools set) are restored afterwards."""
    return run_in_process(dict(argv=[script, *args], cwd=REPO_ROOT),
                          capture=False)


def _train_in_process(path):
    from mmposenc.utils.tools.runner import load_config
    return load_config(path)


# the command line as a user types it: one line, with where it was raised (as a process of
# its own: test_train_test_tools.py::test_train_rejects_missing_config)
add('train-missing-config', lambda: _tool_error('tools/train.py', '/nonexistent/cfg.py'),
    RuntimeError, r'^FileNotFoundError: config file /nonexistent/cfg\.py does not exist '
    r'\(raised at .*; --traceback or MMPOSENC_TRACEBACK=1 shows the full traceback\)$')
add('load-config-missing', lambda: _train_in_process('/nonexistent/cfg.py'), FileNotFoundError,
    'does not exist')
add('load-config-package-missing-file', lambda: _train_in_process('mmdet::dino/nope.py'),
    FileNotFoundError, r'config file mmdet::dino/nope\.py does not exist \(file ".*/mmdet/'
    r'\.mim/configs/dino/nope\.py" does not exist\)$')
add('load-config-unknown-package', lambda: _train_in_process('nopkg::a/b.py'),
    FileNotFoundError, r'nopkg::a/b\.py does not exist \(mmengine resolves "pkg::" configs of '
    r'.*mmdet, .*mmposenc, .*only; give nopkg\'s config by its path\)$')
add('load-config-package-no-file', lambda: _train_in_process('mmdet::'), FileNotFoundError,
    r'^config file mmdet:: does not exist$')


@case('load-config-no-scope', ValueError, "default_scope=None; expected one of")
def _no_scope(tmp_path):
    p = tmp_path / 'noscope.py'
    p.write_text('model = dict(type="mmposenc.PEG", in_channels=4)\n')
    return _train_in_process(str(p))


@case('load-config-syntax-error', SyntaxError, 'invalid syntax|was never closed')
def _syntax(tmp_path):
    p = tmp_path / 'broken.py'
    p.write_text('model = dict(type=\n')
    return _train_in_process(str(p))


# ----------------------------------------------------------------------------- checkpoints
def _text_file(tmp_path):
    p = tmp_path / 'model.pth'
    p.write_text('this is a README, not a checkpoint\n')
    return str(p)


@case('checkpoint-text-file', ValueError,
      r"model\.pth is not a PyTorch checkpoint: it starts with b'this is ', neither")
def _ckpt_text(tmp_path):
    from mmengine.runner.checkpoint import _load_checkpoint
    return _load_checkpoint(_text_file(tmp_path))


@case('checkpoint-runs-code', pickle.UnpicklingError,
      r'refusing to load .*evil\.pth: it names globals outside the safe allowlist: '
      r'(posix|nt)\.system .*MMPOSENC_UNSAFE_LOAD=1')
def _ckpt_evil(tmp_path):
    from mmengine.runner.checkpoint import _load_checkpoint
    torch.save({'meta': _RunsCode(str(tmp_path / 'ran'))}, tmp_path / 'evil.pth')
    return _load_checkpoint(str(tmp_path / 'evil.pth'))


class _RunsCode:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f'touch {self.marker}', )


def _tool_error(script, *args, fresh_process=False):
    """Run a tool that must fail with one line for the user (no traceback); raise that line.

    In this process (:func:`_run_tool_main`) the tool's ``__main__`` block must end in a
    ``SystemExit`` whose message is one line (what the interpreter prints on stderr, exit status
    1); any other exception is what a user would see as a traceback. ``fresh_process=True`` runs
    ``python <script>`` as a user does and reads the last line of its stderr (one case does, for
    the interpreter's side of it: the message is the only thing printed, no traceback)."""
    if fresh_process:
        res = subprocess.run([sys.executable, script, *args], cwd=REPO_ROOT,
                             capture_output=True, text=True, timeout=600)
        if res.returncode == 0:
            return res
        if 'Traceback' in res.stderr:
            raise AssertionError(f'a traceback instead of one line:\n{res.stderr[-3000:]}')
        raise RuntimeError(res.stderr.strip().splitlines()[-1])
    try:
        return _run_tool_main(script, *args)
    except SystemExit as exit:
        message = exit.code
        if not isinstance(message, str) or '\n' in message.strip():
            raise AssertionError(f'exit {message!r} instead of one line') from None
        raise RuntimeError(message.strip()) from None
    except Exception as err:
        raise AssertionError(f'a traceback instead of one line: {type(err).__name__}: '
                             f'{err}') from err


@case('test-tool-text-checkpoint', RuntimeError,
      r'^InvalidCheckpointError: .*model\.pth is not a PyTorch checkpoint')
def _test_tool_text(tmp_path):
    return _tool_error('tools/test.py', 'configs/peg_detr/detr-sine_r50_16xb2-50e_coco.py',
                       _text_file(tmp_path), fresh_process=True)


@case('onnx-tool-text-checkpoint', RuntimeError,
      r'^InvalidCheckpointError: .*model\.pth is not a PyTorch checkpoint')
def _onnx_tool_text(tmp_path):
    return _tool_error('tools/deployment/pytorch2onnx.py',
                       'configs/peg_detr/detr-peg_r50_16xb2-50e_coco.py', '--checkpoint',
                       _text_file(tmp_path), '--out', str(tmp_path / 'x.onnx'))


@case('train-tool-misspelt-type', RuntimeError,
      r"^UnknownTypeError: mmposenc\.CPVTT is not in the mmposenc::model registry; closest "
      r"registered names: 'mmposenc\.CPVT'")
def _train_tool_misspelt(tmp_path):
    """The type as a user mistypes it in a shipped config (the Runner builds the model)."""
    return _tool_error('tools/train.py', 'configs/cpvt/cpvt-tiny_4xb256_in1k.py', '--work-dir',
                       str(tmp_path), '--cfg-options', 'model.backbone.type=mmposenc.CPVTT')


@case('test-tool-weights-do-not-fit', RuntimeError,
      r'^CheckpointMismatchError: .*peg\.pth does not fit the model of the config: '
      r'\d+ missing keys \(backbone\.bn1\.bias, .*1 unexpected keys '
      r'\(encoder_pos\.proj\.0\.weight\); .*pass --allow-partial-load',
      marks=pytest.mark.slow)  # builds the Runner and its COCO128 test set
def _test_tool_mismatch(tmp_path):
    """A PEG weight the (stock DETR) smoke config does not have, and the rest missing."""
    root = _shared_dir('coco128').rstrip('/') + '/'
    torch.save({'state_dict': {'encoder_pos.proj.0.weight': torch.zeros(256, 1, 3, 3)}},
               tmp_path / 'peg.pth')
    return _tool_error(
        'tools/test.py', 'configs/smoke/detr_r18_1xb2-8it_coco128.py', str(tmp_path / 'peg.pth'),
        '--work-dir', str(tmp_path / 'work'), '--cfg-options', f'data_root={root}',
        f'test_dataloader.dataset.data_root={root}',
        f'test_evaluator.ann_file={root}annotations/instances_train2017.json')


def _loadable_checkpoint(tmp_path):
    torch.save({'state_dict': {}, 'meta': {}}, tmp_path / 'model.pth')
    return str(tmp_path / 'model.pth')


@case('test-tool-tta-config-without-tta', RuntimeError,
      r'^MissingTTAConfigError: --tta needs tta_model and tta_pipeline in the config, and '
      r'configs/cpvt/cpvt-tiny_4xb256_in1k\.py has neither tta_model nor tta_pipeline; '
      r'configs with test-time augmentation: configs/cape/vit-base-p16_cape_16xb64_in1k\.py')
def _test_tool_tta_missing(tmp_path):
    """--tta on a config without test-time augmentation (mmengine would only fail with a
    traceback; the tool used to end in an uncaught ValueError)."""
    return _tool_error('tools/test.py', 'configs/cpvt/cpvt-tiny_4xb256_in1k.py',
                       _loadable_checkpoint(tmp_path), '--tta', '--work-dir',
                       str(tmp_path / 'work'))


@case('test-tool-tta-model-without-pipeline', RuntimeError,
      r'^MissingTTAConfigError: --tta needs tta_model and tta_pipeline in the config, and '
      r'.*tta_model_only\.py has no tta_pipeline; configs with test-time augmentation: '
      r'configs/cape/')
def _test_tool_tta_no_pipeline(tmp_path):
    cfg = tmp_path / 'tta_model_only.py'
    cfg.write_text(f"_base_ = [{osp.join(REPO_ROOT, 'configs/cpvt/cpvt-tiny_4xb256_in1k.py')!r}]\n"
                   "tta_model = dict(type='mmposenc.ResolutionTTAClassifier')\n")
    return _tool_error('tools/test.py', str(cfg), _loadable_checkpoint(tmp_path), '--tta',
                       '--work-dir', str(tmp_path / 'work'))


# ----------------------------------------------------------------------------- datasets
def _mmdet_load(path):
    from mmdet.datasets.transforms import LoadAnnotations  # noqa: F401 (registers mmdet)
    from mmcv.transforms import LoadImageFromFile
    return LoadImageFromFile()(dict(img_path=str(path)))


# mmcv's LoadImageFromFile asserts that the decoder returned an image (mmcv code: not ours)
@case('dataset-corrupt-png', AssertionError, r'failed to load image: .*broken\.png')
def _corrupt_png(tmp_path):
    p = tmp_path / 'broken.png'
    p.write_bytes(b'\x89PNG\r\n\x1a\n' + b'not really an image' * 10)
    return _mmdet_load(p)


# an empty file reaches cv2.imdecode, whose own assertion names the empty buffer
@case('dataset-empty-jpg', cv2.error, r'!buf\.empty\(\)')
def _empty_jpg(tmp_path):
    p = tmp_path / 'empty.jpg'
    p.write_bytes(b'')
    return _mmdet_load(p)


@case('dataset-missing-image', FileNotFoundError, 'No such file|missing.jpg')
def _missing(tmp_path):
    return _mmdet_load(tmp_path / 'missing.jpg')


@case('dataset-corrupt-in-coco-pipeline', AssertionError, r'failed to load image: .*0\.jpg')
def _coco_pipeline(tmp_path):
    """A one-image COCO dataset whose image is truncated garbage, through mmdet's pipeline."""
    import json
    from mmdet.datasets import CocoDataset
    from mmdet.utils import register_all_modules
    register_all_modules(init_default_scope=False)
    (tmp_path / 'img').mkdir()
    (tmp_path / 'img' / '0.jpg').write_bytes(b'\xff\xd8\xff\xe0' + b'\x00' * 20)
    ann = dict(images=[dict(id=1, file_name='0.jpg', height=32, width=32)],
               annotations=[dict(id=1, image_id=1, category_id=1, bbox=[1, 1, 10, 10],
                                 area=100, iscrowd=0)],
               categories=[dict(id=1, name='thing')])
    (tmp_path / 'ann.json').write_text(json.dumps(ann))
    from mmengine.registry import DefaultScope
    # as under an mmdet config: unscoped names resolve in mmdet's registry and its parents
    # (an explicit 'mmdet.LoadImageFromFile' would not: the class is mmcv's)
    with DefaultScope.overwrite_default_scope('mmdet'):
        ds = CocoDataset(data_root=str(tmp_path), ann_file='ann.json',
                         data_prefix=dict(img='img/'), metainfo=dict(classes=('thing', )),
                         pipeline=[dict(type='LoadImageFromFile'),
                                   dict(type='LoadAnnotations', with_bbox=True)],
                         serialize_data=False)
        return ds.prepare_data(0)


def test_at_least_100_cases():
    assert len(CASES) >= 100, len(CASES)


@pytest.mark.parametrize('thunk, exc, match', CASES)
def test_bad_input_raises_clearly(thunk, exc, match, tmp_path):
    import inspect
    args = (tmp_path, ) if inspect.signature(thunk).parameters and \
        'tmp_path' in inspect.signature(thunk).parameters else ()
    with pytest.raises(exc, match=match):
        out = thunk(*args)
        # a thunk that returns is a silently accepted bad input: say what came back
        shapes = [tuple(o.shape) for o in (out if isinstance(out, (tuple, list)) else [out])
                  if isinstance(o, torch.Tensor)]
        pytest.fail(f'no exception; returned {type(out).__name__} {shapes}')


def test_refused_checkpoint_did_not_run_its_code(tmp_path):
    with pytest.raises(pickle.UnpicklingError):
        _ckpt_evil(tmp_path)
    assert not (tmp_path / 'ran').exists()
    # the payload is real: unpickled without our loader it runs
    torch.load(tmp_path / 'evil.pth', weights_only=False)
    assert (tmp_path / 'ran').exists()


def test_masked_peg_accepts_0_1_masks_of_any_dtype():
    """The dtype check above rejects only ambiguous masks: 0/1 masks mean what a bool one does."""
    from mmposenc.models.layers import MaskedPEG
    torch.manual_seed(0)
    peg = MaskedPEG(8).eval()
    x = torch.randn(2, 8, 8)
    mask = torch.zeros(2, 8, dtype=torch.bool)
    mask[1, -3:] = True
    ref = peg(x, (2, 4), mask)
    for dtype in (torch.uint8, torch.int64, torch.float32):
        torch.testing.assert_close(peg(x, (2, 4), mask.to(dtype)), ref)


def test_tta_configs_named_by_the_test_tool_have_tta():
    """The configs that tools/test.py's --tta error recommends do have test-time augmentation."""
    from mmengine.config import Config
    spec = importlib.util.spec_from_file_location('reliability_test_tool',
                                                  osp.join(REPO_ROOT, 'tools', 'test.py'))
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    assert tool.TTA_CONFIGS
    for path in tool.TTA_CONFIGS:
        cfg = Config.fromfile(osp.join(REPO_ROOT, path))
        assert cfg.tta_model.type == 'mmposenc.ResolutionTTAClassifier', path
        assert [t.type for t in cfg.tta_pipeline] == ['LoadImageFromFile', 'TestTimeAug'], path
