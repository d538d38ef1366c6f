"""Properties of the CPVT backbone."""
import copy

import pytest
import torch

from mmposenc.models.backbones import CPVT
from mmposenc.models.layers import PEG
from mmposenc.registry import MODELS

SMALL = dict(embed_dims=32, num_layers=3, num_heads=2, feedforward_channels=64)


def _small(**kwargs):
    torch.manual_seed(0)
    model = CPVT(SMALL, **kwargs)
    model.init_weights()
    return model.eval()


def _nparams(model):
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize('arch,dims', [('tiny', 192), ('s', 384), ('base', 768)])
def test_arch_zoo(arch, dims):
    model = CPVT(arch)
    assert model.embed_dims == dims and model.num_layers == 12
    assert len(model.pegs) == 1 and model.peg_positions == (0,)


def test_bad_arch_and_arguments():
    with pytest.raises(ValueError, match='is not in default archs'):
        CPVT('huge')
    with pytest.raises(ValueError, match='Custom arch needs a dict with keys'):
        CPVT(dict(embed_dims=32))
    with pytest.raises(ValueError, match='out_type must be one of'):
        CPVT(SMALL, out_type='raw')
    with pytest.raises(ValueError, match=r'peg_positions must be in \[-1, 2\]'):
        CPVT(SMALL, peg_positions=(3,))
    with pytest.raises(ValueError, match='needs with_cls_token=True'):
        CPVT(SMALL, with_cls_token=False)


def test_cpvt_ti_has_deit_ti_params_minus_pe_plus_peg():
    """CPVT [L] §4.4: CPVT-Ti (one PEG) = DeiT-Ti - learnable PE + 192*9 (+192 bias)."""
    from mmpretrain.models import VisionTransformer
    deit = VisionTransformer(arch='deit-tiny', img_size=224, patch_size=16)
    cpvt = CPVT('tiny')
    pe = deit.pos_embed.numel()
    assert pe == 197 * 192
    assert _nparams(cpvt) == _nparams(deit) - pe + 192 * 9 + 192
    assert _nparams(CPVT('tiny', peg_cfg=dict(bias=False))) == _nparams(deit) - pe + 192 * 9
    # and the names agree one to one (so mmpretrain DeiT checkpoints map directly)
    deit_keys = set(deit.state_dict()) - {'pos_embed'}
    cpvt_keys = set(cpvt.state_dict())
    assert cpvt_keys - deit_keys == {'pegs.0.proj.0.weight', 'pegs.0.proj.0.bias'}
    assert deit_keys <= cpvt_keys


def test_five_pegs_and_position_minus_one():
    assert len(CPVT(SMALL, peg_positions=(0, 1, 2)).pegs) == 3
    model = _small(peg_positions=(-1, 0))
    assert model(torch.rand(1, 3, 32, 32))[0].shape == (1, 32)


def test_pegs_sit_after_the_listed_layers():
    model = _small(peg_positions=(0, 2))
    order = []
    for name, m in [('layer0', model.layers[0]), ('layer1', model.layers[1]),
                    ('layer2', model.layers[2]), ('peg0', model.pegs[0]),
                    ('peg1', model.pegs[1])]:
        m.register_forward_hook(lambda *a, n=name: order.append(n))
    model(torch.rand(1, 3, 32, 32))
    assert order == ['layer0', 'peg0', 'layer1', 'layer2', 'peg1']


