"""Padding-exact backbones (issue 20, item 1: ResNet, PVTPEG, SwinPEG, CPVT): on real COCO128
images through mmdet's pipeline and DetDataPreprocessor (a 480 x 640 and a 640 x 426 image
batched to 640 x 640), every stage's map of each image, on its ``ceil(size / stride)`` cells,
equals the map of the image alone, with trained-like weights (random norm affine parameters,
BatchNorm statistics measured on the images then shifted, non-zero residual norms: freshly
initialised norms keep the padded region at zero through a CNN and hide every border effect).
Each masking step is left out in turn to show that the comparison fails without it. One model
of each kind and its images' outputs alone serve its tests (alone, nothing is bound: the stock
computation, which no step of the mode changes).

The 426 px side is chosen so that every border case occurs: ResNet's max-pool reads beyond the
image (ceil(426 / 2) = 213 is odd) and so do its stride-2 convolutions (107, 27); PVT's patch
embeddings have partial patches (426 / 4 = 106.5, then 107, 54, 27 cells) and its reduced keys a
partial block at the border (107 = 13 * 8 + 3, 54 = 13 * 4 + 2, 27 = 13 * 2 + 1).
"""
import copy

import pytest
import torch
from torch import nn

from mmposenc.models.backbones import CPVT, PVTPEG, SwinPEG
from mmposenc.models.backbones.cpvt import EXACT_STEPS as CPVT_STEPS
from mmposenc.models.backbones.pvt_peg import EXACT_STEPS as PVT_STEPS
from mmposenc.models.backbones.swin_peg import EXACT_STEPS as SWIN_STEPS
from mmposenc.models.padding_exact import backbone_image_shapes

pytest.importorskip('mmdet')

IMAGES = ('000000000009.jpg', '000000000404.jpg')  # 480 x 640 and 640 x 426
SHAPES = [(480, 640), (640, 426)]
TOL = 1e-5


def load_batch(root):
    """The two images through LoadImageFromFile + PackDetInputs and DetDataPreprocessor."""
    from mmcv.transforms import LoadImageFromFile
    from mmdet.datasets.transforms import PackDetInputs
    from mmdet.models.data_preprocessors import DetDataPreprocessor
    packed = []
    for i, name in enumerate(IMAGES):
        results = LoadImageFromFile()(dict(img_path=f'{root}/train2017/{name}', img_id=i))
        packed.append(PackDetInputs(meta_keys=('img_id', 'img_path', 'ori_shape', 'img_shape',
                                                'scale_factor'))(results))
    pre = DetDataPreprocessor(mean=[123.675, 116.28, 103.53], std=[58.395, 57.12, 57.375],
                              bgr_to_rgb=True, pad_size_divisor=32)
    data = pre(dict(inputs=[p['inputs'] for p in packed],
                    data_samples=[copy.deepcopy(p['data_samples']) for p in packed]), False)
    shapes = [tuple(s.img_shape) for s in data['data_samples']]
    assert shapes == SHAPES and tuple(data['inputs'].shape[-2:]) == (640, 640)
    return data['inputs'], shapes


def trained_like(model, inputs, seed=0):
    """Trained-like norms: random affine parameters (BatchNorm and LayerNorm) and BatchNorm
    statistics measured on ``inputs`` (as training leaves them: the maps are normalised, and
    the padded region is not zero after a norm), then shifted at random."""
    gen = torch.Generator().manual_seed(seed)
    bns = [m for m in model.modules() if isinstance(m, nn.BatchNorm2d)]
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, (nn.BatchNorm2d, nn.LayerNorm)):
                m.weight.uniform_(0.5, 1.5, generator=gen)
                m.bias.normal_(0, 0.5, generator=gen)
        if bns:
            for m in bns:
                m.reset_running_stats()
                m.momentum = None  # the cumulative average of one batch: its statistics
                m.train()
            model(inputs)
            for m in bns:
                m.running_mean.add_(torch.randn(m.num_features, generator=gen) * 0.1)
                m.running_var.mul_(torch.empty(m.num_features).uniform_(0.8, 1.25,
                                                                        generator=gen))
    model.eval()  # (mmdet's ResNet.train returns None)
    return model


