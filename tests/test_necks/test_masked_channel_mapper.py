"""MaskedChannelMapper: mmdet's ChannelMapper (same keys, same outputs without padding) whose
outputs on an image's valid cells do not depend on the rest of a padded batch."""
import pytest
import torch
from torch import nn

from mmposenc.models.necks import MaskedChannelMapper
from mmposenc.models.padding_exact import feature_padding_masks, masked_group_norm

GN = dict(type='GN', num_groups=4)
# the Deformable-DETR neck in small: 1x1 convs + GN, no activation, two extra stride-2 levels;
# and a 3x3 variant with ReLU
CFGS = {
    'deformable-detr': dict(in_channels=[8, 16], out_channels=16, kernel_size=1, act_cfg=None,
                            norm_cfg=GN, num_outs=4),
    'k3-relu': dict(in_channels=[8, 16], out_channels=16, kernel_size=3, norm_cfg=GN,
                    num_outs=3),
}


def randomise(neck, seed=0):
    gen = torch.Generator().manual_seed(seed)
    for p in neck.parameters():
        p.data.normal_(0, 0.5, generator=gen)
    return neck


def backbone_maps(sizes, seed=0):
    """Stride-16 and stride-32 maps (8 and 16 channels) of images of ``sizes`` pixels, each
    alone (1, C, ceil(h / s), ceil(w / s))."""
    gen = torch.Generator().manual_seed(seed)
    return [[torch.randn(1, c, -(-h // s), -(-w // s), generator=gen)
             for c, s in ((8, 16), (16, 32))] for h, w in sizes]


def batch_of(alone, sizes, seed=1):
    """The maps of a padded batch: each image's maps top-left, the padding random (a backbone's
    responses to the padding are not zero); with the exact masks."""
    gen = torch.Generator().manual_seed(seed)
    H, W = max(h for h, _ in sizes), max(w for _, w in sizes)
    masks = feature_padding_masks(sizes, (H, W), [(-(-H // s), -(-W // s)) for s in (16, 32)])
    maps = []
    for level, mask in enumerate(masks):
        c = alone[0][level].shape[1]
        x = torch.randn(len(sizes), c, *mask.shape[-2:], generator=gen) * 3
        for i, feats in enumerate(alone):
            h, w = feats[level].shape[-2:]
            x[i, :, :h, :w] = feats[level][0]
        maps.append(x)
    return maps, masks


@pytest.mark.parametrize('name', sorted(CFGS))
def test_state_dict_and_outputs_are_mmdet_channel_mapper(name):
    from mmdet.models.necks import ChannelMapper
    torch.manual_seed(0)
    ref = randomise(ChannelMapper(**CFGS[name]))
    ours = MaskedChannelMapper(**CFGS[name])
    assert list(ours.state_dict()) == list(ref.state_dict())
    ours.load_state_dict(ref.state_dict(), strict=True)
    feats = [torch.randn(2, 8, 7, 9), torch.randn(2, 16, 4, 5)]
    with torch.no_grad():
        stock, plain = ref(feats), ours(feats)
        no_padding = ours(feats, padding_masks=[torch.zeros(2, 7, 9, dtype=torch.bool),
                                                torch.zeros(2, 4, 5, dtype=torch.bool)])
    assert [o.shape for o in plain] == [o.shape for o in stock]
    for a, b, c in zip(stock, plain, no_padding):
        assert torch.equal(a, b)  # no masks: mmdet's computation
        torch.testing.assert_close(c, a, rtol=1e-5, atol=1e-5)  # empty masks: the same


@pytest.mark.parametrize('name', sorted(CFGS))
def test_valid_cells_do_not_depend_on_the_batch(name):
    """Each image in a padded batch (random values in the padding) = the image alone, on all
    output levels including the extra ones; the padding of the outputs is zero. mmdet's
    ChannelMapper with the same weights fails this."""
    from mmdet.models.necks import ChannelMapper
    ours = randomise(MaskedChannelMapper(**CFGS[name])).eval()
    stock = ChannelMapper(**CFGS[name]).eval()
    stock.load_state_dict(ours.state_dict())
    sizes = [(190, 253), (400, 267), (266, 400), (33, 97)]
    alone = backbone_maps(sizes)
    maps, masks = batch_of(alone, sizes)
    worst = stock_worst = 0.
    with torch.no_grad():
        outs, stock_outs = ours(maps, padding_masks=masks), stock(maps)
        for i, feats in enumerate(alone):
            for o, s, a in zip(outs, stock_outs, ours(feats)):
                h, w = a.shape[-2:]
                worst = max(worst, (o[i, :, :h, :w] - a[0]).abs().max().item())
                stock_worst = max(stock_worst, (s[i, :, :h, :w] - a[0]).abs().max().item())
                assert (o[i, :, h:] == 0).all() and (o[i, :, :, w:] == 0).all()
    assert worst <= 1e-5
    assert stock_worst > 1e-2


def test_masked_group_norm_is_group_norm_of_the_valid_part():
    gn = randomise(nn.GroupNorm(4, 16), seed=3)
    x = torch.randn(3, 16, 6, 7) * 5 + 2
    mask = torch.ones(3, 6, 7, dtype=torch.bool)
    extents = [(6, 7), (2, 5), (1, 1)]
    for i, (h, w) in enumerate(extents):
        mask[i, :h, :w] = False
    out = masked_group_norm(x, gn, mask)
    for i, (h, w) in enumerate(extents):
        assert torch.equal(out[i:i + 1, :, :h, :w], gn(x[i:i + 1, :, :h, :w]))
    assert (out[mask[:, None].expand_as(out)] == 0).all()
    with torch.autocast('cpu', dtype=torch.bfloat16):
        assert torch.isfinite(masked_group_norm(x.bfloat16(), gn, mask)).all()


def test_gradients_reach_every_parameter_with_masks():
    neck = MaskedChannelMapper(**CFGS['k3-relu'])
    sizes = [(70, 100), (100, 40)]
    maps, masks = batch_of(backbone_maps(sizes), sizes)
    sum(o.sum() for o in neck([m.requires_grad_() for m in maps], padding_masks=masks)).backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in neck.parameters())


def test_bad_inputs_raise():
    with pytest.raises(ValueError, match='num_outs'):
        MaskedChannelMapper([8, 16], 16, num_outs=1)
    with pytest.raises(ValueError, match='in_channels'):
        MaskedChannelMapper([], 16)
    neck = MaskedChannelMapper(**CFGS['deformable-detr'])
    feats = [torch.randn(2, 8, 7, 9), torch.randn(2, 16, 4, 5)]
    with pytest.raises(ValueError, match='2 input maps'):
        neck(feats[:1])
    with pytest.raises(ValueError, match='one \\(bs, h, w\\) mask per input'):
        neck(feats, padding_masks=[torch.zeros(2, 4, 5, dtype=torch.bool)] * 2)


@pytest.mark.parametrize('name', sorted(CFGS))
def test_0_1_masks_of_any_dtype_mean_what_bool_masks_do(name):
    """As MaskedPEG: uint8 / int / float masks holding 0 and 1 give the bool masks' outputs
    (a uint8 mask's ``~`` is 254 / 255, which made every cell valid without an error); masks
    with other values are refused."""
    neck = randomise(MaskedChannelMapper(**CFGS[name])).eval()
    sizes = [(70, 100), (100, 40)]
    maps, masks = batch_of(backbone_maps(sizes), sizes)
    with torch.no_grad():
        ref = neck(maps, padding_masks=masks)
        for dtype in (torch.uint8, torch.int64, torch.float32):
            outs = neck(maps, padding_masks=[m.to(dtype) for m in masks])
            for o, r in zip(outs, ref):
                assert torch.equal(o, r), dtype
    with pytest.raises(ValueError, match='only 0 and 1'):
        neck(maps, padding_masks=[m.to(torch.uint8) * 2 for m in masks])


@pytest.mark.parametrize('conv_cfg', [
    dict(type='Conv2dAdaptivePadding'),  # pads in its forward: conv.padding is 0
    dict(type='ConvWS'),  # another conv class: not what the masked path was checked on
    dict(type='DCNv2', deform_groups=1),  # offsets can reach into the padding
    dict(type='Conv2d', padding_mode='reflect'),  # reflects the batch's padding, not the image
    dict(type='Conv2d', padding_mode='circular'),
])
def test_conv_cfgs_the_masked_path_does_not_support_are_refused(conv_cfg):
    """The masked path calls ``ConvModule.conv`` itself with the mask arithmetic of a
    zero-padded ``nn.Conv2d``; any other convolution or padding mode would silently give
    outputs that depend on the batch, so construction refuses it and points at mmdet's
    ChannelMapper."""
    if conv_cfg['type'] == 'DCNv2':
        from mmposenc.ops import mmcv_route
        if mmcv_route() == 'ops-free':  # no DCN kernels: the route refuses it first
            with pytest.raises(RuntimeError, match='modulated_deform_conv_forward.*'
                               'ROUTE=compiled'):
                MaskedChannelMapper([8, 16], 16, conv_cfg=conv_cfg, norm_cfg=GN, num_outs=3)
            return
    with pytest.raises(ValueError, match='zero-padded nn.Conv2d.*ChannelMapper'):
        MaskedChannelMapper([8, 16], 16, conv_cfg=conv_cfg, norm_cfg=GN, num_outs=3)


@pytest.mark.parametrize('conv_cfg', [None, dict(type='Conv'), dict(type='Conv2d'),
                                      dict(type='Conv2d', padding_mode='zeros')])
def test_plain_conv_cfgs_are_accepted_and_exact(conv_cfg):
    """The configurations of a plain zero-padded nn.Conv2d build, and their valid cells do
    not depend on the batch (as for the default conv_cfg)."""
    neck = randomise(MaskedChannelMapper([8, 16], 16, conv_cfg=conv_cfg, norm_cfg=GN,
                                         num_outs=3)).eval()
    sizes = [(70, 100), (100, 40)]
    alone = backbone_maps(sizes)
    maps, masks = batch_of(alone, sizes)
    with torch.no_grad():
        outs = neck(maps, padding_masks=masks)
        for i, feats in enumerate(alone):
            for o, r in zip(outs, neck(feats)):
                h, w = r.shape[-2:]
                torch.testing.assert_close(o[i, :, :h, :w], r[0], atol=1e-5, rtol=1e-5)
