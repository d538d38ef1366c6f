"""PEGDETR: encoder padding invariance on random small sizes (every encoder_pos); modes;
losses; decoder_pos. ('sine' = stock mmdet bit for bit, the state dict, gradients of the PEGs:
test_encoder_pos_models.py, over every model with the switch.)"""
import copy

import pytest
import torch
from tiny_detr_cfgs import build, detr_cfg, packed_inputs, randomise_pegs, samples_on_grid

pytest.importorskip('mmdet')

ENCODER_POS = ('sine', 'peg', 'sine+peg', 'cape', 'cape+peg', 'none')
SHAPES = [(3, 96, 80), (3, 64, 112)]


def run_modes(model, shapes, seed=0, num_items=None):
    """(tensor-mode outputs, losses, predictions) of ``model`` on one fixed batch."""
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


@pytest.mark.parametrize('encoder_pos', ENCODER_POS)
def test_encoder_output_is_padding_invariant(encoder_pos):
    """Whole encoder (sine / CAPE PE, masked attention, masked PEG) on valid tokens of a padded
    batch = the same image alone, unpadded, for many random sizes."""
    torch.manual_seed(1)
    pegs = dict(peg_after=(-1, 0, 1)) if 'peg' in encoder_pos else {}
    model = build(detr_cfg(type='mmposenc.PEGDETR', encoder_pos=encoder_pos, **pegs))
    randomise_pegs(model).eval()
    gen = torch.Generator().manual_seed(2)
    worst = 0.
    for _ in range(8):
        bs = int(torch.randint(1, 4, (1, ), generator=gen))
        sizes = [tuple(int(v) for v in torch.randint(1, 8, (2, ), generator=gen))
                 for _ in range(bs)]
        H, W = max(h for h, _ in sizes), max(w for _, w in sizes)
        feat = torch.randn(bs, 32, H, W, generator=gen)
        with torch.no_grad():
            enc, _ = model.pre_transformer((feat, ), samples_on_grid(sizes, (H, W)))
            memory = model.forward_encoder(**enc)['memory'].view(bs, H, W, -1)
            for i, (h, w) in enumerate(sizes):
                enc1, _ = model.pre_transformer((feat[i:i + 1, :, :h, :w].contiguous(), ),
                                                samples_on_grid([(h, w)], (h, w)))
                alone = model.forward_encoder(**enc1)['memory'].view(1, h, w, -1)
                worst = max(worst, (memory[i, :h, :w] - alone[0]).abs().max().item())
    assert worst <= 1e-5


@pytest.mark.parametrize('encoder_pos,decoder_pos', [('sine', 'sine'), ('peg', 'sine'),
                                                     ('sine+peg', 'none'), ('none', 'sine'),
                                                     ('peg', 'none'), ('cape', 'sine'),
                                                     ('cape+peg', 'none')])
def test_modes_loss_predict_tensor(encoder_pos, decoder_pos):
    torch.manual_seed(3)
    model = build(detr_cfg(type='mmposenc.PEGDETR', encoder_pos=encoder_pos,
                           decoder_pos=decoder_pos))
    assert len(model.encoder.pegs) == (1 if 'peg' in encoder_pos else 0)
    tensors, losses, preds = run_modes(model, SHAPES, num_items=[2, 3])
    cls_scores, bbox_preds = tensors  # (num_layers, bs, num_queries, num_classes + 1 | 4)
    assert cls_scores.shape == (2, 2, 5, 4) and bbox_preds.shape == (2, 2, 5, 4)
    assert all(torch.isfinite(v).all() for v in losses.values())
    assert len(preds) == 2 and preds[0].pred_instances.bboxes.shape == (5, 4)
    total = sum(v for k, v in losses.items() if 'loss' in k)
    total.backward()
    for name, p in model.named_parameters():
        if p.requires_grad and not name.startswith('backbone'):
            assert p.grad is not None, name


def test_empty_gt_zero_box_losses_positive_cls():
    torch.manual_seed(4)
    model = build(detr_cfg(type='mmposenc.PEGDETR', encoder_pos='peg'))
    _, losses, _ = run_modes(model, SHAPES, num_items=[0, 0])
    assert losses['loss_cls'] > 0
    assert losses['loss_bbox'] == 0 and losses['loss_iou'] == 0
    _, losses, _ = run_modes(model, SHAPES, num_items=[1, 1])
    assert losses['loss_cls'] > 0 and losses['loss_bbox'] > 0 and losses['loss_iou'] > 0


def test_decoder_none_uses_zero_key_pos():
    """decoder_pos='none' differs from 'sine' only through the memory positions. (That the
    PEGs get gradients: test_encoder_pos_models.py::test_gradients_reach_every_peg_parameter.)"""
    torch.manual_seed(5)
    sine = build(detr_cfg(type='mmposenc.PEGDETR', encoder_pos='peg', decoder_pos='sine'))
    none = build(detr_cfg(type='mmposenc.PEGDETR', encoder_pos='peg', decoder_pos='none'))
    none.load_state_dict(sine.state_dict())
    t_sine, _, _ = run_modes(sine, SHAPES)
    t_none, _, _ = run_modes(none, SHAPES)
    assert not torch.equal(t_sine[0], t_none[0])


def test_bad_config_raises():
    """(An unknown encoder_pos and peg_after past the last layer: test_encoder_pos_models.py::
    test_state_dict_is_stock_plus_pegs_and_bad_config_raises, for every model.)"""
    with pytest.raises(ValueError, match='decoder_pos'):
        build(detr_cfg(type='mmposenc.PEGDETR', decoder_pos='peg'))
    with pytest.raises(ValueError, match='peg_after'):
        build(detr_cfg(type='mmposenc.PEGDETR', encoder_pos='peg', peg_after=(-2, )))
    model = build(detr_cfg(type='mmposenc.PEGDETR', encoder_pos='peg'))
    with pytest.raises(ValueError, match='hw_shape'):
        model.encoder(torch.randn(1, 6, 32), None, None)
