"""UniViT pieces: random resolution per training batch, resolution TTA."""
import pytest
import torch
import torch.nn as nn
from mmengine.model import BaseDataPreprocessor

from mmposenc.models.data_preprocessors import RandomResolutionDataPreprocessor
from mmposenc.models.tta import ResolutionTTAClassifier
from mmposenc.registry import MODELS


def test_random_resolution_draws_from_sizes_and_only_in_training():
    pre = RandomResolutionDataPreprocessor(BaseDataPreprocessor(), sizes=[8, 16, 24], seed=0)
    x = torch.rand(2, 3, 20, 20)
    seen = set()
    for _ in range(30):
        out = pre(dict(inputs=x), training=True)['inputs']
        assert out.shape[0] == 2 and out.shape[-1] == out.shape[-2] == pre.last_size
        seen.add(pre.last_size)
    assert seen == {8, 16, 24}
    assert torch.equal(pre(dict(inputs=x), training=False)['inputs'], x)


def test_random_resolution_is_seedable_and_defaults_to_univit_sizes():
    a = RandomResolutionDataPreprocessor(BaseDataPreprocessor(), seed=3)
    b = RandomResolutionDataPreprocessor(BaseDataPreprocessor(), seed=3)
    assert a.sizes == (128, 160, 192, 224, 256, 288, 320)
    assert [a.sample_size() for _ in range(10)] == [b.sample_size() for _ in range(10)]
    assert MODELS.get('RandomResolutionDataPreprocessor') is RandomResolutionDataPreprocessor
    with pytest.raises(ValueError, match='sizes'):
        RandomResolutionDataPreprocessor(BaseDataPreprocessor(), sizes=[])


class _Head:

    def _get_predictions(self, logits, data_samples):
        return logits.argmax(1)


class _Classifier(nn.Module):
    """Logits = mean of each channel + the image width (so the resolution shows)."""

    def __init__(self):
        super().__init__()
        self.head = _Head()
        self.data_preprocessor = BaseDataPreprocessor()
        self.seen = []

    def forward(self, x, mode='tensor'):
        assert mode == 'tensor'
        self.seen.append(tuple(x.shape[-2:]))
        return x.mean((2, 3)) + x.shape[-1]


def test_resolution_tta_averages_logits_over_resolutions():
    clf = _Classifier()
    tta = ResolutionTTAClassifier(clf, offsets=(-32, 0, 32))
    x = torch.rand(2, 3, 64, 64)
    logits = tta(x)
    assert clf.seen == [(32, 32), (64, 64), (96, 96)]
    ref = sum(torch.nn.functional.interpolate(x, size=(s, s), mode='bilinear',
                                              align_corners=False).mean((2, 3)) + s
              for s in (32, 64, 96)) / 3
    torch.testing.assert_close(logits, ref)
    preds = tta.test_step(dict(inputs=x))
    assert torch.equal(preds, ref.argmax(1))
    with pytest.raises(ValueError, match='empty image'):
        ResolutionTTAClassifier(clf, offsets=(-64, )).logits(torch.rand(1, 3, 32, 32))


def test_resolution_tta_with_pevit_classifier():
    pytest.importorskip('mmpretrain')
    from mmpretrain.models import ImageClassifier
    from mmpretrain.structures import DataSample
    clf = ImageClassifier(
        backbone=dict(type='mmposenc.PEViT', arch=dict(embed_dims=32, num_layers=1,
                                                       num_heads=2, feedforward_channels=64),
                      img_size=64, patch_size=16, pos_encoding=dict(type='mmposenc.CAPE2d')),
        head=dict(type='LinearClsHead', num_classes=3, in_channels=32),
        data_preprocessor=dict(type='ClsDataPreprocessor', num_classes=3))
    tta = ResolutionTTAClassifier(clf)
    data = dict(inputs=[torch.randint(0, 255, (3, 64, 64), dtype=torch.uint8)],
                data_samples=[DataSample().set_gt_label(0)])
    preds = tta.test_step(data)
    assert preds[0].pred_score.shape == (3, )
