"""Deformable-DETR whose encoder position encoding is chosen by config (see
``docs/user_guides/swap_detector_pe.md``)."""
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
    """Mixin with the encoder position switch for multi-level detectors (Deformable-DETR, DINO).

    Args:
        level_embed (bool, optional): Add the level embedding without sine (False leaves the
            parameter unused; refused with sine). None (default) is True.
        peg_cfg (dict): Config of each PEG (``share_weights=True``: one for all levels).
            Defaults to ``dict(type='mmposenc.MultiLevelMaskedPEG', kernel_size=3,
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
        """mmdet's ``DeformableDETR.pre_transformer`` with exact padding masks and the
        positions of :meth:`level_pos`."""
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

    Args:
        encoder_pos (str): The encoder's position encoding: ``'sine'`` (stock, with the level
            embedding), ``'peg'``, ``'sine+peg'``, ``'cape'`` (per level), ``'cape+peg'`` or
            ``'none'``. Defaults to ``'peg'``.
        level_embed (bool): Add the level embedding without sine (False leaves the parameter
            unused). Defaults to True.
        peg_after (Sequence[int]): ``i`` = a PEG after encoder layer ``i``, ``-1`` = before
            the first layer. Defaults to ``(0, )``.
        peg_cfg (dict): Config of each PEG. Defaults to
            ``dict(type='mmposenc.MultiLevelMaskedPEG', kernel_size=3, share_weights=False)``.
        cape_cfg (dict): Config of the encoder's CAPE. Defaults to
            ``dict(type='mmposenc.CAPE2d')``.
        *args, **kwargs: Those of :class:`mmdet.models.DeformableDETR`.

    Examples:
        >>> # in a config inheriting mmdet::deformable_detr/deformable-detr_r50_16xb2-50e_coco.py
        >>> model = dict(type='mmposenc.PEGDeformableDETR', encoder_pos='peg')
    """
