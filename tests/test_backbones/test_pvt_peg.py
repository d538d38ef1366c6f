"""Properties of the PVT + PEG + GAP backbone."""
import copy

import pytest
import torch

from mmposenc.models.backbones import PVTPEG
from mmposenc.registry import MODELS

SMALL = dict(embed_dims=[16, 32, 48, 64], num_heads=[1, 2, 3, 4], mlp_ratios=[2, 2, 2, 2],
             depths=[2, 1, 2, 1], sr_ratios=[8, 4, 2, 1])


def _small(**kwargs):
    torch.manual_seed(0)
    model = PVTPEG(SMALL, drop_path_rate=0., **kwargs)
    model.init_weights()
    return model.eval()


@pytest.mark.parametrize('arch,depths', [('tiny', [2, 2, 2, 2]), ('s', [3, 4, 6, 3]),
                                         ('medium', [3, 4, 18, 3]), ('l', [3, 8, 27, 3])])
def test_arch_zoo(arch, depths):
    model = PVTPEG(arch)
    assert model.depths == depths and model.embed_dims == [64, 128, 320, 512]
    assert len(model.pegs) == 4


def test_pvt_tiny_param_count_is_pvt_tiny_minus_pe_and_cls_plus_pegs():
    """PVT-Tiny is 13.2M with its PEs, cls token and 1000-way head (PVT paper, Table 1);
    removing them and adding four 3x3 depthwise PEGs gives the backbone here."""
    n = sum(p.numel() for p in PVTPEG('tiny').parameters())
    pegs = sum(c * 9 + c for c in (64, 128, 320, 512))
    head = 512 * 1000 + 1000
    pe = 3136 * 64 + 784 * 128 + 196 * 320 + 50 * 512 + 512  # + cls token
    assert round((n - pegs + pe + head) / 1e6, 1) == 13.2


def test_bad_arch():
    with pytest.raises(ValueError, match='is not in default archs'):
        PVTPEG('huge')
    with pytest.raises(ValueError, match='same length'):
        PVTPEG(dict(SMALL, depths=[1, 1, 1]))
    with pytest.raises(ValueError, match=r'out_indices must be in \[0, 4\)'):
        PVTPEG(SMALL, out_indices=(4,))


def test_no_cls_token_or_absolute_pe():
    model = PVTPEG('tiny')
    assert not any('cls' in n or 'pos_embed' in n for n, _ in model.named_parameters())


@pytest.mark.parametrize('size', [(64, 64), (96, 128), (20, 28), (8, 8), (4, 4), (37, 51)])
def test_multiscale_outputs_any_size(size):
    model = _small(out_indices=(0, 1, 2, 3))
    outs = model(torch.rand(2, 3, *size))
    h, w = size
    for out, c in zip(outs, SMALL['embed_dims']):
        h, w = -(-h // (4 if c == 16 else 2)), -(-w // (4 if c == 16 else 2))
        assert out.shape == (2, c, h, w)
        assert torch.isfinite(out).all()


def test_peg_after_first_block_of_each_stage():
    model = _small()
    order = []
    for i, stage in enumerate(model.stages):
        for j, blk in enumerate(stage):
            blk.register_forward_hook(lambda *a, n=f'b{i}.{j}': order.append(n))
        model.pegs[i].register_forward_hook(lambda *a, n=f'peg{i}': order.append(n))
    model(torch.rand(1, 3, 32, 32))
    assert order == ['b0.0', 'peg0', 'b0.1', 'b1.0', 'peg1', 'b2.0', 'peg2', 'b2.1',
                     'b3.0', 'peg3']


def test_gradients_reach_every_parameter():
    model = _small(out_indices=(0, 1, 2, 3)).train()
    outs = model(torch.rand(2, 3, 64, 48))
    sum(o.pow(2).mean() for o in outs).backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


def test_state_dict_round_trip():
    a = _small(out_indices=(1, 3))
    torch.manual_seed(3)
    b = PVTPEG(SMALL, out_indices=(1, 3)).eval()
    b.load_state_dict(copy.deepcopy(a.state_dict()), strict=True)
    x = torch.rand(1, 3, 40, 56)
    for oa, ob in zip(a(x), b(x)):
        torch.testing.assert_close(oa, ob)


def test_in_mmpretrain_classifier_with_gap_neck():
    from mmpretrain.registry import MODELS as PRETRAIN_MODELS
    from mmpretrain.structures import DataSample
    import mmpretrain.models  # noqa: F401
    assert isinstance(MODELS.build(dict(type='mmposenc.PVTPEG', arch=SMALL)), PVTPEG)
    clf = PRETRAIN_MODELS.build(dict(
        type='ImageClassifier', backbone=dict(type='mmposenc.PVTPEG', arch=SMALL),
        neck=dict(type='GlobalAveragePooling'),
        head=dict(type='LinearClsHead', num_classes=3, in_channels=64,
                  loss=dict(type='CrossEntropyLoss'))))
    samples = [DataSample().set_gt_label(i) for i in range(2)]
    losses = clf(torch.rand(2, 3, 64, 64), samples, mode='loss')
    losses['loss'].backward()
    assert losses['loss'] > 0
