"""PEGConditionalDETR's ``ref_sine_feats``: the decoder's reference-point sine at any width.

mmdet 3.3's ConditionalDetrTransformerDecoder encodes the reference points with
``coordinate_to_encoding``'s default of 128 features per axis (256 channels) whatever the
width; its cross-attention projects them with ``Linear(embed_dims, embed_dims)``, so a
Conditional-DETR of any other width fails in its first forward. ``ref_sine_feats='embed_dims'``
takes ``embed_dims // 2`` per axis (what mmdet's DAB-DETR decoder does); at width 256 that is
mmdet's 128, and the default ``'mmdet'`` is mmdet's decoder itself.
"""
import copy

import pytest
import torch
from tiny_detr_cfgs import build, conditional_detr_cfg, packed_inputs


def _cfg(dims=256, num_heads=8, **kwargs):
    """The tests' 2+2-layer Conditional-DETR (tiny_detr_cfgs) cut to width ``dims``."""
    cfg = conditional_detr_cfg(**kwargs)
    cfg['neck']['out_channels'] = dims
    for part, names in (('encoder', ('self_attn_cfg', )),
                        ('decoder', ('self_attn_cfg', 'cross_attn_cfg'))):
        for name in names:
            cfg[part]['layer_cfg'][name].update(embed_dims=dims, num_heads=num_heads)
        cfg[part]['layer_cfg']['ffn_cfg'].update(embed_dims=dims, feedforward_channels=2 * dims)
    cfg['positional_encoding']['num_feats'] = dims // 2
    cfg['bbox_head']['embed_dims'] = dims
    return cfg


def _batch(model, shapes=((3, 64, 96), (3, 64, 96)), seed=0):
    """Two unpadded images (same size: mmdet's padding mask is exact) through the model's
    data preprocessor."""
    data = packed_inputs(list(shapes), num_items=[2] * len(shapes), seed=seed)
    return model.data_preprocessor(data, True)


@pytest.mark.parametrize('ref_sine_feats', ['mmdet', 'embed_dims', None])
def test_width_256_is_mmdet_bit_for_bit(ref_sine_feats):
    """At mmdet's width, either choice (and the default, None here) is mmdet's
    ConditionalDETR: same state dict, bit-identical decoder outputs and losses."""
    torch.manual_seed(0)
    ours_kwargs = {} if ref_sine_feats is None else dict(ref_sine_feats=ref_sine_feats)
    ours = build(_cfg(type='mmposenc.PEGConditionalDETR', encoder_pos='sine', **ours_kwargs))
    stock = build(_cfg())
    ours_sd, stock_sd = ours.state_dict(), stock.state_dict()
    assert list(ours_sd) == list(stock_sd)
    stock.load_state_dict(ours_sd)
    ours.eval(), stock.eval()  # no dropout; the BN of the backbone in eval mode in both
    data = _batch(ours)
    with torch.no_grad():
        out_ours = ours(data['inputs'], data['data_samples'], mode='tensor')
        out_stock = stock(data['inputs'], data['data_samples'], mode='tensor')
        loss_ours = ours(data['inputs'], data['data_samples'], mode='loss')
        loss_stock = stock(data['inputs'], data['data_samples'], mode='loss')
    for a, b in zip(out_ours, out_stock):
        assert torch.equal(a, b)
    assert list(loss_ours) == list(loss_stock)
    for key in loss_stock:
        assert torch.equal(loss_ours[key], loss_stock[key]), key


#: Conditional-DETR's first decoder layer sees content queries of zeros (mmdet's
#: ``torch.zeros_like(query_pos)``): the weights its self-attention applies to the content get
#: no gradient at any width (their biases do)
ZERO_CONTENT = {f'decoder.layers.0.self_attn.{n}.weight'
                for n in ('qcontent_proj', 'kcontent_proj', 'v_proj')}


