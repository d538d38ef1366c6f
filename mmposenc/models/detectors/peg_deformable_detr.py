"""Deformable-DETR whose encoder position encoding is chosen by config (CPVT "DD + PEG").

:class:`PEGDeformableDETR` is mmdet's :class:`~mmdet.models.DeformableDETR` with the shared
switch of :mod:`mmposenc.models.detectors.encoder_pos` and the stage of
:class:`DeformableEncoderPosMixin` here (``pre_transformer`` with exact masks and the positions
of ``encoder_pos``, shared with DINO); its encoder,
:class:`~mmposenc.models.detectors.layers.PEGDeformableDetrTransformerEncoder`, applies a
:class:`~mmposenc.models.layers.MultiLevelMaskedPEG` (each level on its own grid with its own
padding mask) after chosen layers. ``with_box_refine``, ``as_two_stage`` and the no-mask path
(all images of the batch the same size, as in ONNX export) work as in mmdet.

The padding masks of all levels are exact (:class:`~mmposenc.models.detectors.PaddingExactMixin`,
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
from typing import Dict, Optional, Tuple

from mmdet.models.detectors.deformable_detr import DeformableDETR
from mmdet.structures import OptSampleList
from torch import Tensor

from mmposenc.registry import MODELS
from .encoder_pos import (EncoderPosMixin, check_ablation_args, encoder_pos_mode,
                          flatten_levels)
# the encoder lives in layers; it stays importable from here
from .layers import PEGDeformableDetrTransformerEncoder
from .padding_exact.mixin import PaddingExactMixin
from .stable_selection import StableSelectionMixin

__all__ = ['PEGDeformableDETR', 'DeformableEncoderPosMixin',
           'PEGDeformableDetrTransformerEncoder']


class DeformableEncoderPosMixin(PaddingExactMixin, EncoderPosMixin):
    """The switch for Deformable-DETR-like detectors (multi-level: Deformable-DETR, DINO).

    Args:
        level_embed (bool, optional): Without sine (``'peg'``, ``'cape'``, ``'none'``, ...),
            still add the learnt level embedding to the encoder positions (it tells levels
            apart; it carries no spatial position). When False the ``level_embed`` parameter
            stays (for checkpoint compatibility) but is unused; False with sine is refused (the
            sine encoding always comes with it). None (default) is True.
        peg_cfg (dict): Config of each PEG; ``share_weights=True`` shares one PEG across the
            levels. Defaults to ``dict(type='mmposenc.MultiLevelMaskedPEG', kernel_size=3,
            share_weights=False)``.
        **kwargs: Those of :class:`EncoderPosMixin` and of the host detector.
    """

    default_peg_cfg = dict(type='mmposenc.MultiLevelMaskedPEG', kernel_size=3,
                           share_weights=False)

    def __init__(self, *args, level_embed: Optional[bool] = None, **kwargs) -> None:
        mode = encoder_pos_mode(kwargs.get('encoder_pos', 'peg'))
        self.check_mode_supported(mode)
        check_ablation_args(type(self).__name__, mode, level_embed=level_embed)
        self.use_level_embed = level_embed is not False
        super().__init__(*args, **kwargs)

    def peg_defaults(self) -> dict:
        return dict(num_levels=self.num_feature_levels)

    def pre_transformer(self,
                        mlvl_feats: Tuple[Tensor],
                        batch_data_samples: OptSampleList = None) -> Tuple[Dict, Dict]:
        """As mmdet's ``DeformableDETR.pre_transformer`` with exact padding masks; positions
        per ``encoder_pos`` (:meth:`level_pos`).

        Each level's mask marks exactly the ``ceil(img_h / s) x ceil(img_w / s)`` cells an
        image has alone, ``s`` measured per level (stride-64 extra level included;
        :meth:`PaddingExactMixin.feature_padding_masks`), where mmdet nearest-interpolates
        the pixel mask. The masks give the encoder and decoder key padding masks, the sine
        normalisation, the CAPE extents and ``valid_ratios``. Where mmdet's masks are exact
        (batch sizes that are multiples of every level's stride) ``encoder_pos='sine'``
        computes exactly what mmdet computes.
        """
        assert batch_data_samples is not None
        masks = self.feature_padding_masks(mlvl_feats, batch_data_samples,
                                           self.encoder_strides)
        positions = [
            self.level_pos(feat, None if masks is None else masks[lvl], self.level_embed[lvl])
            for lvl, feat in enumerate(mlvl_feats)
        ]
        encoder_inputs_dict = flatten_levels(mlvl_feats, masks, positions)
        if masks is None:
            encoder_inputs_dict['valid_ratios'] = mlvl_feats[0].new_ones(
                mlvl_feats[0].size(0), len(mlvl_feats), 2)
        decoder_inputs_dict = dict(
            memory_mask=encoder_inputs_dict['feat_mask'],
            **{k: encoder_inputs_dict[k]
               for k in ('spatial_shapes', 'level_start_index', 'valid_ratios')})
        return encoder_inputs_dict, decoder_inputs_dict

    def extra_repr(self) -> str:
        return f'{super().extra_repr()}, level_embed={self.use_level_embed}'


@MODELS.register_module()
class PEGDeformableDETR(StableSelectionMixin, DeformableEncoderPosMixin, DeformableDETR):
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
