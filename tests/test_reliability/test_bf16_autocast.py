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
from mmposenc.models.layers.encodings.base import BasePositionEncoding
from mmposenc.registry import MODELS

sys.path.insert(0, osp.join(REPO_ROOT, 'tests', 'test_detectors'))
import mmposenc.models.detectors  # noqa: E402,F401  (registers PEGDETR, PEGDeformableDETR)
from tiny_detr_cfgs import (build, conditional_detr_cfg, dab_detr_cfg,  # noqa: E402
                            deformable_detr_cfg, detr_cfg, dino_cfg, mask2former_head_cfg,
                            packed_inputs, pixel_decoder_cfg)

PEG_PIXEL_DECODER = pixel_decoder_cfg('mmposenc.PEGMSDeformAttnPixelDecoder', encoder_pos='peg')

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
    'MaskedChannelMapper': dict(in_channels=[32, 32], out_channels=32, kernel_size=1,
                                act_cfg=None, norm_cfg=dict(type='GN', num_groups=8),
                                num_outs=3),
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
    'RoPEMixed': dict(embed_dims=32, num_heads=2, num_layers=2),
    'DINOv3RoPE': dict(embed_dims=32, num_heads=2),
    'SaPE2': dict(embed_dims=32, num_heads=2),
    'SimplePyramid': dict(in_channels=32),
    'SinCos2dPE': dict(embed_dims=32, num_heads=2),
    'SwinPEG': dict(arch=dict(embed_dims=16, depths=[1, 1], num_heads=[1, 2]), window_size=4,
                    out_indices=(0, 1), drop_path_rate=0.0),
    'PaddingExactResNet': dict(depth=18, base_channels=8, num_stages=2, strides=(1, 2),
                               dilations=(1, 1), out_indices=(0, 1)),
    'MaskedFPN': dict(in_channels=[16, 32], out_channels=16, num_outs=3,
                      add_extra_convs='on_input'),
    'PaddingExactRetinaHead': dict(
        type='mmposenc.PaddingExactRetinaHead', num_classes=3, in_channels=16,
        feat_channels=16, stacked_convs=1,
        anchor_generator=dict(type='AnchorGenerator', octave_base_scale=4,
                              scales_per_octave=1, ratios=[1.0], strides=[8, 16]),
        bbox_coder=dict(type='DeltaXYWHBBoxCoder', target_means=[.0] * 4,
                        target_stds=[1.0] * 4)),
    'PaddingExactRPNHead': dict(
        type='mmposenc.PaddingExactRPNHead', in_channels=16, feat_channels=16,
        anchor_generator=dict(type='AnchorGenerator', scales=[8], ratios=[1.0],
                              strides=[8, 16]),
        bbox_coder=dict(type='DeltaXYWHBBoxCoder', target_means=[.0] * 4,
                        target_stds=[1.0] * 4)),
    'PEGDETR': detr_cfg(type='mmposenc.PEGDETR'),
    'PEGDeformableDETR': deformable_detr_cfg(type='mmposenc.PEGDeformableDETR'),
    'PEGConditionalDETR': conditional_detr_cfg(type='mmposenc.PEGConditionalDETR'),
    'PEGDABDETR': dab_detr_cfg(type='mmposenc.PEGDABDETR'),
    'PEGDINO': dino_cfg(type='mmposenc.PEGDINO'),
    'PEGMSDeformAttnPixelDecoder': PEG_PIXEL_DECODER,
    'PaddingExactMask2FormerHead': mask2former_head_cfg(
        'mmposenc.PaddingExactMask2FormerHead', PEG_PIXEL_DECODER),
    'PaddingExactSegMask2FormerHead': mask2former_head_cfg(
        'mmposenc.PaddingExactSegMask2FormerHead', PEG_PIXEL_DECODER, num_stuff=0),
}
#: registered types that are not models with a forward on tensors
EXCLUDED = {
    'ResolutionTTAClassifier': 'a test-time wrapper around a user classifier; its forward is '
                               'the wrapped classifier\'s (covered through CPVT/PEViT)',
    'PaddingExactMask2Former': 'mmdet\'s Mask2Former binding the image sizes for the '
                               'backbone; its forward is the backbone\'s and the head\'s '
                               '(PaddingExactResNet, PaddingExactMask2FormerHead)',
    'PaddingExactEncoderDecoder': 'mmseg\'s EncoderDecoder binding the image sizes for the '
                                  'backbone; its forward is the backbone\'s and the head\'s '
                                  '(SwinPEG, PaddingExactSegMask2FormerHead)',
    'BatchPaddingSegDataPreprocessor': 'a data preprocessor (no forward on tensors)',
    'PaddingAwareMask2FormerHead': 'former name of PaddingExactMask2FormerHead (same class)',
    'PaddingAwareSegMask2FormerHead': 'former name of PaddingExactSegMask2FormerHead (same '
                                      'class)',
    'PaddingExactRetinaNet': 'mmdet\'s RetinaNet binding the image sizes; its forward is '
                             'the backbone\'s, MaskedFPN\'s and PaddingExactRetinaHead\'s',
    'PaddingExactMaskRCNN': 'mmdet\'s Mask R-CNN binding the image sizes; its forward is the '
                            'backbone\'s, MaskedFPN\'s, PaddingExactRPNHead\'s and mmdet\'s '
                            'RoI heads\'',
}
DETECTORS = ('PEGDETR', 'PEGDeformableDETR', 'PEGConditionalDETR', 'PEGDABDETR', 'PEGDINO')
#: built from full configs under mmdet's scope (tiny_detr_cfgs.build)
MMDET_BUILT = DETECTORS + ('PEGMSDeformAttnPixelDecoder', 'PaddingExactMask2FormerHead',
                           'PaddingExactSegMask2FormerHead', 'PaddingExactRetinaHead',
                           'PaddingExactRPNHead')


