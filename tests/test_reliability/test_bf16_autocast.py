"""Forward of every model registered in ``mmposenc.registry.MODELS`` under CPU bf16 autocast.

Parametrised over the registry itself: registering a new type without adding small
constructor kwargs (or an explicit exclusion with a reason) fails ``test_kwargs_cover_registry``.
"""
import copy
import os.path as osp
import sys

import pytest
import torch

from conftest import REPO_ROOT

import mmposenc.models  # noqa: F401
from mmposenc.models.layers.pe_base import BasePositionEncoding
from mmposenc.registry import MODELS

sys.path.insert(0, osp.join(REPO_ROOT, 'tests', 'test_detectors'))
import mmposenc.models.detectors  # noqa: E402,F401  (registers PEGDETR, PEGDeformableDETR)
from tiny_detr_cfgs import build, deformable_detr_cfg, detr_cfg, packed_inputs  # noqa: E402

TINY_VIT = dict(embed_dims=32, num_layers=2, num_heads=2, feedforward_channels=64)

#: type -> (small constructor kwargs, input builder); position encodings of the
#: BasePositionEncoding interface have no forward of their own and run inside a tiny PEViT.
SMALL = {
    'CAPE1d': dict(embed_dims=16, max_global_shift=1.0, max_local_shift=0.5),
    'CAPE2d': dict(embed_dims=32),
    'CPVT': dict(arch=TINY_VIT, img_size=32, patch_size=8),
    'CoPE': dict(embed_dims=32, num_heads=2),
    'LearnableAbsolutePE': dict(embed_dims=32, num_heads=2, grid_size=4),
    'MPA': dict(embed_dims=32, num_heads=2),
    'MaskedPEG': dict(embed_dims=32),
    'MultiLevelMaskedPEG': dict(embed_dims=32, num_levels=2),
    'NoPositionEncoding': dict(embed_dims=32, num_heads=2),
    'PEG': dict(in_channels=32, num_extra_tokens=1),
    'PEGPositionEncoding': dict(embed_dims=32, num_heads=2),
    'PEViT': dict(arch=TINY_VIT, img_size=32, patch_size=8),
    'PVTPEG': dict(arch=dict(embed_dims=[16, 32], num_heads=[1, 2], mlp_ratios=[2, 2],
                             depths=[1, 1], sr_ratios=[2, 1]), out_indices=(0, 1),
                   drop_path_rate=0.0),
    'PerViT': dict(arch=dict(embed_dims=[32, 32], depths=[1, 1], num_heads=2,
                             stem_channels=[16, 32]), out_indices=(0, 1)),
    'PeripheralDistanceEmbedding': dict(embed_dims=8),
    'PeripheralPE': dict(embed_dims=32, num_heads=2),
    'PeripheralPositionEncoding': dict(num_heads=2),
    'RelativePositionBias2d': dict(embed_dims=32, num_heads=2, max_distance=3),
    'RoPE2d': dict(embed_dims=32, num_heads=2),
    'SaPE2': dict(embed_dims=32, num_heads=2),
    'SimplePyramid': dict(in_channels=32),
    'SinCos2dPE': dict(embed_dims=32, num_heads=2),
    'SwinPEG': dict(arch=dict(embed_dims=16, depths=[1, 1], num_heads=[1, 2]), window_size=4,
                    out_indices=(0, 1), drop_path_rate=0.0),
    'PEGDETR': detr_cfg(type='mmposenc.PEGDETR'),
    'PEGDeformableDETR': deformable_detr_cfg(type='mmposenc.PEGDeformableDETR'),
}
#: registered types that are not models with a forward on tensors
EXCLUDED = {
    'RandomResolutionDataPreprocessor': 'a data preprocessor: resizes uint8 batches, no '
                                        'learnable forward to autocast',
    'ResolutionTTAClassifier': 'a test-time wrapper around a user classifier; its forward is '
                               'the wrapped classifier\'s (covered through CPVT/PEViT)',
}
DETECTORS = ('PEGDETR', 'PEGDeformableDETR')


