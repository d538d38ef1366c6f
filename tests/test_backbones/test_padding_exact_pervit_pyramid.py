"""Padding-exact PerViT and CPVT + SimplePyramid (issue 20, item 1), on the COCO128 pair of
test_padding_exact.py (480 x 640 and 640 x 426 through DetDataPreprocessor, batched to
640 x 640) with trained-like norms: every output of each image, on its ``ceil(size / stride)``
cells, equals the output of the image alone (its own pixels only), and each step of the mode
left out fails.

The 426 px side puts every border case in play: the token grid (stride 16) has 27 columns, a
partial patch (426 = 26 * 16 + 10); PerViT's stride-2 stem convolutions read beyond the image
(213, 107, 54 columns: odd at the first two); the stride-32 max-pooling pools 27 cells (its
last window reads one padded cell); upsampled maps have 2 * 27 and 4 * 27 columns alone.

One PerViT per stem and one CPVT + SimplePyramid, with their images' outputs alone, serve the
tests (alone, nothing is bound and no mask is given: the stock computation, which no step of
the mode changes).
"""
import pytest
import torch
from test_padding_exact import TOL, load_batch, trained_like
from torch import nn

from mmposenc.models.backbones import CPVT, PerViT
from mmposenc.models.backbones.pervit import EXACT_STEPS as PERVIT_STEPS
from mmposenc.models.necks import SimplePyramid
from mmposenc.models.necks.simple_pyramid import EXACT_STEPS as PYRAMID_STEPS
from mmposenc.models.padding_exact import backbone_image_shapes, feature_padding_masks

pytest.importorskip('mmdet')

SCALES = (4, 2, 1, 0.5)  # strides 4, 8, 16, 32 from stride 16


@pytest.fixture(scope='module')
def batch(coco128_root):
    return load_batch(coco128_root)


def small_pervit(inputs, conv_stem=True):
    """Four 1-block stages, 2 heads, in padding-exact mode; trained-like norms and a Phi_p
    away from its initialisation (every Phi_p parameter perturbed). Phi_p is cached for the
    three grids of the tests (the padded one and each image's)."""
    torch.manual_seed(0)
    arch = dict(embed_dims=[32, 48, 64, 64], depths=[1, 1, 1, 1], num_heads=2,
                stem_channels=[8, 16, 16, 32])
    model = PerViT(arch, out_indices=(0, 1, 2, 3), featmap_scales=SCALES,
                   conv_stem=conv_stem, ppe_cfg=dict(max_cache=3), padding_exact=True)
    model.init_weights()
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.phi_p_parameters():
            p.add_(torch.randn(p.shape, generator=gen) * 0.1 * (p.abs().mean() + 0.1))
    return trained_like(model.eval(), inputs)  # the BatchNorms measure in train mode


@pytest.fixture(scope='module')
def pervits(batch):
    """One model per stem and its images' outputs alone, built once (tests that change the
    model restore it)."""
    models = {}

    def get(conv_stem=True):
        if conv_stem not in models:
            model = small_pervit(batch[0], conv_stem)
            models[conv_stem] = model, alone_outputs(model, *batch)
        model, alone = models[conv_stem]
        model._exact_steps, model.padding_exact = PERVIT_STEPS, True
        return model, alone
    return get