def alone_outputs(model, inputs, shapes):
    """Each image's outputs alone (its own pixels only; no sizes bound)."""
    with torch.no_grad():
        return [model(inputs[i:i + 1, :, :h, :w]) for i, (h, w) in enumerate(shapes)]


def alone_vs_batched(model, inputs, shapes, bind=True, alone=None):
    """Largest |difference| per stage between each image alone (its own pixels only) and in
    the padded batch, on the image's ceil(size / stride) cells; ``alone``: the images'
    outputs alone (:func:`alone_outputs`), if already computed."""
    if alone is None:
        alone = alone_outputs(model, inputs, shapes)
    with torch.no_grad():
        with backbone_image_shapes(model, shapes if bind else None):
            batched = model(inputs)
        diffs = [0.] * len(batched)
        H = inputs.shape[-2]
        for i, (h, w) in enumerate(shapes):
            for k, (a, b) in enumerate(zip(alone[i], batched)):
                s = H // b.shape[-2]
                assert a.shape[-2:] == (-(-h // s), -(-w // s))
                d = (b[i:i + 1, :, :a.shape[-2], :a.shape[-1]] - a).abs()
                d = d.nan_to_num(float('inf')).max().item()  # NaN (-inf - -inf) fails too
                diffs[k] = max(diffs[k], d)
    return diffs


@pytest.fixture(scope='module')
def batch(coco128_root):
    return load_batch(coco128_root)


def small_pvt(inputs, **kwargs):
    torch.manual_seed(0)
    arch = dict(embed_dims=[32, 64, 128, 256], num_heads=[1, 2, 4, 8], mlp_ratios=[2, 2, 2, 2],
                depths=[1, 1, 1, 1], sr_ratios=[8, 4, 2, 1])
    model = PVTPEG(arch, out_indices=(0, 1, 2, 3), drop_path_rate=0., **kwargs)
    model.init_weights()
    return trained_like(model, inputs)


def small_resnet(inputs, depth=18, **kwargs):
    from mmposenc.models.detectors import PaddingExactResNet
    torch.manual_seed(0)
    model = PaddingExactResNet(depth=depth, base_channels=16, **kwargs)  # a quarter wide
    model.init_weights()  # zero-initialised residual norms: trained_like makes them non-zero
    return trained_like(model, inputs)


def small_swin(inputs, **kwargs):
    """Two blocks per stage: a window block and a shifted-window block."""
    torch.manual_seed(0)
    model = SwinPEG(dict(embed_dims=32, depths=[2, 2, 2, 2], num_heads=[1, 2, 4, 8]),
                    out_indices=(0, 1, 2, 3), drop_path_rate=0., **kwargs)
    model.init_weights()
    return trained_like(model, inputs)


def small_cpvt(inputs, **kwargs):
    torch.manual_seed(0)
    arch = dict(embed_dims=64, num_layers=3, num_heads=2, feedforward_channels=128)
    model = CPVT(arch, peg_positions=(0, 1), **kwargs)
    model.init_weights()
    return trained_like(model, inputs)


def resnet_steps():
    from mmposenc.models.detectors.padding_exact.resnet import EXACT_STEPS
    return EXACT_STEPS


def built_once(build):
    """A module fixture's getter: ``build(key)`` once per key, then the same object."""
    made = {}

    def get(key):
        if key not in made:
            made[key] = build(key)
        return made[key]
    return get


@pytest.fixture(scope='module')
def resnets(batch):
    """depth -> (padding-exact ResNet of the four stages, its images' outputs alone)."""
    inputs, shapes = batch

    def build(depth):
        model = small_resnet(inputs, depth=depth, out_indices=(0, 1, 2, 3))
        return model, alone_outputs(model, inputs, shapes)
    return built_once(build)


@pytest.fixture(scope='module')
def pvt(batch):
    """The padding-exact PVTPEG and its images' outputs alone."""
    model = small_pvt(batch[0], padding_exact=True)
    return model, alone_outputs(model, *batch)


@pytest.fixture(scope='module')
def swin(batch):
    """The padding-exact SwinPEG and its images' outputs alone."""
    model = small_swin(batch[0], padding_exact=True)
    return model, alone_outputs(model, *batch)


@pytest.mark.parametrize('depth', [18, 50])
def test_resnet_stages_alone_equal_batched(batch, resnets, depth):
    """mmdet's ResNet (BasicBlock and Bottleneck) in padding-exact mode: exact in float64
    (<= 1e-10 where the stock batch is off by > 1); in float32 the image alone and the batch
    run the same operations on maps of other widths (oneDNN sums in another order), off by
    <= 1e-5 relative to the maps' largest value (measured at full width: R18 1.3e-5 on maps
    up to 19, R50 1.3e-4 on maps up to 38, 1.4e-13 in float64)."""
    inputs, shapes = batch
    model, alone = resnets(depth)
    with torch.no_grad():
        scale = max(o.abs().max().item() for o in model(inputs))
    diffs = alone_vs_batched(model, inputs, shapes, alone=alone)
    assert max(diffs) <= TOL * scale, (diffs, scale)
    model = copy.deepcopy(model).double()  # the float32 model serves the other tests
    inputs = inputs.double()
    alone = alone_outputs(model, inputs, shapes)
    diffs = alone_vs_batched(model, inputs, shapes, alone=alone)
    assert max(diffs) <= 1e-10, diffs
    stock = alone_vs_batched(model, inputs, shapes, bind=False, alone=alone)
    assert min(stock) > 1, stock


@pytest.mark.parametrize('step', ['conv', 'maxpool'])
def test_resnet_fails_without_each_step(batch, resnets, step, monkeypatch):
    """Without zeroing the padding before the convolutions that read neighbours, or without
    ``-inf`` before the stem's max-pool, the first map already differs (the 426 px side makes
    the max-pool read beyond the image: ceil(426 / 2) = 213 is odd)."""
    inputs, shapes = batch
    model, alone = resnets(18)
    monkeypatch.setattr(model, '_exact_steps', resnet_steps() - {step})
    assert alone_vs_batched(model, inputs, shapes, alone=alone)[0] > 0.1


def test_pvt_stages_alone_equal_batched(batch, pvt):
    inputs, shapes = batch
    model, alone = pvt
    diffs = alone_vs_batched(model, inputs, shapes, alone=alone)
    assert max(diffs) <= TOL, diffs
    stock = alone_vs_batched(model, inputs, shapes, bind=False, alone=alone)
    assert min(stock) > 1, stock


@pytest.mark.parametrize('step,first_stage', [('patch_embed', 1), ('peg', 0), ('keys', 0)])
def test_pvt_fails_without_each_step(batch, pvt, step, first_stage, monkeypatch):
    """Each masking step is needed: the patch embedding of stage 2 onwards reads the padded
    cell in its partial patch (stage 1's is the image, zero-padded by the preprocessor); the
    PEG reads padded neighbours; without the key mask the image attends to padded keys and to
    the reduced key that straddles its border (which it does not have alone)."""
    inputs, shapes = batch
    model, alone = pvt
    monkeypatch.setattr(model, '_exact_steps', PVT_STEPS - {step})
    diffs = alone_vs_batched(model, inputs, shapes, alone=alone)
    assert max(diffs[:first_stage], default=0) <= TOL and diffs[first_stage] > 1e-3, diffs


def test_pvt_partial_reduced_key_is_masked(batch, pvt, monkeypatch):
    """The reduced key cell at the image border (107 = 13 * 8 + 3 cells at stride 4) is not a
    key of the image alone: counting it (ceil instead of floor) breaks the equality."""
    from mmposenc.models.backbones import pvt_peg
    inputs, shapes = batch
    model, alone = pvt
    monkeypatch.setattr(pvt_peg, 'reduced_valid_cells',
                        lambda v, sr: torch.div(v + sr - 1, sr, rounding_mode='floor'))
    assert alone_vs_batched(model, inputs, shapes, alone=alone)[0] > 1e-3


def test_pvt_map_smaller_than_sr_ratio():
    """An image whose stage-1 map (5 x 7) is smaller than the reduction (8): alone its one key
    is the map zero-padded to 8 x 8, which the batch reproduces by zeroing its padded cells
    before the reduction (``'sr_input'``; without it the batch's key reads the padding)."""
    torch.manual_seed(0)
    inputs = torch.randn(2, 3, 64, 64)
    shapes = [(20, 28), (64, 64)]
    inputs[0, :, 20:] = 0
    inputs[0, :, :, 28:] = 0
    model = small_pvt(inputs, padding_exact=True)
    assert max(alone_vs_batched(model, inputs, shapes)) <= TOL
    model._exact_steps = PVT_STEPS - {'sr_input'}
    assert alone_vs_batched(model, inputs, shapes)[0] > 1e-3


def test_swin_stages_alone_equal_batched(batch, swin):
    """SwinPEG in padding-exact mode gives each image what stock Swin gives it alone (its own
    window padding of zeros included: nothing of stock Swin changes); float32 differences
    measured 0, float64 <= 1e-14."""
    inputs, shapes = batch
    model, alone = swin
    diffs = alone_vs_batched(model, inputs, shapes, alone=alone)
    assert max(diffs) <= TOL, diffs
    stock = alone_vs_batched(model, inputs, shapes, bind=False, alone=alone)
    assert min(stock) > 1, stock


@pytest.mark.parametrize('step,first_stage', [('window_input', 0), ('peg', 0), ('keys', 1),
                                              ('downsample', 1)])
def test_swin_fails_without_each_step(batch, swin, step, first_stage, monkeypatch):
    """Each masking step is needed: windows and PEGs read padded cells, where the image alone
    has zeros; patch merging reads the padded cell of its partial 2 x 2 patch; without the key
    mask, the shifted window at the image's extent (stage 2: 54 cells padded to 56, a window
    from 52 to 59) holds keys the image alone does not have (stage 1's windows happen to end
    at the extent for both images)."""
    inputs, shapes = batch
    model, alone = swin
    monkeypatch.setattr(model, '_exact_steps', SWIN_STEPS - {step})
    diffs = alone_vs_batched(model, inputs, shapes, alone=alone)
    assert max(diffs[:first_stage], default=0) <= TOL and diffs[first_stage] > 1e-3, diffs


@pytest.mark.parametrize('out_type', ['featmap', 'cls_token', 'avg_featmap'])
def test_cpvt_alone_equals_batched(batch, out_type):
    """CPVT (stride 16: 426 / 16 = 26.6, a partial patch) with its class token: patch maps,
    class token and the average over the image's tokens equal the image's alone."""
    inputs, shapes = batch
    model = small_cpvt(inputs, out_type=out_type, with_cls_token=True, out_indices=(1, 2),
                       padding_exact=True)
    with torch.no_grad():
        with backbone_image_shapes(model, shapes):
            batched = model(inputs)
        for i, (h, w) in enumerate(shapes):
            alone = model(inputs[i:i + 1, :, :h, :w])
            for a, b in zip(alone, batched):
                b = b[i:i + 1]
                if out_type == 'featmap':
                    b = b[..., :a.shape[-2], :a.shape[-1]]
                assert (a - b).abs().max() <= TOL
    stock_diff = 0.
    with torch.no_grad():
        stock = model(inputs)
        alone = model(inputs[1:, :, :shapes[1][0], :shapes[1][1]])
        for a, b in zip(alone, stock):
            b = b[1:] if out_type != 'featmap' else b[1:, :, :a.shape[-2], :a.shape[-1]]
            stock_diff = max(stock_diff, (a - b).abs().max().item())
    assert stock_diff > 1e-2


@pytest.mark.parametrize('step', ['peg', 'keys'])
def test_cpvt_fails_without_each_step(batch, step):
    inputs, shapes = batch
    model = small_cpvt(inputs, out_type='featmap', out_indices=(0, ), padding_exact=True)
    model._exact_steps = CPVT_STEPS - {step}
    assert alone_vs_batched(model, inputs, shapes)[0] > 1e-3


@pytest.mark.parametrize('kind', ['pvt', 'swin', 'resnet'])
def test_outputs_are_zero_outside_each_image(request, batch, kind, monkeypatch):
    """The padded cells of the returned maps are zero (a stock neck reads zeros there, as it
    reads its own zero padding on the image alone); not without the ``'outputs'`` step."""
    inputs, shapes = batch
    model = (request.getfixturevalue('resnets')(18) if kind == 'resnet' else
             request.getfixturevalue(kind))[0]
    for steps, zero in ((model._exact_steps, True),
                        (model._exact_steps - {'outputs'}, False)):
        monkeypatch.setattr(model, '_exact_steps', steps)
        with torch.no_grad(), backbone_image_shapes(model, shapes):
            outs = model(inputs)
        h, w = shapes[1]  # the 640 x 426 image
        outside = [o[1, :, :, -(-w // (640 // o.shape[-1])):] for o in outs]
        assert all((o == 0).all() for o in outside) == zero


def test_stock_without_binding_and_with_padding_exact_false(batch, pvt):
    """Without the image sizes bound (a plain ``backbone(x)``), or with the mode off, the
    backbone is the stock one, bit for bit."""
    from mmdet.models.backbones import ResNet
    inputs, shapes = batch
    exact = pvt[0]
    stock = small_pvt(inputs)
    with torch.no_grad():
        with backbone_image_shapes(stock, shapes):
            ref = stock(inputs)
        got = exact(inputs)
    assert all(torch.equal(a, b) for a, b in zip(ref, got))
    model = small_resnet(inputs, out_indices=(3, ), padding_exact=False)
    plain = ResNet(depth=18, base_channels=16, out_indices=(3, ))
    plain.load_state_dict(model.state_dict())  # the same state dict both ways
    plain.eval()
    with torch.no_grad():
        with backbone_image_shapes(model, shapes):
            got = model(inputs)[0]
        assert torch.equal(got, plain(inputs)[0])


@pytest.mark.parametrize('kwargs', [dict(avg_down=True), dict(with_cp=True),
                                    dict(norm_cfg=dict(type='GN', num_groups=8))])
def test_resnet_refuses_what_it_does_not_cover(kwargs):
    from mmposenc.models.detectors import PaddingExactResNet
    with pytest.raises(ValueError, match='padding_exact=True does not cover'):
        PaddingExactResNet(depth=18, **kwargs)
    PaddingExactResNet(depth=18, padding_exact=False, **kwargs)


@pytest.mark.parametrize('kwargs', [dict(with_pos_embed=True), dict(peg_cfg=dict(
    padding='none')), dict(out_type='cls_token', out_indices=(3, ), arch=dict(
        PVTPEG.arch_zoo['tiny'], sr_ratios=[8, 4, 2, 1]))])
def test_pvt_refuses_what_it_does_not_cover(kwargs):
    with pytest.raises(ValueError, match='padding_exact=True does not cover'):
        PVTPEG(padding_exact=True, **kwargs)


@pytest.mark.parametrize('peg_cfg', [dict(padding='none'), dict(num_layers=2)])
def test_swin_refuses_what_it_does_not_cover(peg_cfg):
    with pytest.raises(ValueError, match='padding_exact=True does not cover'):
        SwinPEG(dict(embed_dims=32, depths=[1], num_heads=[1]), out_indices=(0, ),
                peg_cfg=peg_cfg, padding_exact=True)


def test_binding_must_fit_the_batch():
    model = PVTPEG(padding_exact=True)
    with backbone_image_shapes(model, [(64, 64)]), pytest.raises(ValueError,
                                                                  match='do not fit'):
        model(torch.zeros(2, 3, 32, 32))
