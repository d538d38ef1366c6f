"""A padding-exact backbone inside a detector (issue 20, item 1): ExactPaddingMixin binds the
image sizes of the batch around ``backbone(batch_inputs)``, so a PEG-Deformable-DETR on
:class:`~mmposenc.models.detectors.PaddingExactResNet` with trained-like BatchNorm gives the
first COCO128 image (190 x 253, in a 400 x 400 batch: not a multiple of 16 or 32) the same
encoder memory and predictions alone and batched, where the stock ResNet does not."""
import pytest
import torch
from test_exact_padding import alone_vs_batched, load_coco128, make_model
from torch import nn

pytest.importorskip('mmdet')


def with_resnet(padding_exact):
    from mmposenc.models.detectors import PaddingExactResNet
    model = make_model('deformable', 'mmposenc.PEGDeformableDETR', 'peg')
    torch.manual_seed(0)
    model.backbone = PaddingExactResNet(depth=18, base_channels=16, out_indices=(2, 3),
                                        padding_exact=padding_exact)
    model.backbone.init_weights()
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():  # trained-like: non-zero residual norms, statistics not 0 / 1
        for m in model.backbone.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.weight.uniform_(0.5, 1.5, generator=gen)
                m.bias.normal_(0, 0.5, generator=gen)
                m.running_mean.normal_(0, 0.5, generator=gen)
                m.running_var.uniform_(0.5, 2.0, generator=gen)
    model.eval()
    return model


@pytest.fixture(scope='module')
def packed(coco128_root):
    return load_coco128(coco128_root)


def test_padding_exact_backbone_makes_the_detector_exact(packed):
    memory, scores, boxes = alone_vs_batched(with_resnet(True), packed)
    assert memory <= 1e-5 and scores <= 1e-5 and boxes <= 1e-3, (memory, scores, boxes)
    memory, scores, boxes = alone_vs_batched(with_resnet(False), packed)
    assert memory > 1e-2, memory
