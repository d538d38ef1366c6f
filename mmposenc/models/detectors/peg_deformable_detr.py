"""Deformable-DETR whose encoder position encoding is chosen by config (CPVT "DD + PEG").

:class:`PEGDeformableDETR` is mmdet's :class:`~mmdet.models.DeformableDETR` with the shared
switch of :mod:`mmposenc.models.detectors.encoder_pos` (``pre_transformer`` with exact masks and
the positions of ``encoder_pos``); its encoder,
:class:`PEGDeformableDetrTransformerEncoder`, applies a
:class:`~mmposenc.models.layers.MultiLevelMaskedPEG` (each level on its own grid with its own
padding mask) after chosen layers. ``with_box_refine``, ``as_two_stage`` and the no-mask path
(all images of the batch the same size, as in ONNX export) work as in mmdet.

The padding masks of all levels are exact (:class:`~mmposenc.models.detectors.ExactPaddingMixin`,
stride measured per level, the extra stride-64 level included), and a neck that takes padding
masks (:class:`~mmposenc.models.necks.MaskedChannelMapper`, the default of our configs) gets
them, so that with equal backbone features an image's encoder input and output do not depend on
the batch. With ``encoder_pos='sine'`` and mmdet's ``ChannelMapper`` the model is bit-identical to
mmdet's where mmdet's nearest-interpolated masks are exact (padded sizes that are multiples of
every level's stride, or no padding) and differs, by being exact, elsewhere.

``encoder_pos='cape'`` uses a :class:`~mmposenc.models.layers.CAPE2d` per level instead of the
sine encoding: each level's grid with its own padding mask, the positions of each image's
valid region scaled to ``[-1, 1]`` (so the levels share one coordinate frame), plus the level
embedding as with the sine encoding.

The deformable decoder's cross-attention uses no memory position embedding (it samples the
memory around reference points), so unlike :class:`~mmposenc.models.detectors.PEGDETR` there is
no ``decoder_pos`` switch: the encoder position encoding is the only one that changes.
"""
from mmdet.models.detectors.deformable_detr import DeformableDETR

from mmposenc.registry import MODELS
# the mechanism lives in encoder_pos; the encoder stays importable from here
from .encoder_pos import (DeformableEncoderPosMixin,  # noqa: F401
                          PEGDeformableDetrTransformerEncoder)

__all__ = ['PEGDeformableDETR', 'PEGDeformableDetrTransformerEncoder']


@MODELS.register_module()
class PEGDeformableDETR(DeformableEncoderPosMixin, DeformableDETR):
    """Deformable-DETR with a configurable encoder position encoding (CPVT "DD w/o PE + PEG").

    `Conditional Positional Encodings for Vision Transformers
    <https://arxiv.org/abs/2102.10882>`_ on top of `Deformable DETR
    <https://arxiv.org/abs/2010.04159>`_.

    Args:
        encoder_pos (str): Position encoding of the encoder tokens.

            - ``'sine'``: sine encoding + level embedding (stock; identical to mmdet where
              mmdet's masks are exact, see the module doc);
            - ``'peg'``: no sine encoding; multi-level masked PEGs at ``peg_after``;
            - ``'sine+peg'``: both;
            - ``'cape'``: :class:`~mmposenc.models.layers.CAPE2d` per level (own grid, own
              mask) + level embedding instead of sine + level embedding;
            - ``'cape+peg'``: CAPE and multi-level masked PEGs;
            - ``'none'``: no sine encoding and no PEG.

            Defaults to ``'peg'``.
        level_embed (bool): Without sine (``'peg'``, ``'cape'``, ``'none'``, ...), still add
            the learnt level embedding to ``query_pos`` (it tells levels apart; it carries no
            spatial position). When False the ``level_embed`` parameter stays (for checkpoint
            compatibility) but is unused. Defaults to True.
        peg_after (Sequence[int]): ``i`` = a PEG after encoder layer ``i``, ``-1`` = before
            the first layer. Defaults to ``(0, )`` (CPVT).
        peg_cfg (dict): Config of each PEG; ``share_weights=True`` shares one PEG across the
            levels. Defaults to ``dict(type='mmposenc.MultiLevelMaskedPEG', kernel_size=3,
            share_weights=False)``.
        cape_cfg (dict): Config of the encoder's CAPE for ``'cape'`` / ``'cape+peg'``
            (``embed_dims`` filled in). Defaults to ``dict(type='mmposenc.CAPE2d')``.
        *args, **kwargs: Those of :class:`mmdet.models.DeformableDETR` (``with_box_refine``,
            ``as_two_stage``, ``num_feature_levels``, ...).

    Examples:
        >>> # in a config inheriting mmdet::deformable_detr/deformable-detr_r50_16xb2-50e_coco.py
        >>> model = dict(type='mmposenc.PEGDeformableDETR', encoder_pos='peg')
    """