def cells(size, stride):
    return -(-size // stride)


def compare(batched, alone, shapes, H):
    """Largest |difference| per output between each image alone (``alone[i]``: image i's
    outputs) and in the batch, on the image's ceil(size / stride) cells (an upsampled map
    alone can have more: 4 * 27 > 107)."""
    diffs = [0.] * len(batched)
    for i, (h, w) in enumerate(shapes):
        for k, (a, b) in enumerate(zip(alone[i], batched)):
            s = H // b.shape[-2]
            rows, cols = cells(h, s), cells(w, s)
            assert a.shape[-2] >= rows and a.shape[-1] >= cols
            d = (b[i, :, :rows, :cols] - a[0, :, :rows, :cols]).abs()
            diffs[k] = max(diffs[k], d.nan_to_num(float('inf')).max().item())
    return diffs


def alone_outputs(forward, inputs, shapes):
    """Each image's outputs of ``forward`` alone (its own pixels only)."""
    with torch.no_grad():
        return [forward(inputs[i:i + 1, :, :h, :w]) for i, (h, w) in enumerate(shapes)]


def pervit_diffs(model, inputs, shapes, bind=True, alone=None):
    if alone is None:
        alone = alone_outputs(model, inputs, shapes)
    with torch.no_grad():
        with backbone_image_shapes(model, shapes if bind else None):
            batched = model(inputs)
    return compare(batched, alone, shapes, inputs.shape[-2])


@pytest.mark.parametrize('conv_stem', [True, False])
def test_pervit_outputs_alone_equal_batched(batch, pervits, conv_stem):
    """C-stem and patchify stem: the four outputs (strides 4 / 8 / 16 / 32) of each image
    equal its outputs alone (measured <= 1.1e-6); stock PerViT is off on all four (the
    attention over the padded grid, Phi_p of the padded grid, the border reads; measured
    0.012-2.7 with the patchify stem, more with the C-stem)."""
    inputs, shapes = batch
    model, alone = pervits(conv_stem)
    diffs = pervit_diffs(model, inputs, shapes, alone=alone)
    assert max(diffs) <= TOL, diffs
    stock = pervit_diffs(model, inputs, shapes, bind=False, alone=alone)
    assert min(stock) > 1e-2, stock


@pytest.mark.parametrize('step,first', [('stem', 0), ('cpe', 0), ('attention', 0),
                                        ('resample', 3)])
def test_pervit_fails_without_each_step(batch, pervits, step, first, monkeypatch):
    """Each step is needed: the stem's stride-2 convolutions read the padded cell beyond an
    odd extent (213, 107 columns), the CPE reads padded neighbours, the MPA attends to padded
    keys with Phi_p of the padded grid, the stride-32 max-pooling of 27 columns reads one
    padded cell (only that output: the others are not pooled)."""
    inputs, shapes = batch
    model, alone = pervits()
    monkeypatch.setattr(model, '_exact_steps', PERVIT_STEPS - {step})
    diffs = pervit_diffs(model, inputs, shapes, alone=alone)
    assert max(diffs[:first], default=0) <= TOL and diffs[first] > 1e-3, diffs


def test_pervit_needs_phi_p_of_the_images_own_grid(batch, pervits, monkeypatch):
    """Masking the padded keys is not enough: Phi_p depends on the whole grid (coordinates
    normalised to [-1, 1] over it, instance norms over its keys). Each image's own attention
    with Phi_p of the padded 40 x 40 grid restricted to its cells (what a key mask on the
    stock position encoding gives) differs from the image alone."""
    inputs, shapes = batch
    model, alone = pervits()
    H, W = inputs.shape[-2] // 16, inputs.shape[-1] // 16
    for blk in model.blocks:
        mpa = blk.attn

        def padded_grid_bias(hw_shape, dtype=None, mpa=mpa):
            h, w = hw_shape
            full = mpa.ppe.log_gate((H, W)).view(-1, H, W, H, W)
            return full[:, :h, :w, :h, :w].reshape(-1, h * w, h * w)

        monkeypatch.setattr(mpa, 'position_bias', padded_grid_bias)
    with torch.no_grad(), backbone_image_shapes(model, shapes):
        batched = model(inputs)
    monkeypatch.undo()
    diffs = compare(batched, alone, shapes, inputs.shape[-2])
    assert min(diffs) > 1e-3, diffs


def test_pervit_outputs_are_zero_outside_each_image_and_stock_without_binding(batch, pervits):
    """The padded cells of every output are zero in the mode (not in stock PerViT); with
    nothing bound the mode is stock PerViT, bit for bit."""
    inputs, shapes = batch
    model = pervits()[0]
    with torch.no_grad():
        with backbone_image_shapes(model, shapes):
            outs = model(inputs)
        plain = model(inputs)
        model.padding_exact = False
        with backbone_image_shapes(model, shapes):
            stock = model(inputs)
    w = shapes[1][1]  # the 640 x 426 image
    for got, outside in ((outs, True), (stock, False)):
        zero = [(o[1, :, :, cells(w, 640 // o.shape[-1]):] == 0).all() for o in got]
        assert all(zero) == outside
    assert all(torch.equal(a, b) for a, b in zip(plain, stock))


@pytest.mark.parametrize('kwargs', [
    dict(), dict(with_phi_p=False), dict(with_phi_c=False), dict(ppe_cfg=dict(embedding='lrn')),
    dict(ppe_cfg=dict(with_norms=False), ppe_init='rand')])
def test_pervit_variants_alone_equal_batched(kwargs):
    """The ablations of Tables 1 / 5 (MHSA without Phi_p, Phi_p without Phi_c, the learnable
    offset table, Eq. 6 without the norms) on a two-conv C-stem (4 pixels per token: the grid
    each image owns is ceil(img / 4), not ceil(img / 16); measured 2.2-2.9 off when the mode
    assumed 16): each image alone equals it in a padded batch (a 96 x 66 and a 59 x 96 image,
    random pixels, random BatchNorm statistics; 17 and 15 tokens: the pooling reads the
    border)."""
    torch.manual_seed(0)
    model = PerViT(dict(embed_dims=[32, 32], depths=[1, 1], num_heads=2, stem_channels=[16, 32]),
                   out_indices=(0, 1), featmap_scales=(4, 0.5), padding_exact=True, **kwargs)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.normal_(0, 0.5)
                m.bias.normal_(0, 0.5)
    model.eval()
    shapes = [(96, 66), (59, 96)]
    inputs = torch.zeros(2, 3, 96, 96)
    for i, (h, w) in enumerate(shapes):
        inputs[i, :, :h, :w] = torch.randn(3, h, w)
    diffs = pervit_diffs(model, inputs, shapes)
    assert max(diffs) <= TOL, diffs
    assert min(pervit_diffs(model, inputs, shapes, bind=False)) > 1e-2


def test_pervit_refuses_a_stem_norm_over_the_map():
    arch = dict(embed_dims=[16], depths=[1], num_heads=2, stem_channels=[16])
    with pytest.raises(ValueError, match='padding_exact=True does not cover stem_norm_cfg'):
        PerViT(arch, out_indices=(0, ), stem_norm_cfg=dict(type='GN', num_groups=4),
               padding_exact=True)
    PerViT(arch, out_indices=(0, ), stem_norm_cfg=dict(type='GN', num_groups=4))


def cpvt_pyramid(inputs):
    """CPVT (3 layers, PEGs after 0 and 1) and a SimplePyramid on its last map, ViTDet-style,
    GroupNorm between the stride-4 transposed convolutions; trained-like norms."""
    torch.manual_seed(0)
    arch = dict(embed_dims=64, num_layers=3, num_heads=2, feedforward_channels=128)
    backbone = CPVT(arch, peg_positions=(0, 1), out_type='featmap', out_indices=(2, ),
                    padding_exact=True)
    backbone.init_weights()
    trained_like(backbone, inputs)
    neck = SimplePyramid(64, scales=SCALES, norm_cfg=dict(type='GN', num_groups=8),
                         padding_exact=True)
    neck.init_weights()
    gen = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for m in neck.modules():
            if isinstance(m, nn.GroupNorm):
                m.weight.uniform_(0.5, 1.5, generator=gen)
                m.bias.normal_(0, 0.5, generator=gen)
    return backbone, neck.eval()


@pytest.fixture(scope='module')
def pyramid(batch):
    """The CPVT + SimplePyramid and its images' pyramid maps alone."""
    inputs, shapes = batch
    backbone, neck = cpvt_pyramid(inputs)
    return backbone, neck, alone_outputs(lambda x: neck(backbone(x)), inputs, shapes)


def pyramid_diffs(backbone, neck, inputs, shapes, masks=True, alone=None):
    if alone is None:
        alone = alone_outputs(lambda x: neck(backbone(x)), inputs, shapes)
    with torch.no_grad():
        with backbone_image_shapes(backbone, shapes):
            feats = backbone(inputs)
        padding_masks = feature_padding_masks(shapes, inputs.shape[-2:],
                                              [f.shape[-2:] for f in feats])
        batched = neck(feats, padding_masks=padding_masks if masks else None)
    return compare(batched, alone, shapes, inputs.shape[-2])


def test_cpvt_simple_pyramid_alone_equals_batched(batch, pyramid):
    """CPVT's stride-16 map through the pyramid to strides 4 / 8 / 16 / 32: each image's
    cells equal its own alone (measured 1.4e-6); the stock pyramid on the same exact CPVT
    maps differs at stride 4 (GroupNorm over the padded map) and stride 32 (the 27-column
    max-pooling reads a padded cell)."""
    inputs, shapes = batch
    backbone, neck, alone = pyramid
    diffs = pyramid_diffs(backbone, neck, inputs, shapes, alone=alone)
    assert max(diffs) <= TOL, diffs
    stock = pyramid_diffs(backbone, neck, inputs, shapes, masks=False, alone=alone)
    assert stock[0] > 1e-2 and stock[3] > 1e-2, stock


@pytest.mark.parametrize('step,out', [('norm', 0), ('pool', 3)])
def test_simple_pyramid_fails_without_each_step(batch, pyramid, step, out, monkeypatch):
    inputs, shapes = batch
    backbone, neck, alone = pyramid
    monkeypatch.setattr(neck, '_exact_steps', PYRAMID_STEPS - {step})
    diffs = pyramid_diffs(backbone, neck, inputs, shapes, alone=alone)
    assert diffs[out] > 1e-2 and all(d <= TOL for k, d in enumerate(diffs) if k != out), diffs


def test_simple_pyramid_outputs_zero_beyond_the_image_and_switch(batch, pyramid):
    """Zero beyond the cells the image has alone (v * scale, pooled: rounded up); the mode is
    what ``takes_padding_masks`` says (the detectors pass masks only then); without masks
    it is the stock pyramid, bit for bit."""
    inputs, shapes = batch
    backbone, neck, _ = pyramid
    with torch.no_grad():
        with backbone_image_shapes(backbone, shapes):
            feats = backbone(inputs)
        masks = feature_padding_masks(shapes, inputs.shape[-2:], [feats[0].shape[-2:]])
        outs = neck(feats, padding_masks=masks)
        plain = neck(feats)
    v = cells(shapes[1][1], 16)  # 27 columns of the 640 x 426 image
    for o, s in zip(outs, SCALES):
        own = v * s if s >= 1 else cells(v, round(1 / s))
        assert (o[1, :, :, int(own):] == 0).all() and (o[1, :, :, int(own) - 1] != 0).any()
    stock = SimplePyramid(64, scales=SCALES, norm_cfg=dict(type='GN', num_groups=8))
    stock.load_state_dict(neck.state_dict())
    stock.eval()
    with torch.no_grad():
        assert all(torch.equal(a, b) for a, b in zip(plain, stock(feats)))
    assert neck.takes_padding_masks and not stock.takes_padding_masks


def test_simple_pyramid_refuses_an_uncovered_norm():
    with pytest.raises(ValueError, match='padding_exact=True does not cover norm_cfg'):
        SimplePyramid(32, norm_cfg=dict(type='IN'), padding_exact=True)
    SimplePyramid(32, scales=(2, 1), norm_cfg=dict(type='IN'), padding_exact=True)  # no norm


def test_shipped_cpvt_segmentor_passes_the_masks_to_its_pyramid():
    """configs/cpvt/fpn_cpvt-s_8xb4-40k_ade20k-512x512.py as mmposenc.PaddingExactEncoderDecoder
    with both modes on (narrowed: 4 layers of width 64, 2 PEGs): its ``extract_feat`` binds the image
    sizes for CPVT and gives ``neck=[SimplePyramid, FPN]``'s pyramid the masks of CPVT's maps,
    so the pyramid's maps of a 512 x 683 image (ADE20K's size after the test Resize; 43
    tokens: the stride-32 pooling reads the border) in a batch padded to 512 x 704 equal its
    maps alone; the pyramid without masks (its mode off) differs."""
    pytest.importorskip('mmseg')
    from mmengine.config import Config

    from mmposenc.registry import MODELS
    cfg = Config.fromfile('configs/cpvt/fpn_cpvt-s_8xb4-40k_ade20k-512x512.py').model
    cfg.type = 'mmposenc.PaddingExactEncoderDecoder'
    cfg.backbone.update(arch=dict(embed_dims=64, num_layers=4, num_heads=2,
                                  feedforward_channels=128), out_indices=(0, 1, 2, 3),
                        peg_positions=(0, 1),
                        init_cfg=None, padding_exact=True, drop_path_rate=0.)
    cfg.neck[0].update(in_channels=64, padding_exact=True)
    cfg.neck[0].norm_cfg = dict(type='GN', num_groups=8)
    cfg.neck[1].update(in_channels=[64] * 4, out_channels=32)
    cfg.decode_head.update(channels=32, in_channels=[32] * 4)
    import mmposenc.models.detectors  # noqa: F401  (PaddingExactEncoderDecoder)
    torch.manual_seed(0)
    model = MODELS.build(cfg)
    trained_like(model.backbone, torch.randn(1, 3, 64, 64))
    model.eval()
    pyramid = model.neck[0]
    maps = []
    pyramid.register_forward_hook(lambda m, i, o: maps.append(o))
    shapes = [(512, 683), (512, 704)]
    inputs = torch.randn(2, 3, 512, 704)
    inputs[0, :, :, 683:] = 0
    metas = [dict(img_shape=s) for s in shapes]

    def pyramid_diffs():
        maps.clear()
        with torch.no_grad():
            with model._image_shapes(inputs, metas):
                model.extract_feat(inputs)
            model.extract_feat(inputs[:1, :, :, :683])
        batched, alone = maps
        return compare(batched, [alone], shapes[:1], 512)

    assert max(pyramid_diffs()) <= TOL
    pyramid.padding_exact = False
    assert max(pyramid_diffs()) > 1e-2
