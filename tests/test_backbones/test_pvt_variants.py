"""The PVT rows of CPVT [L] Table 13 as settings of PVTPEG: the PVT baseline (absolute PE, class
token), PVT + PEG (absolute PE kept, class token), PVT + GAP (absolute PE, no PEG)."""
import pytest
import torch

from mmposenc.models.backbones import PVTPEG

SMALL = dict(embed_dims=[16, 32, 48, 64], num_heads=[1, 2, 3, 4], mlp_ratios=[2, 2, 2, 2],
             depths=[2, 1, 2, 1], sr_ratios=[8, 4, 2, 1])
PEGS_T = sum(c * 9 + c for c in (64, 128, 320, 512))
PE_T = 3136 * 64 + 784 * 128 + 196 * 320 + 49 * 512


def _small(**kwargs):
    torch.manual_seed(0)
    model = PVTPEG(SMALL, drop_path_rate=0., img_size=64, **kwargs)
    model.init_weights()
    return model.eval()


def _nparams(model):
    return sum(p.numel() for p in model.parameters())


def test_parameter_counts_of_the_table_13_rows():
    """PVT v1: one learnable PE per stage (56^2, 28^2, 14^2, 7^2 + 1 for the class token at
    224) and the class token; [L] Table 13 gives 13M for every PVT-T row."""
    gap_peg = PVTPEG('tiny')
    base = PVTPEG('tiny', with_peg=False, with_pos_embed=True, out_type='cls_token')
    peg = PVTPEG('tiny', with_pos_embed=True, out_type='cls_token')
    gap = PVTPEG('tiny', with_peg=False, with_pos_embed=True)
    assert _nparams(base) == _nparams(gap_peg) - PEGS_T + PE_T + 512 + 512
    assert _nparams(peg) == _nparams(base) + PEGS_T
    assert _nparams(gap) == _nparams(base) - 512 - 512
    head = 512 * 1000 + 1000
    assert round((_nparams(base) + head) / 1e6, 1) == 13.2  # PVT-Tiny, PVT paper Table 1
    for model in (base, peg, gap, gap_peg):
        assert round((_nparams(model) + head) / 1e6) == 13
    assert [tuple(p.shape) for p in base.pos_embeds] == [
        (1, 3136, 64), (1, 784, 128), (1, 196, 320), (1, 50, 512)]


def test_cls_token_head_and_peg_leaves_it_alone():
    model = _small(with_pos_embed=True, out_type='cls_token')
    assert model.pegs[-1].num_extra_tokens == 1
    assert all(peg.num_extra_tokens == 0 for peg in model.pegs[:-1])
    (cls, ) = model(torch.rand(2, 3, 64, 48))
    assert cls.shape == (2, 64)
    # the class token is what the head sees: changing it changes the output
    before = cls.clone()
    with torch.no_grad():
        model.cls_token.add_(1.)
    assert not torch.allclose(model(torch.rand(2, 3, 64, 48))[0], before)


def test_position_embedding_is_added_and_resized_bilinearly():
    from mmposenc.models.backbones.cpvt import resize_pos_embed
    model = _small(with_peg=False, with_pos_embed=True, out_indices=(0, ))
    assert model.pos_embed_shapes == [(16, 16), (8, 8), (4, 4), (2, 2)]
    x = torch.rand(1, 3, 48, 80)  # 12 x 20 first-stage grid
    with torch.no_grad():
        tokens, hw = model.patch_embeds[0](x)
        pe = resize_pos_embed(model.pos_embeds[0], (16, 16), hw, 'bilinear', 0)
        ref = tokens + pe
        for block in model.stages[0]:
            ref = block(ref, hw)
        (out, ) = model(x)
    assert hw == (12, 20)
    torch.testing.assert_close(out, ref.transpose(1, 2).reshape(1, 16, 12, 20))
    # and it matters
    with torch.no_grad():
        model.pos_embeds[0].zero_()
        assert not torch.allclose(model(x)[0], out)


def test_without_peg_there_is_no_peg():
    model = _small(with_peg=False, with_pos_embed=True, out_indices=(0, 1, 2, 3))
    assert len(model.pegs) == 0
    assert not any('pegs' in n for n, _ in model.named_parameters())
    outs = model(torch.rand(1, 3, 37, 51))
    assert [o.shape[1] for o in outs] == SMALL['embed_dims']


def test_classifier_checkpoint_loads_into_the_dense_backbone():
    """A class-token classifier (last PE one entry longer) initialises the dense backbone of the
    same row: the class token's PE entry is dropped, the class token is left over."""
    clf = _small(with_pos_embed=True, out_type='cls_token')
    dense = PVTPEG(SMALL, img_size=64, with_pos_embed=True, out_indices=(0, 1, 2, 3))
    missing, unexpected = dense.load_state_dict(clf.state_dict(), strict=False)
    assert missing == [] and unexpected == ['cls_token']
    torch.testing.assert_close(dense.pos_embeds[3], clf.pos_embeds[3][:, 1:])


def test_gradients_reach_every_parameter():
    # two blocks in the last stage, as in PVT-T: the class token is read after the block that
    # follows the last PEG (after a one-block stage that PEG could not reach it)
    torch.manual_seed(0)
    model = PVTPEG(dict(SMALL, depths=[2, 1, 2, 2]), img_size=64, with_pos_embed=True,
                   out_type='cls_token')
    model.init_weights()
    model(torch.rand(2, 3, 40, 56))[0].pow(2).sum().backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


@pytest.mark.parametrize('kwargs,match', [
    (dict(out_type='cls_token', out_indices=(2, 3)), r"out_indices must be \(3, \)"),
    (dict(out_type='map'), 'out_type must be one of'),
])
def test_bad_settings_raise(kwargs, match):
    with pytest.raises(ValueError, match=match):
        PVTPEG(SMALL, **kwargs)


def test_cls_token_needs_no_spatial_reduction_in_the_last_stage():
    with pytest.raises(ValueError, match="needs sr_ratio 1 in the last stage"):
        PVTPEG(dict(SMALL, sr_ratios=[8, 4, 2, 2]), out_type='cls_token')
