"""PEViT: every registered position encoding runs, learns and generalises in shape."""
import inspect

import pytest
import torch

from mmposenc.models.backbones import PEViT
from mmposenc.models.layers import BasePositionEncoding
from mmposenc.registry import MODELS

TINY = dict(embed_dims=32, num_layers=2, num_heads=2, feedforward_channels=64)


def registered_encodings():
    import mmposenc.models  # noqa: F401  (fills the registry)
    return sorted(name for name, cls in MODELS.module_dict.items()
                  if inspect.isclass(cls) and issubclass(cls, BasePositionEncoding))


ENCODINGS = registered_encodings()


def test_the_zoo_is_registered():
    assert {'NoPositionEncoding', 'LearnableAbsolutePE', 'SinCos2dPE', 'RoPE2d',
            'RelativePositionBias2d', 'CoPE', 'CAPE2d', 'SaPE2',
            'PEGPositionEncoding'} <= set(ENCODINGS)


@pytest.mark.parametrize('with_cls_token', [True, False])
@pytest.mark.parametrize('name', ENCODINGS)
def test_every_encoding_runs_at_several_resolutions(name, with_cls_token):
    torch.manual_seed(0)
    vit = PEViT(arch=TINY, img_size=16, patch_size=4, pos_encoding=dict(type=name),
                with_cls_token=with_cls_token,
                out_type='cls_token' if with_cls_token else 'avg_featmap')
    vit.init_weights()
    assert len(vit.pos_encodings) == 1 and type(vit.pos_encodings[0]).__name__ == name
    for size in [(16, 16), (8, 12), (28, 20)]:  # trained grid, smaller, larger + odd
        out = vit.train()(torch.randn(2, 3, *size))[-1]
        assert out.shape == (2, 32)
        assert torch.isfinite(out).all()
    with torch.no_grad():
        assert torch.isfinite(vit.eval()(torch.randn(1, 3, 4, 4))[-1]).all()  # 1 x 1 grid


@pytest.mark.parametrize('name', ENCODINGS)
def test_every_encoding_gets_gradients(name):
    """Forward + backward at a resolution other than the training one: every parameter of
    the backbone, the encoding's included, receives a finite gradient. (The loss uses every
    token: with the class token alone, biases of the last layer's patch rows are rightly
    gradient-free.)"""
    torch.manual_seed(0)
    vit = PEViT(arch=TINY, img_size=16, patch_size=4, pos_encoding=dict(type=name),
                out_type='raw')
    vit.init_weights()
    vit(torch.randn(2, 3, 20, 24))[-1].pow(2).sum().backward()
    for n, p in vit.named_parameters():
        assert p.grad is not None, n
        assert torch.isfinite(p.grad).all(), n
        assert p.grad.abs().sum() > 0, n


@pytest.mark.parametrize('name', ENCODINGS)
def test_encodings_change_the_output(name):
    """Swapping the patches of an image changes the output for every encoding except
    'none' (which is permutation-invariant with GAP)."""
    torch.manual_seed(0)
    vit = PEViT(arch=TINY, img_size=16, patch_size=4, pos_encoding=dict(type=name),
                with_cls_token=False, out_type='avg_featmap').eval()
    vit.init_weights()
    if name == 'SaPE2':
        # at init q, k ~ 0, so every gate is ~0.5; SaPE2's bias carries position only
        # through gates that vary along a line (constant gates make it a function of content,
        # see tests/test_layers/test_sape2.py), so give the gates and tables trained sizes
        with torch.no_grad():
            for layer in vit.layers:
                layer.attn.qkv.weight.mul_(30)
            for table in (vit.pos_encodings[0].pos_embed_x, vit.pos_encodings[0].pos_embed_y):
                table.normal_()
    x = torch.randn(1, 3, 16, 16)
    swapped = torch.cat((x[..., 4:, :], x[..., :4, :]), dim=-2)  # patch rows rolled
    a, b = vit(x)[-1], vit(swapped)[-1]
    if name == 'NoPositionEncoding':
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    else:
        assert not torch.allclose(a, b, atol=1e-5)


def test_list_of_encodings_sape2_with_abs_pe():
    vit = PEViT(arch=TINY, img_size=16, patch_size=4, pos_encoding=[
        dict(type='LearnableAbsolutePE'), dict(type='mmposenc.SaPE2', mode='k')])
    assert [type(p).__name__ for p in vit.pos_encodings] == ['LearnableAbsolutePE', 'SaPE2']
    assert vit.pos_encodings[0].grid_size == (4, 4)
    assert vit.pos_encodings[1].num_layers == 2 and vit.pos_encodings[1].num_heads == 2
    assert vit(torch.randn(2, 3, 24, 24))[-1].shape == (2, 32)


def test_out_types_and_indices():
    vit = PEViT(arch=TINY, img_size=16, patch_size=4, out_type='featmap', out_indices=(0, -1),
                pos_encoding=dict(type='RoPE2d'))
    outs = vit(torch.randn(2, 3, 16, 24))
    assert len(outs) == 2 and outs[0].shape == (2, 32, 4, 6)
    raw = PEViT(arch=TINY, img_size=16, patch_size=4, out_type='raw')
    assert raw(torch.randn(1, 3, 16, 16))[0].shape == (1, 17, 32)


def test_arch_zoo_and_errors():
    assert PEViT(arch='deit-tiny', pos_encoding=dict(type='NoPositionEncoding')).embed_dims == 192
    with pytest.raises(ValueError, match='not in default archs'):
        PEViT(arch='huge-ish')
    with pytest.raises(ValueError, match='Custom arch'):
        PEViT(arch=dict(embed_dims=32))
    with pytest.raises(ValueError, match='out_type'):
        PEViT(arch=TINY, out_type='pooled')
    with pytest.raises(ValueError, match='with_cls_token'):
        PEViT(arch=TINY, with_cls_token=False, out_type='cls_token')
    with pytest.raises(TypeError, match='not a BasePositionEncoding'):
        PEViT(arch=TINY, pos_encoding=dict(type='CAPE1d'))
    with pytest.raises(KeyError, match='not registered'):
        PEViT(arch=TINY, pos_encoding=dict(type='NoSuchPE'))
    with pytest.raises(ValueError, match='at least one'):
        PEViT(arch=TINY, pos_encoding=[])


def test_pevit_in_mmpretrain_image_classifier():
    pytest.importorskip('mmpretrain')
    from mmpretrain.models import ImageClassifier
    from mmpretrain.structures import DataSample
    model = ImageClassifier(
        backbone=dict(type='mmposenc.PEViT', arch=TINY, img_size=32, patch_size=8,
                      pos_encoding=dict(type='mmposenc.CAPE2d')),
        head=dict(type='VisionTransformerClsHead', num_classes=5, in_channels=32,
                  loss=dict(type='CrossEntropyLoss')),
        data_preprocessor=dict(type='ClsDataPreprocessor', num_classes=5))
    samples = [DataSample().set_gt_label(i) for i in range(2)]
    losses = model(torch.randn(2, 3, 32, 32), samples, mode='loss')
    assert losses['loss'] > 0
    preds = model(torch.randn(2, 3, 48, 40), samples, mode='predict')
    assert preds[0].pred_score.shape == (5, )
