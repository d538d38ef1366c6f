"""The padding-exact mode in mmdet's and mmseg's models (see
``docs/user_guides/padding_exact_eval.md``)."""
from .mixin import ExactPaddingMixin, PaddingExactMixin, padded_batch, run_neck
from .resnet import PaddingExactResNet
from .dense import (MaskedFPN, PaddingExactDenseHeadMixin, PaddingExactMaskRCNN,
                    PaddingExactRetinaHead, PaddingExactRetinaNet, PaddingExactRPNHead)
from .hosts import PaddingExactMask2Former
from .mask2former import (PaddingAwareMask2FormerHead, PaddingAwareSegMask2FormerHead,
                          PaddingExactMask2FormerHead, PaddingExactSegMask2FormerHead,
                          PixelDecoderShapesMixin)

__all__ = [
    'PaddingExactMixin', 'ExactPaddingMixin', 'padded_batch', 'run_neck', 'PaddingExactResNet',
    'MaskedFPN', 'PaddingExactDenseHeadMixin', 'PaddingExactMaskRCNN', 'PaddingExactRetinaHead',
    'PaddingExactRetinaNet', 'PaddingExactRPNHead', 'PaddingExactMask2Former',
    'PaddingExactMask2FormerHead', 'PaddingExactSegMask2FormerHead',
    'PaddingAwareMask2FormerHead', 'PaddingAwareSegMask2FormerHead', 'PixelDecoderShapesMixin'
]
