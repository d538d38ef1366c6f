"""Detectors of mmposenc: the only package that imports mmdet (configs load it with
``custom_imports = dict(imports=['mmposenc.models.detectors'], allow_failed_imports=False)``)."""
from .host import MMDET_VERSION  # first: one line where mmdet is missing or out of range
from .encoder_pos import EncoderPosMixin
from .layers import PEG_ENCODERS, PEGEncoderMixin
from .padding_exact import (ExactPaddingMixin, MaskedFPN, PaddingAwareMask2FormerHead,
                            PaddingExactDenseHeadMixin, PaddingExactMask2Former,
                            PaddingExactMask2FormerHead, PaddingExactMaskRCNN, PaddingExactMixin,
                            PaddingExactResNet, PaddingExactRetinaHead, PaddingExactRetinaNet,
                            PaddingExactRPNHead, PixelDecoderShapesMixin)
from .peg_deformable_detr import (DeformableEncoderPosMixin, PEGDeformableDETR,
                                  PEGDeformableDetrTransformerEncoder)
from .peg_detr import PEGDETR, DetrEncoderPosMixin, PEGDetrTransformerEncoder
from .peg_detr_family import PEGDABDETR, PEGDINO, PEGConditionalDETR
from .peg_mask2former import PEGMSDeformAttnPixelDecoder

__all__ = [
    'MMDET_VERSION', 'PaddingExactMixin',
    'ExactPaddingMixin', 'EncoderPosMixin', 'DetrEncoderPosMixin', 'DeformableEncoderPosMixin',
    'PEGEncoderMixin', 'PEG_ENCODERS', 'PEGDETR', 'PEGDetrTransformerEncoder',
    'PEGDeformableDETR', 'PEGDeformableDetrTransformerEncoder', 'PEGConditionalDETR',
    'PEGDABDETR', 'PEGDINO', 'PEGMSDeformAttnPixelDecoder', 'PaddingAwareMask2FormerHead',
    'PaddingExactMask2FormerHead', 'PixelDecoderShapesMixin', 'PaddingExactResNet',
    'PaddingExactMask2Former', 'MaskedFPN',
    'PaddingExactDenseHeadMixin', 'PaddingExactMaskRCNN', 'PaddingExactRetinaHead',
    'PaddingExactRetinaNet', 'PaddingExactRPNHead'
]
