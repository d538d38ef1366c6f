"""PEGDeformableDETR: 'sine' = stock mmdet bit for bit with box refinement and two-stage; the PEG
modes on padded and unpadded (no-mask) batches; losses; errors. (The plain model's 'sine', the
PEGs' masks on the no-mask path and in every mode: test_encoder_pos_models.py.)"""
import copy

import pytest
import torch
from tiny_detr_cfgs import (build, deformable_detr_cfg, packed_inputs, randomise_pegs,
                            samples_on_grid)

pytest.importorskip('mmdet')

SHAPES = [(3, 96, 80), (3, 64, 112)]
SAME = [(3, 72, 72), (3, 72, 72)]
MULTIPLES = [(3, 96, 64), (3, 64, 128)]  # batch 96 x 128: multiples of the strides 16 and 32
VARIANTS = {
    'plain': dict(),
    'refine': dict(with_box_refine=True),
    # mmdet's two-stage proposal embedding is hard-wired to 256 channels
    'two-stage': dict(with_box_refine=True, as_two_stage=True, embed_dims=256),
}


def run_modes(model, shapes, seed=0, num_items=None):
    packed = packed_inputs(shapes, num_items=num_items, seed=seed)
    model.eval()
    data = model.data_preprocessor(copy.deepcopy(packed), False)
    with torch.no_grad():
        tensors = model(**data, mode='tensor')
        preds = model(**data, mode='predict')
    model.train()
    data = model.data_preprocessor(copy.deepcopy(packed), True)
    losses = model(**data, mode='loss')
    return tensors, losses, preds


def _flat(x):
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (list, tuple)):
        return [t for item in x for t in _flat(item)]
    return []


@pytest.mark.parametrize('variant,shapes', [('refine', MULTIPLES), ('two-stage', MULTIPLES)],
                         ids=['refine-padded', 'two-stage-padded'])
def test_sine_is_bit_identical_to_mmdet(variant, shapes):
    """Padded batches whose size is a multiple of every stride (mmdet's nearest-interpolated
    masks are exact there; elsewhere ours differ on purpose:
    test_padding_exact_detectors.py), for the box-refine and two-stage variants. (The plain
    model, padded and on the no-mask path:
    test_encoder_pos_models.py::test_sine_is_bit_identical_to_stock.)"""
    torch.manual_seed(0)
    stock = build(deformable_detr_cfg(**VARIANTS[variant]))
    ours = build(deformable_detr_cfg(type='mmposenc.PEGDeformableDETR', encoder_pos='sine',
                                     **VARIANTS[variant]))
    assert set(stock.state_dict()) == set(ours.state_dict())
    ours.load_state_dict(stock.state_dict(), strict=True)
    t_stock, l_stock, p_stock = run_modes(stock, shapes)
    t_ours, l_ours, p_ours = run_modes(ours, shapes)
    for a, b in zip(_flat(t_stock), _flat(t_ours)):
        assert torch.equal(a, b)
    assert l_stock.keys() == l_ours.keys()
    for key in l_stock:
        assert torch.equal(l_stock[key], l_ours[key]), key
    for a, b in zip(p_stock, p_ours):
        assert torch.equal(a.pred_instances.bboxes, b.pred_instances.bboxes)


@pytest.mark.parametrize('variant,encoder_pos,shapes', [
    ('plain', 'peg', SHAPES), ('plain', 'peg', SAME), ('refine', 'sine+peg', SHAPES),
    ('two-stage', 'peg', SHAPES), ('two-stage', 'none', SAME), ('refine', 'cape', SHAPES),
    ('plain', 'cape', SAME), ('two-stage', 'cape+peg', SHAPES)
], ids=['plain-peg-padded', 'plain-peg-no-mask', 'refine-sine+peg-padded',
        'two-stage-peg-padded', 'two-stage-none-no-mask', 'refine-cape-padded',
        'plain-cape-no-mask', 'two-stage-cape+peg-padded'])
def test_modes_loss_predict_tensor(variant, encoder_pos, shapes):
    torch.manual_seed(1)
    model = build(deformable_detr_cfg(type='mmposenc.PEGDeformableDETR',
                                      encoder_pos=encoder_pos, **VARIANTS[variant]))
    _, losses, preds = run_modes(model, shapes, num_items=[2, 3])
    assert all(torch.isfinite(v).all() for v in losses.values())
    assert len(preds) == 2 and preds[0].pred_instances.bboxes.shape[-1] == 4
    sum(v for k, v in losses.items() if 'loss' in k).backward()
    for name, p in model.named_parameters():
        if p.requires_grad and not name.startswith('backbone'):
            assert p.grad is not None, name


