"""A detector on a backbone whose stride is not a power of two (ViT patches of 14): with
``backbone_strides`` / ``encoder_strides`` an image's encoder memory is the same alone and in a
padded batch; measured, the small stride-14 map is taken for stride 16 and the image loses a
row and a column."""
import pytest
import torch
from test_padding_exact_detectors import SubsampleBackbone, alone_vs_batched
from tiny_detr_cfgs import build, detr_cfg, packed_inputs

#: alone, the first image gives a 7 x 5 map at stride 14 (ceil(90 / 14), ceil(60 / 14)); the
#: batch input 98 x 70 gives 7 x 5 too, which is also ceil(98 / 16) x ceil(70 / 16)
SHAPES = [(3, 90, 60), (3, 98, 70)]


@pytest.mark.parametrize('given', [True, False])
def test_stride_14_backbone(given):
    torch.manual_seed(0)
    strides = dict(backbone_strides=(14, ), encoder_strides=(14, )) if given else {}
    model = build(detr_cfg(
        type='mmposenc.PEGDETR', encoder_pos='peg', peg_after=(-1, 0), **strides,
        neck=dict(type='mmposenc.MaskedChannelMapper', in_channels=[128], kernel_size=1,
                  out_channels=32, act_cfg=None, norm_cfg=dict(type='GN', num_groups=8),
                  num_outs=1)))
    model.backbone = SubsampleBackbone((14, ), (128, ))
    gen = torch.Generator().manual_seed(1)
    for name, p in model.named_parameters():
        if name.startswith(('encoder', 'decoder', 'neck')):
            p.data.normal_(0, 0.3 if p.dim() > 1 else 0.1, generator=gen)
    model.eval()
    batch = packed_inputs(SHAPES, num_items=[1, 2])
    packed = [dict(inputs=i, data_samples=s)
              for i, s in zip(batch['inputs'], batch['data_samples'])]
    memory, scores, _ = alone_vs_batched(model, packed)
    if given:
        assert memory <= 1e-5 and scores <= 1e-5, (memory, scores)
    else:
        assert memory > 1e-3, memory
