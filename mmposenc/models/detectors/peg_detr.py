"""DETR whose encoder position encoding is chosen by config: sine, PEG, CAPE, combinations, none.

CPVT (`Conditional Positional Encodings for Vision Transformers
<https://arxiv.org/abs/2102.10882>`_, Table 4) removes DETR's 2D sine encoding from the
encoder and inserts a PEG after the first encoder layer ("DETR w/o PE + PEG"). mmdet's
:class:`~mmdet.models.DETR` hard-codes the sine encoding in ``_init_layers`` and feeds it to
every encoder layer, so :class:`PEGDETR` subclasses it and overrides ``_init_layers``,
``pre_transformer``, ``forward_encoder`` and ``forward_decoder``; the encoder is
:class:`PEGDetrTransformerEncoder`, which applies a :class:`~mmposenc.models.layers.MaskedPEG`
after chosen layers. With ``encoder_pos='sine'`` the model computes exactly what mmdet's DETR
computes (same state-dict keys, bit-identical outputs).

``encoder_pos='cape'`` replaces the sine encoding of the encoder by a
:class:`~mmposenc.models.layers.CAPE2d` (`CAPE <https://arxiv.org/abs/2106.03143>`_; the paper
did not do detection): the positions of each image's valid region are scaled to ``[-1, 1]``,
mean-normalised over the valid tokens and, in training only, randomly shifted and scaled;
padded tokens get no embedding. It is added to the queries and keys exactly where the sine
encoding was. CAPE has no parameters, so the state dict is that of the stock model.
"""
from typing import Dict, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from mmdet.models.detectors.detr import DETR
from mmdet.models.layers import (DetrTransformerDecoder, DetrTransformerEncoder,
                                 SinePositionalEncoding)
from mmdet.structures import OptSampleList
from mmengine.model import ModuleList
from torch import Tensor, nn

from mmposenc.registry import MODELS

#: Position encodings the encoder can use (see :class:`PEGDETR`).
ENCODER_POS_TYPES = ('sine', 'peg', 'sine+peg', 'cape', 'cape+peg', 'none')
#: Memory positions the DETR decoder's cross-attention can use.
DECODER_POS_TYPES = ('sine', 'none')


def check_encoder_pos(encoder_pos: str) -> str:
    if encoder_pos not in ENCODER_POS_TYPES:
        raise ValueError(f'encoder_pos must be one of {ENCODER_POS_TYPES}, got {encoder_pos!r}')
    return encoder_pos


def check_peg_after(peg_after: Sequence[int], num_layers: int) -> Tuple[int, ...]:
    """Validate PEG positions: ``i`` = after encoder layer ``i``, ``-1`` = before layer 0."""
    if isinstance(peg_after, int):
        peg_after = (peg_after, )
    positions = tuple(int(i) for i in peg_after)
    bad = [i for i in positions if not -1 <= i < num_layers]
    if bad:
        raise ValueError(f'peg_after entries must lie in [-1, {num_layers - 1}] (-1 = before '
                         f'the first of the {num_layers} encoder layers), got {bad}')
    if len(set(positions)) != len(positions):
        raise ValueError(f'peg_after has duplicates: {positions}')
    return tuple(sorted(positions))


def build_pegs(peg_cfg: Optional[dict], peg_after: Tuple[int, ...], **defaults) -> ModuleList:
    """One PEG per position of ``peg_after``; ``defaults`` fill keys missing in ``peg_cfg``."""
    if peg_after and peg_cfg is None:
        raise ValueError('peg_after asks for PEGs but peg_cfg is None')
    pegs = ModuleList()
    for _ in peg_after:
        cfg = dict(peg_cfg)
        for key, value in defaults.items():
            cfg.setdefault(key, value)
        pegs.append(MODELS.build(cfg))
    return pegs


class EncoderPosMixin:
    """What ``encoder_pos`` (one of :data:`ENCODER_POS_TYPES`) switches on, for both
    detectors, and the CAPE of the encoder (``self.cape``, None unless used)."""

    encoder_pos: str
    cape_cfg: Optional[dict]

    @property
    def encoder_uses_sine(self) -> bool:
        return self.encoder_pos in ('sine', 'sine+peg')

    @property
    def encoder_uses_peg(self) -> bool:
        return self.encoder_pos in ('peg', 'sine+peg', 'cape+peg')

    @property
    def encoder_uses_cape(self) -> bool:
        return self.encoder_pos in ('cape', 'cape+peg')

    def _build_cape(self, embed_dims: int) -> Optional[nn.Module]:
        """The encoder's CAPE (``cape_cfg``, ``embed_dims`` filled in), None without CAPE."""
        if not self.encoder_uses_cape:
            return None
        if not isinstance(self.cape_cfg, dict):
            raise ValueError(f'encoder_pos={self.encoder_pos!r} needs a cape_cfg dict, got '
                             f'{self.cape_cfg!r}')
        cfg = dict(self.cape_cfg)
        cfg.setdefault('embed_dims', embed_dims)
        return MODELS.build(cfg)

    def _cape_pos(self, feat: Tensor, padding_mask: Optional[Tensor]) -> Tensor:
        """CAPE of the (bs, C, h, w) map ``feat``'s grid as (bs, h*w, C) in ``feat``'s dtype;
        ``padding_mask`` (bs, h*w) or None. Zero at padded tokens."""
        return self.cape(
            feat.shape[-2:], batch_size=feat.shape[0], padding_mask=padding_mask).to(feat.dtype)