def _mask2former_inputs(name, g):
    """Backbone maps (strides 4-32) of a padded batch of a 64 x 80 and a 48 x 56 image, and
    the data samples of a Mask2Former head."""
    from mmdet.structures import DetDataSample
    from mmseg.structures import SegDataSample
    feats = [torch.randn(2, c, 64 // s, 80 // s, generator=g)
             for c, s in zip((16, 32, 64, 128), (4, 8, 16, 32))]
    sample_cls = SegDataSample if 'Seg' in name else DetDataSample
    samples = [sample_cls(metainfo=dict(img_shape=shape, batch_input_shape=(64, 80),
                                        pad_shape=(64, 80)))
               for shape in ((64, 80), (48, 56))]
    return feats, samples


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
    if name == 'PaddingExactResNet':  # its exact path: a padded batch of 32x40 and 25x31
        from mmposenc.models.padding_exact import backbone_image_shapes
        with backbone_image_shapes(model, [(32, 40), (25, 31)]):
            return model(img)
    if name in ('CPVT', 'PEViT', 'PVTPEG', 'PerViT', 'SwinPEG'):
        return model(img if name != 'PerViT' else torch.rand(2, 3, 64, 64, generator=g))
    if name == 'PEGMSDeformAttnPixelDecoder':  # with the masks of a padded batch
        feats, samples = _mask2former_inputs(name, g)
        with model.image_shapes([s.img_shape for s in samples]):
            return model(feats)
    if name in ('PaddingExactMask2FormerHead', 'PaddingExactSegMask2FormerHead'):
        return model(*_mask2former_inputs(name, g))
    if name in ('PaddingExactRetinaHead', 'PaddingExactRPNHead'):  # its exact path
        from mmdet.structures import DetDataSample
        samples = [DetDataSample(metainfo=dict(img_shape=shape, batch_input_shape=(32, 40)))
                   for shape in ((32, 40), (25, 31))]
        with model._image_shapes(samples):
            return model([torch.randn(2, 16, 4, 5, generator=g),
                          torch.randn(2, 16, 2, 3, generator=g)])
    if name == 'MaskedFPN':  # stride-8 and -16 maps of a padded batch of two
        masks = [torch.zeros(2, 4, 5, dtype=torch.bool), torch.zeros(2, 2, 3, dtype=torch.bool)]
        masks[0][1, 3:], masks[1][1, 2:] = True, True
        return model([torch.randn(2, 16, 4, 5, generator=g),
                      torch.randn(2, 32, 2, 3, generator=g)], padding_masks=masks)
    if name == 'PEG':
        return model(tokens, (4, 5))
    if name == 'SimplePyramid':  # four stride-16 maps of a plain ViT
        return model([torch.randn(2, 32, 4, 5, generator=g) for _ in range(4)])
    if name == 'MaskedChannelMapper':  # stride-16 and -32 maps of a padded batch of two
        masks = [torch.zeros(2, 4, 5, dtype=torch.bool), torch.zeros(2, 2, 3, dtype=torch.bool)]
        masks[0][1, 3:], masks[1][1, 2:] = True, True
        return model([torch.randn(2, 32, 4, 5, generator=g),
                      torch.randn(2, 32, 2, 3, generator=g)], padding_masks=masks)
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
    if name in MMDET_BUILT:
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
