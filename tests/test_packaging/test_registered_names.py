"""Every type name a config may hold stays registered.

Configs name our modules as ``type='mmposenc.X'``; a checkpoint's config, a user's config or a
``mmposenc::`` base written against an earlier version keeps naming them so. This test pins
the set of ``(registry, name)`` pairs of the ``mmposenc`` scope: a type that stops registering
(a class renamed or moved without its old name kept as an alias) fails here, and so does a new
name not added to the set below.
"""
import importlib

import pytest

#: ``(registry attribute of mmposenc.registry, registered name)``; renamed types keep their old
#: names as aliases (``PaddingAware*Mask2FormerHead`` are ``PaddingExact*Mask2FormerHead``).
REGISTERED = {
    ('DATASETS', 'CheckedADE20KDataset'),
    ('DATASETS', 'CheckedCocoDataset'),
    ('DATASETS', 'RandomResolutionDataset'),
    ('DATA_SAMPLERS', 'RandomResolutionBatchSampler'),
    ('MODELS', 'BatchPaddingSegDataPreprocessor'),
    ('MODELS', 'CAPE1d'),
    ('MODELS', 'CAPE2d'),
    ('MODELS', 'CPVT'),
    ('MODELS', 'CoPE'),
    ('MODELS', 'DINOv3RoPE'),
    ('MODELS', 'LearnableAbsolutePE'),
    ('MODELS', 'MPA'),
    ('MODELS', 'MaskedChannelMapper'),
    ('MODELS', 'MaskedFPN'),
    ('MODELS', 'MaskedPEG'),
    ('MODELS', 'MultiLevelMaskedPEG'),
    ('MODELS', 'NoPositionEncoding'),
    ('MODELS', 'PEG'),
    ('MODELS', 'PEGConditionalDETR'),
    ('MODELS', 'PEGDABDETR'),
    ('MODELS', 'PEGDETR'),
    ('MODELS', 'PEGDINO'),
    ('MODELS', 'PEGDeformableDETR'),
    ('MODELS', 'PEGMSDeformAttnPixelDecoder'),
    ('MODELS', 'PEGPositionEncoding'),
    ('MODELS', 'PEViT'),
    ('MODELS', 'PVTPEG'),
    ('MODELS', 'PaddingAwareMask2FormerHead'),
    ('MODELS', 'PaddingAwareSegMask2FormerHead'),
    ('MODELS', 'PaddingExactEncoderDecoder'),
    ('MODELS', 'PaddingExactMask2Former'),
    ('MODELS', 'PaddingExactMask2FormerHead'),
    ('MODELS', 'PaddingExactMaskRCNN'),
    ('MODELS', 'PaddingExactRPNHead'),
    ('MODELS', 'PaddingExactResNet'),
    ('MODELS', 'PaddingExactRetinaHead'),
    ('MODELS', 'PaddingExactRetinaNet'),
    ('MODELS', 'PaddingExactSegMask2FormerHead'),
    ('MODELS', 'PerViT'),
    ('MODELS', 'PeripheralDistanceEmbedding'),
    ('MODELS', 'PeripheralPE'),
    ('MODELS', 'PeripheralPositionEncoding'),
    ('MODELS', 'RelativePositionBias2d'),
    ('MODELS', 'ResolutionTTAClassifier'),
    ('MODELS', 'RoPE2d'),
    ('MODELS', 'RoPEMixed'),
    ('MODELS', 'SaPE2'),
    ('MODELS', 'SimplePyramid'),
    ('MODELS', 'SinCos2dPE'),
    ('MODELS', 'SwinPEG'),
    ('OPTIM_WRAPPERS', 'BF16OptimWrapper'),
    ('OPTIM_WRAPPER_CONSTRUCTORS', 'SummaryOptimWrapperConstructor'),
}

#: Every package that registers into the registries of :mod:`mmposenc.registry`
#: (``mmposenc.models.detectors`` is not imported by ``mmposenc.models``: it needs mmdet).
REGISTERING_PACKAGES = ('mmposenc.models', 'mmposenc.models.detectors', 'mmposenc.datasets',
                       'mmposenc.engine')


def registered_pairs():
    from mmposenc import registry
    for name in REGISTERING_PACKAGES:
        importlib.import_module(name)
    return {(attr, name) for attr in dir(registry)
            if isinstance(getattr(registry, attr), registry.Registry)
            for name in getattr(registry, attr).module_dict}


def test_the_registered_names_are_the_pinned_set():
    pytest.importorskip('mmseg')  # three of the names register only with mmseg installed
    found = registered_pairs()
    assert sorted(REGISTERED - found) == [], 'names that no longer register (keep an alias)'
    assert sorted(found - REGISTERED) == [], 'new names: add them to REGISTERED'


def test_former_names_are_aliases_of_the_new_ones():
    """A renamed type keeps its former name: both build the same class."""
    from mmposenc import registry
    registered_pairs()
    for old, new in (('PaddingAwareMask2FormerHead', 'PaddingExactMask2FormerHead'),
                     ('PaddingAwareSegMask2FormerHead', 'PaddingExactSegMask2FormerHead')):
        assert registry.MODELS.get(old) is registry.MODELS.get(new) is not None, old


def test_every_pinned_name_builds_from_its_scoped_type():
    """A config's ``type='mmposenc.X'`` reaches the class through mmengine's root registry."""
    from mmengine.registry import MODELS as ROOT_MODELS
    from mmposenc import registry
    registered_pairs()
    for attr, name in sorted(REGISTERED):
        if attr != 'MODELS':
            continue
        cls = registry.MODELS.get(name)
        assert cls is not None, name
        assert ROOT_MODELS.get(f'mmposenc.{name}') is cls, name