class PEGDetrTransformerEncoder(DetrTransformerEncoder):
    """DETR encoder with :class:`~mmposenc.models.layers.MaskedPEG` after chosen layers.

    Args:
        peg_after (Sequence[int]): Where PEGs go: ``i`` applies one after encoder layer ``i``
            (CPVT: ``(0, )``), ``-1`` before the first layer. Empty for none (the stock
            encoder). Defaults to ``()``.
        peg_cfg (dict, optional): Config of each PEG (``embed_dims`` filled in).
            Defaults to ``dict(type='mmposenc.MaskedPEG')``.
        *args, **kwargs: Those of :class:`mmdet.models.layers.DetrTransformerEncoder`.
    """

    def __init__(self, *args, peg_after: Sequence[int] = (),
                 peg_cfg: Optional[dict] = dict(type='mmposenc.MaskedPEG'), **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.peg_after = check_peg_after(peg_after, self.num_layers)
        self.pegs = build_pegs(peg_cfg, self.peg_after, embed_dims=self.embed_dims)
        self._peg_index = {pos: i for i, pos in enumerate(self.peg_after)}

    def _apply_peg(self, position: int, query: Tensor, hw_shape, key_padding_mask) -> Tensor:
        index = self._peg_index.get(position)
        if index is None:
            return query
        return self.pegs[index](query, hw_shape, key_padding_mask)

    def forward(self, query: Tensor, query_pos: Optional[Tensor],
                key_padding_mask: Optional[Tensor],
                hw_shape: Optional[Sequence[int]] = None, **kwargs) -> Tensor:
        """Encode; PEGs see the tokens after the layers named in ``peg_after``.

        Args:
            query (Tensor): Tokens (bs, h*w, C).
            query_pos (Tensor, optional): Position embeddings (bs, h*w, C), None for none.
            key_padding_mask (Tensor, optional): Bool (bs, h*w), True = padded; None when no
                image of the batch is padded.
            hw_shape (Sequence[int], optional): (h, w) of the token grid; needed with PEGs.

        Returns:
            Tensor: The memory (bs, h*w, C).
        """
        if len(self.pegs) and hw_shape is None:
            raise ValueError('PEGDetrTransformerEncoder with PEGs needs hw_shape')
        query = self._apply_peg(-1, query, hw_shape, key_padding_mask)
        for i, layer in enumerate(self.layers):
            query = layer(query, query_pos, key_padding_mask, **kwargs)
            query = self._apply_peg(i, query, hw_shape, key_padding_mask)
        return query


@MODELS.register_module()
class PEGDETR(EncoderPosMixin, DETR):
    """DETR with a configurable encoder position encoding (CPVT's "DETR w/o PE + PEG").

    `Conditional Positional Encodings for Vision Transformers
    <https://arxiv.org/abs/2102.10882>`_ on top of `DETR <https://arxiv.org/abs/2005.12872>`_.

    Args:
        encoder_pos (str): Position encoding of the encoder.

            - ``'sine'``: mmdet's 2D sine encoding added in every encoder layer (stock DETR,
              numerically identical to :class:`mmdet.models.DETR`);
            - ``'peg'``: no sine encoding in the encoder; masked PEGs at ``peg_after``;
            - ``'sine+peg'``: both;
            - ``'cape'``: :class:`~mmposenc.models.layers.CAPE2d` instead of the sine encoding
              (per-image valid extent, augmented in training only);
            - ``'cape+peg'``: CAPE and masked PEGs;
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
        *args, **kwargs: Those of :class:`mmdet.models.DETR`.

    Examples:
        >>> # in a config inheriting mmdet::detr/detr_r50_8xb2-150e_coco.py
        >>> model = dict(type='mmposenc.PEGDETR', encoder_pos='peg', peg_after=(0, ))
    """

    def __init__(self,
                 *args,
                 encoder_pos: str = 'peg',
                 decoder_pos: str = 'sine',
                 peg_after: Sequence[int] = (0, ),
                 peg_cfg: dict = dict(type='mmposenc.MaskedPEG', kernel_size=3),
                 cape_cfg: Optional[dict] = dict(type='mmposenc.CAPE2d'),
                 **kwargs) -> None:
        self.encoder_pos = check_encoder_pos(encoder_pos)
        self.cape_cfg = cape_cfg
        if decoder_pos not in DECODER_POS_TYPES:
            raise ValueError(f'decoder_pos must be one of {DECODER_POS_TYPES}, got '
                             f'{decoder_pos!r}')
        self.decoder_pos = decoder_pos
        self.peg_cfg = peg_cfg
        self.peg_after_cfg = peg_after
        super().__init__(*args, **kwargs)

    def _init_layers(self) -> None:
        """As :meth:`DETR._init_layers`, with :class:`PEGDetrTransformerEncoder`."""
        self.positional_encoding = SinePositionalEncoding(**self.positional_encoding)
        peg_after = self.peg_after_cfg if self.encoder_uses_peg else ()
        self.encoder = PEGDetrTransformerEncoder(
            **self.encoder, peg_after=peg_after, peg_cfg=self.peg_cfg)
        self.decoder = DetrTransformerDecoder(**self.decoder)
        self.embed_dims = self.encoder.embed_dims
        self.cape = self._build_cape(self.embed_dims)
        self.query_embedding = nn.Embedding(self.num_queries, self.embed_dims)
        num_feats = self.positional_encoding.num_feats
        assert num_feats * 2 == self.embed_dims, \
            'embed_dims should be exactly 2 times of num_feats. ' \
            f'Found {self.embed_dims} and {num_feats}.'

    def init_weights(self) -> None:
        """DETR's initialisation (xavier on >1-dim encoder/decoder weights), then the PEGs'
        own defaults: a depthwise kernel is not re-initialised as a dense matrix."""
        super().init_weights()
        for peg in self.encoder.pegs:
            for m in peg.modules():
                if isinstance(m, nn.Conv2d):
                    m.reset_parameters()

    def _padding_masks(self, feat: Tensor,
                       batch_data_samples: OptSampleList) -> Optional[Tensor]:
        """mmdet's DETR padding mask of the feature map (bs, h, w), True = padded; None when no
        image of the batch is padded (or in ONNX export), as in :meth:`DETR.pre_transformer`."""
        batch_size = feat.shape[0]
        input_img_h, input_img_w = batch_data_samples[0].batch_input_shape
        img_shape_list = [sample.img_shape for sample in batch_data_samples]
        if torch.onnx.is_in_onnx_export() or all(
                s[0] == input_img_h and s[1] == input_img_w for s in img_shape_list):
            return None
        masks = feat.new_ones((batch_size, input_img_h, input_img_w))
        for img_id, (img_h, img_w) in enumerate(img_shape_list):
            masks[img_id, :img_h, :img_w] = 0
        return F.interpolate(
            masks.unsqueeze(1), size=feat.shape[-2:]).to(torch.bool).squeeze(1)

    def pre_transformer(self,
                        img_feats: Tuple[Tensor],
                        batch_data_samples: OptSampleList = None) -> Tuple[Dict, Dict]:
        """As :meth:`DETR.pre_transformer`, plus ``hw_shape``; positions per config.

        The sine encoding is computed only when the encoder or the decoder uses it; with CAPE
        the encoder positions are the CAPE of each image's valid region.
        """
        feat = img_feats[-1]
        if self.encoder_uses_sine or self.decoder_pos == 'sine':
            encoder_inputs_dict, decoder_inputs_dict = super().pre_transformer(
                img_feats, batch_data_samples)
        else:
            assert batch_data_samples is not None
            batch_size, feat_dim = feat.shape[:2]
            masks = self._padding_masks(feat, batch_data_samples)
            if masks is not None:
                masks = masks.view(batch_size, -1)
            flat = feat.view(batch_size, feat_dim, -1).permute(0, 2, 1)
            encoder_inputs_dict = dict(feat=flat, feat_mask=masks, feat_pos=None)
            decoder_inputs_dict = dict(memory_mask=masks, memory_pos=None)
        if self.encoder_uses_cape:
            encoder_inputs_dict['feat_pos'] = self._cape_pos(feat,
                                                             encoder_inputs_dict['feat_mask'])
        elif not self.encoder_uses_sine:
            encoder_inputs_dict['feat_pos'] = None
        if self.decoder_pos == 'none':
            decoder_inputs_dict['memory_pos'] = None
        encoder_inputs_dict['hw_shape'] = tuple(feat.shape[-2:])
        return encoder_inputs_dict, decoder_inputs_dict

    def forward_encoder(self, feat: Tensor, feat_mask: Optional[Tensor],
                        feat_pos: Optional[Tensor],
                        hw_shape: Optional[Sequence[int]] = None) -> Dict:
        """As :meth:`DETR.forward_encoder`, passing ``hw_shape`` to the PEGs."""
        memory = self.encoder(
            query=feat, query_pos=feat_pos, key_padding_mask=feat_mask, hw_shape=hw_shape)
        return dict(memory=memory)

    def forward_decoder(self, query: Tensor, query_pos: Tensor, memory: Tensor,
                        memory_mask: Optional[Tensor],
                        memory_pos: Optional[Tensor]) -> Dict:
        """As :meth:`DETR.forward_decoder`; ``decoder_pos='none'`` gives zero key positions.

        (mmcv's attention would otherwise reuse ``query_pos`` as ``key_pos`` whenever the
        number of queries equals the number of memory tokens.)
        """
        if memory_pos is None:
            memory_pos = torch.zeros_like(memory)
        return super().forward_decoder(query, query_pos, memory, memory_mask, memory_pos)

    def extra_repr(self) -> str:
        return (f'encoder_pos={self.encoder_pos!r}, decoder_pos={self.decoder_pos!r}, '
                f'peg_after={self.encoder.peg_after}')
