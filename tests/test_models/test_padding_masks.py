"""mmposenc.models.padding_exact.masks: measured strides and exact feature-level padding masks
(ceil(img / stride) valid cells), against brute force and against real conv arithmetic."""
import pytest
import torch
import torch.nn.functional as F

from mmposenc.models.padding_exact import (conv_padding_masks, feature_padding_masks,
                                           masks_from_valid_shapes, measure_stride,
                                           valid_feature_shapes, valid_shapes_of_masks)


def ceil_div(a, b):
    return -(-a // b)


@pytest.mark.parametrize('stride', [4, 8, 16, 32, 64])
def test_power_of_two_strides_give_the_cells_of_every_smaller_image(stride):
    """For every batch size up to 700 px: the measured stride gives each image <= the batch
    exactly ceil(img / stride) cells (the stride itself unless one cell is all there is)."""
    for n in range(1, 701):
        f = ceil_div(n, stride)
        s, s_w = measure_stride((n, 700), (f, ceil_div(700, stride)))
        assert s == s_w
        if f > 1:
            assert s == stride, (n, f, s)
        for img in (1, n // 3 + 1, n - 1, n):
            if img >= 1:
                assert min(f, ceil_div(img, s)) == ceil_div(img, stride)


def test_real_resnet_maps_are_ceil_sized_and_their_strides_are_recovered():
    from mmdet.models.backbones import ResNet
    net = ResNet(18, base_channels=4, out_indices=(0, 1, 2, 3))
    dc5 = ResNet(18, base_channels=4, out_indices=(3, ), strides=(1, 2, 2, 1),
                 dilations=(1, 1, 1, 2))
    net.eval(), dc5.eval()  # (mmdet's ResNet.train returns None: no chaining)
    with torch.no_grad():
        for H, W in [(190, 253), (810, 33), (97, 130), (64, 64)]:
            x = torch.zeros(1, 3, H, W)
            for model, strides in ((net, (4, 8, 16, 32)), (dc5, (16, ))):
                for feat, s in zip(model(x), strides):
                    assert tuple(feat.shape[-2:]) == (ceil_div(H, s), ceil_div(W, s))
                    assert measure_stride((H, W), feat.shape[-2:]) == (s, s)


def test_other_strides_and_errors():
    assert measure_stride((224, 230), (16, 17)) == (14, 14)  # ViT-style patches of 14
    assert measure_stride((64, 256), (4, 8)) == (16, 32)  # anisotropic
    # per axis, the power of two above the smallest fitting stride wins where it fits
    # (mutmut survivors: that power doubled, or taken below the smallest stride)
    assert measure_stride((100, 100), (4, 13)) == (32, 8)
    assert measure_stride((64, 100), (1, 13)) == (64, 8)
    assert measure_stride((17, 100), (1, 13)) == (32, 8)
    assert measure_stride((17, 17), (1, 1)) == (32, 32)  # shared: the power of two, not 17
    assert measure_stride((10, 12), (10, 12)) == (1, 1)  # a map as large as the input
    for feat in ((0, 5), (5, 0), (11, 5), (5, 13)):  # empty, or larger than the input
        with pytest.raises(ValueError, match=r'cannot come from an input of \(10, 12\)'):
            measure_stride((10, 12), feat)
    assert measure_stride((20, 810), (1, 26)) == (32, 32)  # one cell: any stride >= 20 fits
    with pytest.raises(ValueError, match='cannot come from'):
        measure_stride((10, 10), (11, 5))
    with pytest.raises(ValueError, match='ceil\\(size / stride\\)'):
        measure_stride((10, 10), (6, 5))  # ceil(10 / s) is never 6


def test_exact_masks_vs_mmdet_nearest_interpolation():
    """Batch sizes that are multiples of the stride: the nearest-interpolated pixel mask (mmdet)
    and ours are equal. Others: mmdet's marks one more row / column as image (the issue's
    800 px at stride 32 in an 810 px batch: 26 rows instead of 25); ours has 25."""

    def nearest(img_shapes, batch, feat):
        pixel = torch.ones(1, len(img_shapes), *batch)
        for i, (h, w) in enumerate(img_shapes):
            pixel[0, i, :h, :w] = 0
        return F.interpolate(pixel, size=feat).bool()[0]

    gen = torch.Generator().manual_seed(0)
    for _ in range(200):
        stride = int(2 ** torch.randint(3, 7, (1, ), generator=gen))
        cells = torch.randint(1, 12, (2, ), generator=gen).tolist()
        batch = tuple(c * stride for c in cells)
        imgs = [tuple(int(torch.randint(1, b + 1, (1, ), generator=gen)) for b in batch)
                for _ in range(3)]
        ours = feature_padding_masks(imgs, batch, [cells])[0]
        assert torch.equal(ours, nearest(imgs, batch, cells))
    imgs, batch = [(800, 1199), (810, 1216)], (810, 1216)
    feat = (ceil_div(810, 32), ceil_div(1216, 32))
    ours = feature_padding_masks(imgs, batch, [feat])[0]
    stock = nearest(imgs, batch, feat)
    assert (~ours[0]).any(1).sum() == 25 and (~stock[0]).any(1).sum() == 26


def test_helpers_roundtrip_and_conv_arithmetic():
    shapes = [(3, 5), (1, 1), (4, 2)]
    masks = masks_from_valid_shapes(shapes, (4, 5))
    assert masks.dtype == torch.bool and masks.shape == (3, 4, 5)
    assert valid_shapes_of_masks(masks).tolist() == [list(s) for s in shapes]
    assert valid_feature_shapes([(190, 253)], (400, 400), (13, 13)) == [(6, 8)]
    # a convolution's masks = the output size of the same convolution on each image alone
    for k, s, p, d in [(3, 2, 1, 1), (1, 1, 0, 1), (3, 1, 1, 1), (3, 2, 2, 2), (7, 2, 3, 1)]:
        conv = torch.nn.Conv2d(1, 1, k, s, p, d)
        valid = [(v, u) for v in (1, 2, 5, 9) for u in (3, 8)]
        m = masks_from_valid_shapes(valid, (9, 8))
        out = conv(torch.zeros(1, 1, 9, 8)).shape[-2:]
        got = valid_shapes_of_masks(conv_padding_masks(m, out, (k, k), (s, s), (p, p),
                                                       (d, d))).tolist()
        assert got == [list(conv(torch.zeros(1, 1, v, u)).shape[-2:]) for v, u in valid]


@pytest.mark.parametrize('stride', [7, 12, 14, 28])
def test_given_strides_that_are_not_powers_of_two(stride):
    """A map of 7 x 5 cells at stride 7 / 14 / 28 is also ceil(input / s) for the power of
    two s above it: the measurement picks that one, so the images lose rows and columns (at
    stride 12 it does not); the given stride gives each image exactly ceil(img / stride)
    cells."""
    input_shape = (7 * stride, 5 * stride)
    imgs = [(6 * stride + 1, 3 * stride + 2), (5 * stride, 4 * stride), input_shape]
    expected = [[ceil_div(h, stride), ceil_div(w, stride)] for h, w in imgs]
    for strides in ([stride], [(stride, stride)]):
        masks = feature_padding_masks(imgs, input_shape, [(7, 5)], strides=strides)[0]
        assert valid_shapes_of_masks(masks).tolist() == expected
    measured = feature_padding_masks(imgs, input_shape, [(7, 5)])[0]
    ambiguous = stride in (7, 14, 28)  # why the stride is given
    assert measure_stride(input_shape, (7, 5)) == ((1 << stride.bit_length(), ) * 2
                                                   if ambiguous else (stride, stride))
    assert (valid_shapes_of_masks(measured).tolist() != expected) == ambiguous
    both = feature_padding_masks(imgs, input_shape, [(7, 5), (4, 3)], strides=[stride, None])
    assert valid_shapes_of_masks(both[0]).tolist() == expected
    with pytest.raises(ValueError, match=r'one stride per feature map, got 2 maps'):
        feature_padding_masks(imgs, input_shape, [(7, 5), (4, 3)], strides=[stride])


def test_as_bool_padding_mask_takes_bool_or_0_1_and_refuses_other_values():
    """(Found by mutmut: no test of the selection reached it.)"""
    from mmposenc.models.padding_exact import as_bool_padding_mask
    mask = torch.tensor([[False, True], [True, False]])
    assert as_bool_padding_mask(mask) is mask
    for dtype in (torch.uint8, torch.int64, torch.float32):
        out = as_bool_padding_mask(mask.to(dtype))
        assert out.dtype == torch.bool and torch.equal(out, mask)
    with pytest.raises(ValueError, match=r'^attn_mask must be a bool tensor .* got dtype '
                       r'torch.float32 with other values$'):
        as_bool_padding_mask(torch.tensor([0., 0.5]), name='attn_mask')