def _forward(name, model):
    g = torch.Generator().manual_seed(0)
    img = torch.rand(2, 3, 32, 40, generator=g)
    tokens = torch.randn(2, 1 + 4 * 5, 32, generator=g)
    if name in DETECTORS:
        data = model.data_preprocessor(packed_inputs([(3, 64, 72), (3, 56, 80)]), False)
        return model(**data, mode='tensor')
    if isinstance(model, BasePositionEncoding):  # run it where it lives: inside a PEViT
        from mmposenc.models.backbones import PEViT
        pe = dict(type=name, **{k: v for k, v in SMALL[name].items()
                                if k not in ('embed_dims', 'num_heads')})
        vit = PEViT(arch=TINY_VIT, img_size=32, patch_size=8, pos_encoding=pe,
                    out_type='featmap').eval()
        return vit(img)
    if name in ('CPVT', 'PEViT', 'PVTPEG', 'PerViT', 'SwinPEG'):
        return model(img if name != 'PerViT' else torch.rand(2, 3, 64, 64, generator=g))
    if name == 'PEG':
        return model(tokens, (4, 5))
    if name == 'SimplePyramid':  # four stride-16 maps of a plain ViT
        return model([torch.randn(2, 32, 4, 5, generator=g) for _ in range(4)])
    if name == 'MaskedPEG':
        mask = torch.zeros(2, 20, dtype=torch.bool)
        mask[1, -5:] = True
        return model(tokens[:, 1:], (4, 5), mask)
    if name == 'MultiLevelMaskedPEG':
        x = torch.randn(2, 20 + 6, 32, generator=g)
        return model(x, [(4, 5), (2, 3)])
    if name == 'MPA':
        return model(tokens[:, 1:], (4, 5))
    if name == 'CAPE1d':
        return model(torch.randn(2, 7, 16, generator=g))
    if name == 'PeripheralDistanceEmbedding':
        return model(torch.rand(20, 20, generator=g))
    if name == 'PeripheralPositionEncoding':
        return model((4, 5))
    raise AssertionError(f'no input builder for {name}')


def _tensors(out):
    if isinstance(out, torch.Tensor):
        yield out
    elif isinstance(out, (tuple, list)):
        for o in out:
            yield from _tensors(o)
    elif isinstance(out, dict):
        for o in out.values():
            yield from _tensors(o)


def test_kwargs_cover_registry():
    registered = set(MODELS.module_dict)
    assert set(SMALL) | set(EXCLUDED) == registered, (
        f'missing: {registered - set(SMALL) - set(EXCLUDED)}, '
        f'stale: {(set(SMALL) | set(EXCLUDED)) - registered}')
    assert not set(SMALL) & set(EXCLUDED)


@pytest.mark.parametrize('name', sorted(set(MODELS.module_dict) - set(EXCLUDED)))
def test_bf16_autocast_forward_is_finite(name):
    torch.manual_seed(0)
    if name in DETECTORS:
        model = build(copy.deepcopy(SMALL[name]))
    else:
        model = MODELS.build(dict(type=name, **copy.deepcopy(SMALL[name])))
    model.eval()
    seen = []
    for m in model.modules():  # PE types run inside a fresh PEViT: their layers are not here
        if isinstance(m, (torch.nn.Linear, torch.nn.Conv2d)):
            m.register_forward_hook(lambda mod, args, out: seen.append(out.dtype))
    with torch.no_grad(), torch.autocast('cpu', dtype=torch.bfloat16):
        out = _forward(name, model)
    outs = list(_tensors(out))
    assert outs, f'{name} returned no tensors'
    for t in outs:
        if t.is_floating_point():
            assert torch.isfinite(t).all(), f'{name}: non-finite values under bf16 autocast'
    # autocast really applied: the model's own linear / conv layers computed in bf16
    # (outputs may be float32 again after LayerNorm, which autocast runs in float32)
    if seen:
        assert torch.bfloat16 in seen, (name, set(seen))