@pytest.mark.parametrize('size', [(16, 16), (32, 80), (48, 112), (50, 37), (224, 224)])
@pytest.mark.parametrize('out_type', ['cls_token', 'avg_featmap', 'featmap'])
def test_any_resolution_without_interpolation(size, out_type):
    model = _small(out_type=out_type)
    out = model(torch.rand(2, 3, *size))
    assert len(out) == 1
    h, w = -(-size[0] // 16), -(-size[1] // 16)
    expected = (2, 32, h, w) if out_type == 'featmap' else (2, 32)
    assert out[0].shape == expected
    assert torch.isfinite(out[0]).all()


def test_gap_model_has_no_cls_token():
    gap = _small(out_type='avg_featmap')
    assert not hasattr(gap, 'cls_token')
    assert not any('cls_token' in n or 'pos_embed' in n for n, _ in gap.named_parameters())
    assert gap.num_extra_tokens == 0 and gap.pegs[0].num_extra_tokens == 0
    cls = _small()
    assert cls.cls_token.shape == (1, 1, 32) and cls.pegs[0].num_extra_tokens == 1
    assert _nparams(cls) - _nparams(gap) == 32


def test_gap_output_is_mean_of_featmap():
    feat = _small(out_type='featmap')
    gap = _small(out_type='avg_featmap')
    gap.load_state_dict(feat.state_dict())
    x = torch.rand(2, 3, 48, 64)
    torch.testing.assert_close(gap(x)[0], feat(x)[0].mean(dim=(2, 3)))


def test_batch_elements_independent():
    model = _small()
    x = torch.rand(3, 3, 32, 48)
    torch.testing.assert_close(model(x)[0][2:], model(x[2:])[0], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize('kwargs', [
    dict(), dict(out_type='avg_featmap', peg_positions=(0, 1, 2)),
    dict(out_type='featmap', with_pos_embed=True, img_size=64)
])
def test_gradients_reach_every_parameter(kwargs):
    model = _small(**kwargs).train()
    out = model(torch.rand(2, 3, 48, 32))[0]
    out.pow(2).sum().backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


def test_state_dict_round_trip():
    a = _small(peg_positions=(0, 1), with_pos_embed=True, img_size=48)
    torch.manual_seed(5)
    b = CPVT(SMALL, peg_positions=(0, 1), with_pos_embed=True, img_size=48).eval()
    b.load_state_dict(copy.deepcopy(a.state_dict()), strict=True)
    x = torch.rand(1, 3, 64, 32)
    torch.testing.assert_close(a(x)[0], b(x)[0])


def test_kept_learnable_pe_is_resized_bicubically():
    from mmpretrain.models.utils import resize_pos_embed
    model = _small(with_pos_embed=True, img_size=64)  # 4 x 4 grid
    assert model.pos_embed.shape == (1, 1 + 16, 32)
    # same maths as mmpretrain's bicubic resize
    from mmposenc.models.backbones.cpvt import resize_pos_embed as ours
    torch.testing.assert_close(
        ours(model.pos_embed, (4, 4), (6, 3)),
        resize_pos_embed(model.pos_embed, (4, 4), (6, 3), 'bicubic', 1))
    # a checkpoint trained at another size (8 x 8 grid) is resized on load
    other = _small(with_pos_embed=True, img_size=128)
    model.load_state_dict(other.state_dict(), strict=True)
    torch.testing.assert_close(
        model.pos_embed, resize_pos_embed(other.pos_embed, (8, 8), (4, 4), 'bicubic', 1))
    assert model(torch.rand(1, 3, 96, 48))[0].shape == (1, 32)


def test_peg_cfg_is_forwarded():
    model = CPVT(SMALL, peg_cfg=dict(kernel_size=5, conv_type='separable'))
    assert isinstance(model.pegs[0], PEG)
    assert model.pegs[0].kernel_size == 5 and model.pegs[0].conv_type == 'separable'


def test_built_by_registry_and_in_mmpretrain_classifier():
    from mmpretrain.registry import MODELS as PRETRAIN_MODELS
    import mmpretrain.models  # noqa: F401  (registers ImageClassifier)
    backbone = MODELS.build(dict(type='mmposenc.CPVT', arch=SMALL))
    assert isinstance(backbone, CPVT)
    for out_type, neck in [('cls_token', None), ('avg_featmap', None),
                           ('featmap', dict(type='GlobalAveragePooling'))]:
        clf = PRETRAIN_MODELS.build(dict(
            type='ImageClassifier',
            backbone=dict(type='mmposenc.CPVT', arch=SMALL, out_type=out_type),
            neck=neck,
            head=dict(type='LinearClsHead', num_classes=5, in_channels=32,
                      loss=dict(type='CrossEntropyLoss'))))
        from mmpretrain.structures import DataSample
        samples = [DataSample().set_gt_label(i) for i in range(2)]
        losses = clf(torch.rand(2, 3, 32, 48), samples, mode='loss')
        assert losses['loss'] > 0


# the tracer warns about shape checks it freezes; the assertions below show the graph is right
@pytest.mark.filterwarnings('ignore::torch.jit.TracerWarning')
def test_partial_patches_see_zeros_and_tracing_keeps_sizes_dynamic():
    """A size that is not a multiple of the patch size equals the input zero-padded to the
    next multiple (mmcv's 'corner' padding), eagerly and in a graph traced at another size."""
    torch.manual_seed(0)
    model = CPVT(arch=dict(embed_dims=32, num_layers=2, num_heads=2, feedforward_channels=64),
                 patch_size=8, peg_positions=(0, 1), out_type='featmap').eval()
    x = torch.randn(1, 3, 29, 42)
    padded = torch.nn.functional.pad(x, (0, 48 - 42, 0, 32 - 29))
    with torch.no_grad():
        out = model(x)[0]
        assert out.shape == (1, 32, 4, 6)
        torch.testing.assert_close(out, model(padded)[0], rtol=0, atol=1e-6)
        traced = torch.jit.trace(model, torch.randn(1, 3, 40, 40), check_trace=False)
        torch.testing.assert_close(traced(x)[0], out, rtol=0, atol=1e-5)