@pytest.mark.parametrize('encoder_pos', ['sine', 'peg', 'cape', 'cape+peg'])
def test_encoder_output_is_padding_invariant(encoder_pos):
    """Whole encoder (positions, deformable attention, PEGs) on the valid tokens of each level
    of a padded batch = the same image alone (no mask), for random sizes; two levels."""
    torch.manual_seed(1)
    pegs = dict(peg_after=(-1, 0)) if 'peg' in encoder_pos else {}
    model = build(deformable_detr_cfg(type='mmposenc.PEGDeformableDETR',
                                      encoder_pos=encoder_pos, **pegs))
    randomise_pegs(model).eval()
    gen = torch.Generator().manual_seed(2)
    # mmdet initialises the offset and attention-weight projections to zero weights: the
    # positions would not reach the output at all
    for layer in model.encoder.layers:
        layer.self_attn.sampling_offsets.weight.data.normal_(0, 0.5, generator=gen)
        layer.self_attn.attention_weights.weight.data.normal_(0, 0.5, generator=gen)
    worst = 0.
    for _ in range(6):
        bs = int(torch.randint(1, 4, (1, ), generator=gen))
        sizes = [tuple(int(v) for v in torch.randint(1, 6, (2, ), generator=gen))
                 for _ in range(bs)]
        H, W = max(h for h, _ in sizes), max(w for _, w in sizes)
        # levels of stride 16 and 32: (2H, 2W) and (H, W) cells
        feats = (torch.randn(bs, 32, 2 * H, 2 * W, generator=gen),
                 torch.randn(bs, 32, H, W, generator=gen))
        with torch.no_grad():
            enc, _ = model.pre_transformer(feats, samples_on_grid(sizes, (H, W)))
            memory = model.forward_encoder(**enc)['memory'].split([4 * H * W, H * W], 1)
            for i, (h, w) in enumerate(sizes):
                crops = tuple(f[i:i + 1, :, :s * h, :s * w].contiguous()
                              for f, s in zip(feats, (2, 1)))
                enc1, _ = model.pre_transformer(crops, samples_on_grid([(h, w)], (h, w)))
                assert enc1['feat_mask'] is None
                alone = model.forward_encoder(**enc1)['memory'].split([4 * h * w, h * w], 1)
                for s, m, a in zip((2, 1), memory, alone):
                    got = m[i].view(s * H, s * W, -1)[:s * h, :s * w]
                    worst = max(worst, (got - a[0].view(s * h, s * w, -1)).abs().max().item())
    assert worst <= 1e-5


def test_peg_mode_skips_sine_and_keeps_level_embed():
    model = build(deformable_detr_cfg(type='mmposenc.PEGDeformableDETR', encoder_pos='peg'))
    # stride-32 and stride-64 maps of a 192 x 128 batch (multiples of 64: mmdet's
    # nearest-interpolated masks are exact there and equal ours, see
    # test_padding_exact_detectors.py)
    feats = (torch.randn(2, 32, 6, 4), torch.randn(2, 32, 3, 2))
    from mmdet.models.detectors.deformable_detr import DeformableDETR
    from mmdet.structures import DetDataSample
    samples = []
    for shape in ((192, 128), (128, 64)):
        s = DetDataSample()
        s.set_metainfo(dict(img_shape=shape, batch_input_shape=(192, 128)))
        samples.append(s)
    enc, dec = model.pre_transformer(feats, samples)
    stock_enc, stock_dec = DeformableDETR.pre_transformer(model, feats, samples)
    assert enc['feat_mask'].any()
    level = torch.cat([model.level_embed[i].expand(2, n, -1)
                       for i, n in enumerate((24, 6))], 1)
    assert torch.equal(enc['feat_pos'], level)
    for key in ('feat', 'feat_mask', 'spatial_shapes', 'level_start_index', 'valid_ratios'):
        assert torch.equal(enc[key], stock_enc[key]), key
    for key in dec:
        assert torch.equal(dec[key], stock_dec[key]), key
    model_no_level = build(deformable_detr_cfg(type='mmposenc.PEGDeformableDETR',
                                               encoder_pos='none', level_embed=False))
    assert model_no_level.pre_transformer(feats, samples)[0]['feat_pos'] is None


def test_shared_level_peg_and_state_dict():
    stock = build(deformable_detr_cfg())
    ours = build(deformable_detr_cfg(
        type='mmposenc.PEGDeformableDETR', encoder_pos='peg', peg_after=(-1, 0),
        peg_cfg=dict(type='mmposenc.MultiLevelMaskedPEG', share_weights=True)))
    extra = set(ours.state_dict()) - set(stock.state_dict())
    assert set(stock.state_dict()) <= set(ours.state_dict())
    assert all(k.startswith('encoder.pegs.') for k in extra)
    assert len(ours.encoder.pegs) == 2 and all(len(p.pegs) == 1 for p in ours.encoder.pegs)
    _, losses, _ = run_modes(ours, SHAPES, num_items=[1, 2])
    assert all(torch.isfinite(v).all() for v in losses.values())


def test_empty_gt_zero_box_losses_positive_cls():
    torch.manual_seed(2)
    model = build(deformable_detr_cfg(type='mmposenc.PEGDeformableDETR', encoder_pos='peg'))
    _, losses, _ = run_modes(model, SHAPES, num_items=[0, 0])
    assert losses['loss_cls'] > 0
    assert losses['loss_bbox'] == 0 and losses['loss_iou'] == 0


def test_bad_config_raises():
    with pytest.raises(ValueError, match='encoder_pos'):
        build(deformable_detr_cfg(type='mmposenc.PEGDeformableDETR', encoder_pos='rope'))
    with pytest.raises(ValueError, match='peg_after'):
        build(deformable_detr_cfg(type='mmposenc.PEGDeformableDETR', peg_after=(5, )))
