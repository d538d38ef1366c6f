"""encoder_pos='cape' / 'cape+peg' of PEGDETR and PEGDeformableDETR: where the CAPE goes, eval
determinism, seeded training augmentation, gradients, state dict, errors. (Padding invariance of
the whole encoder is checked with the other encoder_pos values in test_peg_detr.py and
test_peg_deformable_detr.py.)"""
import copy

import pytest
import torch
from tiny_detr_cfgs import (build, deformable_detr_cfg, detr_cfg, packed_inputs,
                            samples_on_grid)

pytest.importorskip('mmdet')

SIZES, GRID = [(4, 3), (2, 5)], (4, 5)  # two padded images, in feature cells (stride 32)


def make(kind, **kwargs):
    if kind == 'detr':
        return build(detr_cfg(type='mmposenc.PEGDETR', **kwargs))
    return build(deformable_detr_cfg(type='mmposenc.PEGDeformableDETR', **kwargs))


def feats_for(kind, seed=0):
    gen = torch.Generator().manual_seed(seed)
    H, W = GRID
    if kind == 'detr':
        return (torch.randn(2, 32, H, W, generator=gen), )
    return (torch.randn(2, 32, 2 * H, 2 * W, generator=gen),
            torch.randn(2, 32, H, W, generator=gen))


def encode(model, feats, seed=None):
    if seed is not None:
        torch.manual_seed(seed)
    enc, dec = model.pre_transformer(feats, samples_on_grid(SIZES, GRID))
    memory = model.forward_encoder(**{k: v for k, v in enc.items()
                                      if k in ('feat', 'feat_mask', 'feat_pos', 'hw_shape',
                                               'spatial_shapes', 'level_start_index',
                                               'valid_ratios')})['memory']
    return enc, dec, memory


@pytest.mark.parametrize('kind', ['detr', 'deformable'])
def test_eval_is_deterministic_train_is_seeded_and_augmented(kind):
    model = make(kind, encoder_pos='cape')
    feats = feats_for(kind)
    with torch.no_grad():
        model.eval()
        enc_a, _, mem_a = encode(model, feats, seed=0)
        enc_b, _, mem_b = encode(model, feats, seed=1)
        assert torch.equal(enc_a['feat_pos'], enc_b['feat_pos'])
        assert torch.equal(mem_a, mem_b)
        model.train()
        train_a = encode(model, feats, seed=3)
        train_b = encode(model, feats, seed=3)
        train_c = encode(model, feats, seed=4)
    assert torch.equal(train_a[0]['feat_pos'], train_b[0]['feat_pos'])
    assert torch.equal(train_a[2], train_b[2])
    valid = ~enc_a['feat_mask']
    for other in (enc_a, train_c[0]):
        diff = (train_a[0]['feat_pos'] - other['feat_pos']).abs().amax(-1)
        assert (diff[valid] > 1e-3).float().mean() > 0.9  # almost every valid token moved


def test_detr_cape_replaces_the_encoder_sine_only():
    """Encoder positions = CAPE of each image's valid region (zero on padding); the decoder's
    memory positions stay those of decoder_pos; the other inputs are the stock ones."""
    cape = make('detr', encoder_pos='cape', decoder_pos='sine').eval()
    sine = make('detr', encoder_pos='sine', decoder_pos='sine').eval()
    feats = feats_for('detr')
    samples = samples_on_grid(SIZES, GRID)
    enc, dec = cape.pre_transformer(feats, samples)
    enc_s, dec_s = sine.pre_transformer(feats, samples)
    mask = enc['feat_mask']
    assert mask is not None and mask.any()
    assert torch.equal(enc['feat_pos'], cape.cape(GRID, padding_mask=mask))
    assert (enc['feat_pos'][mask] == 0).all()
    assert not torch.allclose(enc['feat_pos'], enc_s['feat_pos'])
    assert torch.equal(dec['memory_pos'], dec_s['memory_pos'])
    for key in ('feat', 'feat_mask'):
        assert torch.equal(enc[key], enc_s[key])
    none = make('detr', encoder_pos='cape', decoder_pos='none')
    assert none.pre_transformer(feats, samples)[1]['memory_pos'] is None


@pytest.mark.parametrize('level_embed', [True, False])
def test_deformable_cape_per_level_plus_level_embed(level_embed):
    model = make('deformable', encoder_pos='cape', level_embed=level_embed).eval()
    feats = feats_for('deformable')
    enc, _ = model.pre_transformer(feats, samples_on_grid(SIZES, GRID))
    n0 = feats[0].shape[-2] * feats[0].shape[-1]
    for lvl, (pos, mask, feat) in enumerate(zip(enc['feat_pos'].split([n0, n0 // 4], 1),
                                                enc['feat_mask'].split([n0, n0 // 4], 1),
                                                feats)):
        expected = model.cape(feat.shape[-2:], padding_mask=mask)
        if level_embed:
            expected = expected + model.level_embed[lvl]
        torch.testing.assert_close(pos, expected, rtol=0, atol=0)
    # no padding: the no-mask path gives the CAPE of the full grids
    same = model.pre_transformer(feats, samples_on_grid([GRID, GRID], GRID))[0]
    assert same['feat_mask'] is None
    full = torch.cat([model.cape(f.shape[-2:], batch_size=2) for f in feats], 1)
    if level_embed:
        full = full + torch.cat([model.level_embed[i].expand(f.shape[-2] * f.shape[-1], -1)
                                 for i, f in enumerate(feats)])
    torch.testing.assert_close(same['feat_pos'], full, rtol=0, atol=0)


@pytest.mark.parametrize('kind,encoder_pos', [('detr', 'cape'), ('deformable', 'cape+peg')])
def test_training_gradients_reach_every_parameter(kind, encoder_pos):
    torch.manual_seed(5)
    model = make(kind, encoder_pos=encoder_pos).train()
    data = model.data_preprocessor(
        packed_inputs([(3, 96, 80), (3, 64, 112)], num_items=[2, 1], seed=1), True)
    losses = model(**data, mode='loss')
    sum(v for k, v in losses.items() if 'loss' in k).backward()
    missing = [n for n, p in model.named_parameters() if p.requires_grad and p.grad is None]
    assert not missing
    assert len(model.encoder.pegs) == ('peg' in encoder_pos)


@pytest.mark.parametrize('kind', ['detr', 'deformable'])
def test_state_dict_is_stock_and_loads_sine_checkpoints(kind):
    sine = make(kind, encoder_pos='sine')
    cape = make(kind, encoder_pos='cape')
    assert set(cape.state_dict()) == set(sine.state_dict())
    cape.load_state_dict(copy.deepcopy(sine.state_dict()), strict=True)
    assert 'cape' in repr(cape) and cape.cape.embed_dims == cape.embed_dims
    assert sine.cape is None


@pytest.mark.parametrize('kind', ['detr', 'deformable'])
def test_bad_config_raises(kind):
    with pytest.raises(ValueError, match=r"'cape', 'cape\+peg'.*got 'cape2d'"):
        make(kind, encoder_pos='cape2d')
    with pytest.raises(ValueError, match='cape_cfg'):  # None: the default CAPE2d
        make(kind, encoder_pos='cape', cape_cfg='mmposenc.CAPE2d')
    with pytest.raises(ValueError, match='max_global_scaling'):
        make(kind, encoder_pos='cape',
             cape_cfg=dict(type='mmposenc.CAPE2d', max_global_scaling=0.5))
    with pytest.raises(ValueError, match='even'):
        make(kind, encoder_pos='cape', cape_cfg=dict(type='mmposenc.CAPE2d', embed_dims=31))
