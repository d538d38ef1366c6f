"""Detectors of mmposenc: the only package that imports mmdet.

Not imported by :mod:`mmposenc.models`; configs load it with
``custom_imports = dict(imports=['mmposenc.models.detectors'], allow_failed_imports=False)``.
"""
from .peg_deformable_detr import PEGDeformableDETR, PEGDeformableDetrTransformerEncoder
from .peg_detr import PEGDETR, PEGDetrTransformerEncoder

__all__ = [
    'PEGDETR', 'PEGDetrTransformerEncoder', 'PEGDeformableDETR',
    'PEGDeformableDetrTransformerEncoder'
]
