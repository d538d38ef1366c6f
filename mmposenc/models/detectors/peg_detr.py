"""DETR whose encoder position encoding is chosen by config: sine, PEG, CAPE, combinations, none.

CPVT (`Conditional Positional Encodings for Vision Transformers
<https://arxiv.org/abs/2102.10882>`_, Table 4) removes DETR's 2D sine encoding from the
encoder and inserts a PEG after the first encoder layer ("DETR w/o PE + PEG"). mmdet's
:class:`~mmdet.models.DETR` hard-codes the sine encoding in ``_init_layers`` and feeds it to
every encoder layer, so :class:`PEGDETR` adds the shared switch of
:mod:`mmposenc.models.detectors.encoder_pos` (the host's encoder rebuilt with PEGs) and the
stages of :class:`DetrEncoderPosMixin` here (``pre_transformer``, ``forward_encoder`` and
``forward_decoder``, shared with Conditional-DETR and DAB-DETR); the encoder is
:class:`~mmposenc.models.detectors.layers.PEGDetrTransformerEncoder`, which applies a
:class:`~mmposenc.models.layers.MaskedPEG` after chosen layers.

The padding mask is exact (:class:`~mmposenc.models.detectors.PaddingExactMixin`): each image
owns the ``ceil(h / 32) x ceil(w / 32)`` tokens it has alone, where mmdet nearest-interpolates the
pixel mask and gives an image one more row or column whenever the padded batch size is not a
multiple of the stride. That is the one deliberate difference from mmdet: with
``encoder_pos='sine'`` the model computes exactly what mmdet's DETR computes (same state-dict
keys, bit-identical outputs) on batches whose padded size is a multiple of the stride (e.g.
``pad_size_divisor=32``) or that are not padded, and differs, by being exact, on the others.

``encoder_pos='cape'`` replaces the sine encoding of the encoder by a
:class:`~mmposenc.models.layers.CAPE2d` (`CAPE <https://arxiv.org/abs/2106.03143>`_; the paper
did not do detection): the positions of each image's valid region are scaled to ``[-1, 1]``,
mean-normalised over the valid tokens and, in training only, randomly shifted and scaled;
padded tokens get no embedding. It is added to the queries and keys exactly where the sine
encoding was. CAPE has no parameters, so the state dict is that of the stock model.
"""
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
    """The switch for DETR-like detectors (one level: DETR, Conditional-DETR, DAB-DETR).

    Their encoders run dot-product self-attention, so the rotary modes (``'rope_mixed'``,
    ``'rope_dinov3'``, with or without ``+peg``) apply: each image's coordinates come from its
    own region of the padded batch (the exact mask).

    Args:
        decoder_pos (str): Memory positions (``key_pos``) of the decoder's cross-attention:
            ``'sine'`` (stock; CPVT changed only the encoder) or ``'none'`` (zeros).
            Defaults to ``'sine'``.
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
        """As mmdet's ``DETR.pre_transformer`` with the exact padding mask, plus ``hw_shape``;
        positions per config.

        The mask marks exactly the ``ceil(img_h / s) x ceil(img_w / s)`` cells each image has
        alone (:meth:`PaddingExactMixin.feature_padding_masks`; mmdet nearest-interpolates
        the pixel mask, which marks one more row or column as image when the batch size is
        not a multiple of the stride ``s``). Encoder, sine normalisation, CAPE extent and the
        decoder's memory mask all use it. Where mmdet's mask is exact (batch sizes that are
        multiples of the stride) ``encoder_pos='sine'`` computes exactly what mmdet computes.
        The sine encoding is computed only when the encoder or the decoder uses it.
        """
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
        """As mmdet's ``DETR.forward_encoder``, passing ``hw_shape`` to the PEGs and, in a
        rotary mode, the angles of the grid to the attention layers
        (:meth:`~mmposenc.models.detectors.encoder_pos.EncoderPosMixin.rotary_kwargs`)."""
        memory = self.encoder(
            query=feat, query_pos=feat_pos, key_padding_mask=feat_mask, hw_shape=hw_shape,
            **self.rotary_kwargs(hw_shape, feat_mask, feat.device))
        return dict(memory=memory)

    def forward_decoder(self, query: Tensor, query_pos: Tensor, memory: Tensor,
                        memory_mask: Optional[Tensor], memory_pos: Optional[Tensor],
                        **kwargs) -> Dict:
        """The host's ``forward_decoder``; ``decoder_pos='none'`` gives zero key positions.

        (mmcv's attention would otherwise reuse ``query_pos`` as ``key_pos`` whenever the
        number of queries equals the number of memory tokens.)
        """
        if memory_pos is None:
            memory_pos = torch.zeros_like(memory)
        return super().forward_decoder(query, query_pos, memory, memory_mask, memory_pos,
                                       **kwargs)

    def extra_repr(self) -> str:
        return f'{super().extra_repr()}, decoder_pos={self.decoder_pos!r}'


@MODELS.register_module()
class PEGDETR(StableSelectionMixin, DetrEncoderPosMixin, DETR):
    """DETR with a configurable encoder position encoding (CPVT's "DETR w/o PE + PEG").

    `Conditional Positional Encodings for Vision Transformers
    <https://arxiv.org/abs/2102.10882>`_ on top of `DETR <https://arxiv.org/abs/2005.12872>`_.
    The switch, the PEG placement and the exact masks are
    :class:`~mmposenc.models.detectors.encoder_pos.DetrEncoderPosMixin`'s.

    Args:
        encoder_pos (str): Position encoding of the encoder.

            - ``'sine'``: mmdet's 2D sine encoding added in every encoder layer (stock DETR,
              identical to :class:`mmdet.models.DETR` where mmdet's padding mask is exact,
              see the module doc);
            - ``'peg'``: no sine encoding in the encoder; masked PEGs at ``peg_after``;
            - ``'sine+peg'``: both;
            - ``'cape'``: :class:`~mmposenc.models.layers.CAPE2d` instead of the sine encoding
              (per-image valid extent, augmented in training only);
            - ``'cape+peg'``: CAPE and masked PEGs;
            - ``'rope_mixed'`` / ``'rope_dinov3'``: no additive encoding; the queries and keys
              of every encoder self-attention rotated by
              :class:`~mmposenc.models.layers.RoPEMixed` /
              :class:`~mmposenc.models.layers.DINOv3RoPE` (``rope_cfg``), each image's
              coordinates its own; ``'rope_mixed+peg'`` / ``'rope_dinov3+peg'`` add the PEGs;
            - ``'none'``: no position information in the encoder at all.

            Defaults to ``'peg'``.
        decoder_pos (str): Memory positions (``key_pos``) of the decoder's cross-attention:
            ``'sine'`` (stock; CPVT changed only the encoder) or ``'none'``.
            Defaults to ``'sine'``.
        peg_after (Sequence[int]): PEG positions for ``'peg'`` / ``'sine+peg'``: ``i`` = after
            encoder layer ``i``, ``-1`` = before the first layer. Defaults to ``(0, )``.
        peg_cfg (dict): Config of each PEG. Defaults to
            ``dict(type='mmposenc.MaskedPEG', kernel_size=3)``.
        cape_cfg (dict): Config of the encoder's CAPE for ``'cape'`` / ``'cape+peg'``
            (``embed_dims`` filled in). Defaults to ``dict(type='mmposenc.CAPE2d')`` (global
            shift 0.5, local shift 1/N, global scaling 1.4: the paper's ViT setting).
        rope_cfg (dict, optional): Config of the rotary encoding of the rotary modes
            (``embed_dims``, ``num_heads``, ``num_layers`` filled in). Defaults to the mode's
            class with its defaults.
        *args, **kwargs: Those of :class:`mmdet.models.DETR`.

    Examples:
        >>> # in a config inheriting mmdet::detr/detr_r50_8xb2-150e_coco.py
        >>> model = dict(type='mmposenc.PEGDETR', encoder_pos='peg', peg_after=(0, ))
    """
