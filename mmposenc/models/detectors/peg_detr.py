"""DETR whose encoder position encoding is chosen by config (see
``docs/user_guides/swap_detector_pe.md``)."""
from typing import Dict, Optional, Sequence, Tuple

import torch
from mmdet.models.detectors.detr import DETR
from mmdet.structures import OptSampleList
from torch import Tensor

from mmposenc.registry import MODELS
# the switch lives in encoder_pos, the encoder in layers; these names stay importable from here
from .encoder_pos import (DECODER_POS_TYPES, ENCODER_POS_TYPES,  # noqa: F401
                          EncoderPosMixin, build_pegs, check_encoder_pos, check_peg_after)
from .layers import PEGDetrTransformerEncoder
from .padding_exact.mixin import PaddingExactMixin
from .stable_selection import StableSelectionMixin

__all__ = [
    'PEGDETR', 'DetrEncoderPosMixin', 'PEGDetrTransformerEncoder', 'EncoderPosMixin',
    'ENCODER_POS_TYPES', 'DECODER_POS_TYPES', 'build_pegs', 'check_encoder_pos',
    'check_peg_after'
]


class DetrEncoderPosMixin(PaddingExactMixin, EncoderPosMixin):
    """Mixin with the encoder position switch for one-level DETR-like detectors (rotary modes
    included).

    Args:
        decoder_pos (str): Memory positions (``key_pos``) of the decoder's cross-attention:
            ``'sine'`` (stock) or ``'none'`` (zeros). Defaults to ``'sine'``.
        peg_cfg (dict): Defaults to ``dict(type='mmposenc.MaskedPEG', kernel_size=3)``.
        **kwargs: Those of :class:`EncoderPosMixin` and of the host detector.
    """

    supports_rotary = True

    def __init__(self, *args, decoder_pos: str = 'sine', **kwargs) -> None:
        if decoder_pos not in DECODER_POS_TYPES:
            raise ValueError(f'decoder_pos must be one of {DECODER_POS_TYPES}, got '
                             f'{decoder_pos!r}')
        self.decoder_pos = decoder_pos
        super().__init__(*args, **kwargs)

    def pre_transformer(self,
                        img_feats: Tuple[Tensor],
                        batch_data_samples: OptSampleList = None) -> Tuple[Dict, Dict]:
        """mmdet's ``DETR.pre_transformer`` with the exact padding mask, ``hw_shape`` and the
        configured positions."""
        feat = img_feats[-1]
        assert batch_data_samples is not None
        batch_size, feat_dim = feat.shape[:2]
        masks = self.feature_padding_masks((feat, ), batch_data_samples, self.encoder_strides)
        masks = None if masks is None else masks[0]
        sine = None
        if self.encoder_uses_sine or self.decoder_pos == 'sine':
            sine = self.sine_pos(feat, masks)
        flat = feat.view(batch_size, feat_dim, -1).permute(0, 2, 1)
        if masks is not None:
            masks = masks.view(batch_size, -1)
        if self.encoder_uses_cape:
            feat_pos = self._cape_pos(feat, masks)
        else:
            feat_pos = sine if self.encoder_uses_sine else None
        memory_pos = sine if self.decoder_pos == 'sine' else None
        encoder_inputs_dict = dict(
            feat=flat, feat_mask=masks, feat_pos=feat_pos, hw_shape=tuple(feat.shape[-2:]))
        decoder_inputs_dict = dict(memory_mask=masks, memory_pos=memory_pos)
        return encoder_inputs_dict, decoder_inputs_dict

    def forward_encoder(self, feat: Tensor, feat_mask: Optional[Tensor],
                        feat_pos: Optional[Tensor],
                        hw_shape: Optional[Sequence[int]] = None) -> Dict:
        """mmdet's ``DETR.forward_encoder``, passing ``hw_shape`` and any rotary angles."""
        memory = self.encoder(
            query=feat, query_pos=feat_pos, key_padding_mask=feat_mask, hw_shape=hw_shape,
            **self.rotary_kwargs(hw_shape, feat_mask, feat.device))
        return dict(memory=memory)

    def forward_decoder(self, query: Tensor, query_pos: Tensor, memory: Tensor,
                        memory_mask: Optional[Tensor], memory_pos: Optional[Tensor],
                        **kwargs) -> Dict:
        """The host's ``forward_decoder``; ``decoder_pos='none'`` gives zero key positions
        (not None, which mmcv may replace by ``query_pos``)."""
        if memory_pos is None:
            memory_pos = torch.zeros_like(memory)
        return super().forward_decoder(query, query_pos, memory, memory_mask, memory_pos,
                                       **kwargs)

    def extra_repr(self) -> str:
        return f'{super().extra_repr()}, decoder_pos={self.decoder_pos!r}'


@MODELS.register_module()
class PEGDETR(StableSelectionMixin, DetrEncoderPosMixin, DETR):
    """DETR with a configurable encoder position encoding (CPVT's "DETR w/o PE + PEG").

    Args:
        encoder_pos (str): The encoder's position encoding: ``'sine'`` (stock), ``'peg'``,
            ``'sine+peg'``, ``'cape'``, ``'cape+peg'``, ``'rope_mixed'`` / ``'rope_dinov3'``
            (``+peg``) or ``'none'``. Defaults to ``'peg'``.
        decoder_pos (str): Memory positions (``key_pos``) of the decoder's cross-attention:
            ``'sine'`` (stock) or ``'none'``. Defaults to ``'sine'``.
        peg_after (Sequence[int]): PEG positions: ``i`` = after encoder layer ``i``, ``-1`` =
            before the first layer. Defaults to ``(0, )``.
        peg_cfg (dict): Config of each PEG. Defaults to
            ``dict(type='mmposenc.MaskedPEG', kernel_size=3)``.
        cape_cfg (dict): Config of the encoder's CAPE. Defaults to
            ``dict(type='mmposenc.CAPE2d')``.
        rope_cfg (dict, optional): Config of the rotary encoding. Defaults to the mode's class.
        *args, **kwargs: Those of :class:`mmdet.models.DETR`.

    Examples:
        >>> # in a config inheriting mmdet::detr/detr_r50_8xb2-150e_coco.py
        >>> model = dict(type='mmposenc.PEGDETR', encoder_pos='peg', peg_after=(0, ))
    """
