"""The padding-exact mode in mmdet's and mmseg's models (the host side of
:mod:`mmposenc.models.padding_exact`).

- :mod:`~.mixin`: :class:`PaddingExactMixin`, the mode of every mmposenc detector (exact
  padding masks, the image sizes for the backbone, the masks for the neck);
- :mod:`~.resnet`: :class:`PaddingExactResNet`, mmdet's ResNet with the mode;
- :mod:`~.dense`: RetinaNet and Mask R-CNN with the mode (FPN, dense heads, RoI reads);
- :mod:`~.hosts`: mmdet's Mask2Former and mmseg's EncoderDecoder with the mode;
- :mod:`~.mask2former`: Mask2Former's heads (mmdet and mmseg) with the mode.

Former names stay valid: ``ExactPaddingMixin`` (:class:`PaddingExactMixin`),
``PaddingAwareMask2FormerHead`` / ``PaddingAwareSegMask2FormerHead`` (registered aliases of
:class:`PaddingExactMask2FormerHead` / ``PaddingExactSegMask2FormerHead``).
"""
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