def test_width_64_builds_and_trains_one_step():
    """Width 64 with ``ref_sine_feats='embed_dims'``: builds, one training step gives a finite
    loss and a finite gradient on every parameter, nonzero on all but the :data:`ZERO_CONTENT`
    weights; the step moves the reference-point path."""
    torch.manual_seed(0)
    cfg = _cfg(64, 4, type='mmposenc.PEGConditionalDETR', encoder_pos='sine',
               ref_sine_feats='embed_dims')
    # mmdet's zero-initialised last BN of each block would leave the convs before it at zero
    # gradient in the first step
    cfg['backbone'] = dict(cfg['backbone'], zero_init_residual=False)
    model = build(cfg)
    model.train()
    data = _batch(model)
    optim = torch.optim.SGD(model.parameters(), lr=0.1)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    losses = model(data['inputs'], data['data_samples'], mode='loss')
    loss = sum(v for v in losses.values())
    assert torch.isfinite(loss)
    loss.backward()
    params = dict(model.named_parameters())
    assert ZERO_CONTENT <= set(params)
    assert [n for n, p in params.items()
            if p.grad is None or not torch.isfinite(p.grad).all()] == []
    assert {n for n, p in params.items() if not p.grad.any()} == ZERO_CONTENT
    optim.step()
    # the reference-point path is trained: its weights move
    for name in ('decoder.ref_point_head.layers.0.weight', 'decoder.query_scale.layers.0.weight',
                 'decoder.layers.1.cross_attn.qpos_sine_proj.weight'):
        assert not torch.equal(params[name], before[name]), name
    model.eval()
    with torch.no_grad():
        scores, boxes = model(data['inputs'], data['data_samples'], mode='tensor')
    # per decoder layer, image and query: 3 sigmoid class scores, a box
    assert scores.shape == (2, 2, 5, 3) and boxes.shape == (2, 2, 5, 4)
    assert torch.isfinite(scores).all() and torch.isfinite(boxes).all()


@pytest.mark.parametrize('dims', [64, 128])
def test_other_width_with_mmdet_feats_is_a_clear_error(dims):
    """mmdet's 128 features per axis at another width: a one-line error naming the fix at
    build time (mmdet's own model builds and fails in its first forward)."""
    with pytest.raises(ValueError, match="ref_sine_feats='embed_dims'"):
        build(_cfg(dims, 4, type='mmposenc.PEGConditionalDETR', encoder_pos='sine'))
    stock = build(_cfg(dims, 4))
    data = _batch(stock)
    with pytest.raises(RuntimeError):
        stock(data['inputs'], data['data_samples'], mode='tensor')


def test_unknown_ref_sine_feats_is_refused():
    with pytest.raises(ValueError, match='ref_sine_feats'):
        build(_cfg(type='mmposenc.PEGConditionalDETR', ref_sine_feats='auto'))


def test_width_not_multiple_of_4_is_refused():
    """``embed_dims // 2`` features per axis are sin / cos pairs: the width must be a multiple
    of 4 (a clear error, not a shape error in the first forward)."""
    cfg = _cfg(66, 6, type='mmposenc.PEGConditionalDETR', encoder_pos='sine',
               ref_sine_feats='embed_dims')
    with pytest.raises(ValueError, match='multiple of 4'):
        build(copy.deepcopy(cfg))


def test_shipped_shapes_config_trains_a_step():
    """The shipped width-64 shapes config (its file, as a user builds it): the decoder's
    reference-point sine at the model's width, a padded batch of two demo-sized images gives
    finite losses and finite gradients reaching the decoder's spatial-query projections."""
    import os.path as osp

    from mmengine.config import Config
    from mmengine.registry import init_default_scope

    import mmposenc  # noqa: F401  (mmposenc:: bases)
    from mmposenc.models.detectors.peg_detr_family import WidthConditionalDetrTransformerDecoder
    from mmposenc.registry import MODELS
    repo = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
    cfg = Config.fromfile(osp.join(repo, 'configs', 'peg_detr',
                                   'conditional-detr-sine_r18-quarter_1xb4-2500i_shapes.py'))
    init_default_scope('mmdet')
    torch.manual_seed(0)
    model = MODELS.build(cfg.model)
    model.init_weights()
    assert type(model.decoder) is WidthConditionalDetrTransformerDecoder
    assert model.decoder.embed_dims == 64
    model.train()
    data = _batch(model, shapes=((3, 96, 128), (3, 128, 112)))  # the demo's 96-128 px
    losses = model(data['inputs'], data['data_samples'], mode='loss')
    loss = sum(losses.values())
    assert torch.isfinite(loss)
    loss.backward()
    for i, layer in enumerate(model.decoder.layers):
        grad = layer.cross_attn.qpos_sine_proj.weight.grad
        assert grad is not None and torch.isfinite(grad).all() and grad.any(), i
