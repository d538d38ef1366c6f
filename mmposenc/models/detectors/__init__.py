"""Detectors of mmposenc: the only package that imports mmdet.

Not imported by :mod:`mmposenc.models`; configs load it with
``custom_imports = dict(imports=['mmposenc.models.detectors'], allow_failed_imports=False)``.
"""
from .host import MMDET_VERSION  # first: one line where mmdet is missing or out of range
from .encoder_pos import (PEG_ENCODERS, DeformableEncoderPosMixin, DetrEncoderPosMixin,
                          EncoderPosMixin, PEGEncoderMixin)
from .exact_padding import ExactPaddingMixin
from .padding_exact_dense import (MaskedFPN, PaddingExactDenseHeadMixin, PaddingExactMaskRCNN,
                                  PaddingExactRetinaHead, PaddingExactRetinaNet,
                                  PaddingExactRPNHead)
from .padding_exact_hosts import PaddingExactMask2Former
from .padding_exact_resnet import PaddingExactResNet
from .peg_deformable_detr import PEGDeformableDETR, PEGDeformableDetrTransformerEncoder
from .peg_detr import PEGDETR, PEGDetrTransformerEncoder
from .peg_detr_family import PEGDABDETR, PEGDINO, PEGConditionalDETR
from .peg_mask2former import (PaddingAwareMask2FormerHead, PEGMSDeformAttnPixelDecoder,
                              PixelDecoderShapesMixin)

__all__ = [
    'MMDET_VERSION',
    'ExactPaddingMixin', 'EncoderPosMixin', 'DetrEncoderPosMixin', 'DeformableEncoderPosMixin',
    'PEGEncoderMixin', 'PEG_ENCODERS', 'PEGDETR', 'PEGDetrTransformerEncoder',
    'PEGDeformableDETR', 'PEGDeformableDetrTransformerEncoder', 'PEGConditionalDETR',
    'PEGDABDETR', 'PEGDINO', 'PEGMSDeformAttnPixelDecoder', 'PaddingAwareMask2FormerHead',
    'PixelDecoderShapesMixin', 'PaddingExactResNet', 'PaddingExactMask2Former', 'MaskedFPN',
    'PaddingExactDenseHeadMixin', 'PaddingExactMaskRCNN', 'PaddingExactRetinaHead',
    'PaddingExactRetinaNet', 'PaddingExactRPNHead'
]
