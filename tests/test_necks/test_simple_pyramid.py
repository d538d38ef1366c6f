"""SimplePyramid: the BEiT / ViTDet rescaling of plain-ViT maps to strides 4/8/16/32."""
import pytest
import torch
import torch.nn.functional as F

from mmposenc.models.necks import SimplePyramid


def test_shapes_for_one_map_per_scale_and_for_a_single_map():
    neck = SimplePyramid(32, scales=(4, 2, 1, 0.5, 0.25))
    feats = tuple(torch.rand(2, 32, 5, 7) for _ in range(5))
    shapes = [tuple(o.shape[2:]) for o in neck(feats)]
    assert shapes == [(20, 28), (10, 14), (5, 7), (3, 4), (2, 2)]  # pooling rounds up
    assert [tuple(o.shape[2:]) for o in neck(feats[:1])] == shapes


def test_identity_and_pooling_branches_are_exact():
    neck = SimplePyramid(16, scales=(1, 0.5))
    x = torch.randn(1, 16, 7, 6)
    same, pooled = neck((x, x))
    assert same is x
    torch.testing.assert_close(pooled, F.max_pool2d(x, 2, 2, ceil_mode=True))
    assert pooled.shape[2:] == (4, 3)


def test_equals_mmseg_feature2pyramid_with_the_same_weights():
    """With mmseg's norm (BN) and its weights, the outputs are mmseg's ``Feature2Pyramid``."""
    from mmseg.models.necks import Feature2Pyramid
    torch.manual_seed(0)
    ref = Feature2Pyramid(32, rescales=[4, 2, 1, 0.5], norm_cfg=dict(type='BN')).eval()
    ours = SimplePyramid(32, norm_cfg=dict(type='BN')).eval()
    state = {k.replace('upsample_4x.', 'branches.0.').replace('upsample_2x.', 'branches.1.'): v
             for k, v in ref.state_dict().items()}
    ours.load_state_dict(state, strict=True)
    feats = tuple(torch.randn(2, 32, 6, 8) for _ in range(4))
    with torch.no_grad():
        for a, b in zip(ours(feats), ref(feats)):
            torch.testing.assert_close(a, b)


def test_gradients_reach_every_parameter():
    neck = SimplePyramid(32, scales=(8, 4, 2))
    outs = neck((torch.randn(2, 32, 3, 4), ))
    sum(o.square().mean() for o in outs).backward()
    for name, p in neck.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name
    # 3 + 2 + 1 transposed convolutions, a GroupNorm between two of them
    assert sum(isinstance(m, torch.nn.ConvTranspose2d) for m in neck.modules()) == 6
    assert sum(isinstance(m, torch.nn.GroupNorm) for m in neck.modules()) == 3


def test_clear_errors():
    with pytest.raises(ValueError, match='powers of two'):
        SimplePyramid(32, scales=(3, 1))
    with pytest.raises(ValueError, match='powers of two'):
        SimplePyramid(32, scales=(0, ))
    neck = SimplePyramid(32)
    with pytest.raises(ValueError, match='takes 1 or 4 maps, got 2'):
        neck((torch.rand(1, 32, 4, 4), ) * 2)
    with pytest.raises(ValueError, match=r'expected \(B, 32, H, W\)'):
        neck((torch.rand(1, 16, 4, 4), ))


def test_builds_from_the_registry_under_a_host_scope():
    from mmengine.registry import init_default_scope
    from mmdet.registry import MODELS as DET_MODELS
    import mmdet.models  # noqa: F401
    init_default_scope('mmdet')
    seq = DET_MODELS.build([
        dict(type='mmposenc.SimplePyramid', in_channels=32),
        dict(type='FPN', in_channels=[32] * 4, out_channels=16, num_outs=5)])
    outs = seq(tuple(torch.rand(1, 32, 4, 6) for _ in range(4)))
    assert [tuple(o.shape) for o in outs] == [
        (1, 16, 16, 24), (1, 16, 8, 12), (1, 16, 4, 6), (1, 16, 2, 3), (1, 16, 1, 2)]
    assert 'scales=(4, 2, 1, 0.5)' in repr(seq[0])
