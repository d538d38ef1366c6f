"""Deformable-DETR whose encoder position encoding is chosen by config (CPVT "DD + PEG").

:class:`PEGDeformableDETR` subclasses mmdet's :class:`~mmdet.models.DeformableDETR` and
overrides ``_init_layers`` and ``pre_transformer``; its encoder,
:class:`PEGDeformableDetrTransformerEncoder`, applies a
:class:`~mmposenc.models.layers.MultiLevelMaskedPEG` (each level on its own grid with its own
padding mask) after chosen layers. With ``encoder_pos='sine'`` it is numerically identical to
mmdet's model. ``with_box_refine``, ``as_two_stage`` and the no-mask path (all images of the
batch the same size, as in ONNX export) work as in mmdet.

``encoder_pos='cape'`` uses a :class:`~mmposenc.models.layers.CAPE2d` per level instead of the
sine encoding: each level's grid with its own padding mask, the positions of each image's
valid region scaled to ``[-1, 1]`` (so the levels share one coordinate frame), plus the level
embedding as with the sine encoding.

The deformable decoder's cross-attention uses no memory position embedding (it samples the
memory around reference points), so unlike :class:`~mmposenc.models.detectors.PEGDETR` there is
no ``decoder_pos`` switch: the encoder position encoding is the only one that changes.
"""
from typing import Dict, Optional, Sequence, Tuple

import torch
from mmdet.models.detectors.deformable_detr import DeformableDETR
from mmdet.models.layers import (DeformableDetrTransformerDecoder,
                                 DeformableDetrTransformerEncoder, SinePositionalEncoding)
from mmdet.structures import OptSampleList
from torch import Tensor, nn
from torch.nn import functional as F

from mmposenc.registry import MODELS
from .peg_detr import EncoderPosMixin, build_pegs, check_encoder_pos, check_peg_after


class PEGDeformableDetrTransformerEncoder(DeformableDetrTransformerEncoder):
    """Deformable-DETR encoder with multi-level masked PEGs after chosen layers.

    Args:
        peg_after (Sequence[int]): ``i`` = a PEG after encoder layer ``i``, ``-1`` = before
            the first layer; empty for the stock encoder. Defaults to ``()``.
        peg_cfg (dict, optional): Config of each PEG (``embed_dims`` filled in).
            Defaults to ``dict(type='mmposenc.MultiLevelMaskedPEG')``.
        num_levels (int): Feature levels, passed to PEGs whose config lacks it. Defaults to 4.
        *args, **kwargs: Those of :class:`mmdet.models.layers.DeformableDetrTransformerEncoder`.
    """

    def __init__(self, *args, peg_after: Sequence[int] = (),
                 peg_cfg: Optional[dict] = dict(type='mmposenc.MultiLevelMaskedPEG'),
                 num_levels: int = 4, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.peg_after = check_peg_after(peg_after, self.num_layers)
        self.pegs = build_pegs(
            peg_cfg, self.peg_after, embed_dims=self.embed_dims, num_levels=num_levels)
        self._peg_index = {pos: i for i, pos in enumerate(self.peg_after)}

    def _apply_peg(self, position: int, query: Tensor, **peg_inputs) -> Tensor:
        index = self._peg_index.get(position)
        if index is None:
            return query
        return self.pegs[index](query, **peg_inputs)

    def forward(self, query: Tensor, query_pos: Optional[Tensor],
                key_padding_mask: Optional[Tensor], spatial_shapes: Tensor,
                level_start_index: Tensor, valid_ratios: Tensor, **kwargs) -> Tensor:
        """Encode the concatenated multi-level tokens; arguments as in mmdet's encoder
        (``query_pos`` and ``key_padding_mask`` may be None)."""
        reference_points = self.get_encoder_reference_points(
            spatial_shapes, valid_ratios, device=query.device)
        peg_inputs = dict(spatial_shapes=spatial_shapes, level_start_index=level_start_index,
                          key_padding_mask=key_padding_mask)
        query = self._apply_peg(-1, query, **peg_inputs)
        for i, layer in enumerate(self.layers):
            query = layer(
                query=query,
                query_pos=query_pos,
                key_padding_mask=key_padding_mask,
                spatial_shapes=spatial_shapes,
                level_start_index=level_start_index,
                valid_ratios=valid_ratios,
                reference_points=reference_points,
                **kwargs)
            query = self._apply_peg(i, query, **peg_inputs)
        return query


@MODELS.register_module()
class PEGDeformableDETR(EncoderPosMixin, DeformableDETR):
    """Deformable-DETR with a configurable encoder position encoding (CPVT "DD w/o PE + PEG").

    `Conditional Positional Encodings for Vision Transformers
    <https://arxiv.org/abs/2102.10882>`_ on top of `Deformable DETR
    <https://arxiv.org/abs/2010.04159>`_.

    Args:
        encoder_pos (str): Position encoding of the encoder tokens.

            - ``'sine'``: sine encoding + level embedding (stock, identical to mmdet);
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

    def __init__(self,
                 *args,
                 encoder_pos: str = 'peg',
                 level_embed: bool = True,
                 peg_after: Sequence[int] = (0, ),
                 peg_cfg: dict = dict(
                     type='mmposenc.MultiLevelMaskedPEG', kernel_size=3, share_weights=False),
                 cape_cfg: Optional[dict] = dict(type='mmposenc.CAPE2d'),
                 **kwargs) -> None:
        self.encoder_pos = check_encoder_pos(encoder_pos)
        self.cape_cfg = cape_cfg
        self.use_level_embed = level_embed
        self.peg_cfg = peg_cfg
        self.peg_after_cfg = peg_after
        super().__init__(*args, **kwargs)

    def _init_layers(self) -> None:
        """As :meth:`DeformableDETR._init_layers`, with the PEG encoder."""
        self.positional_encoding = SinePositionalEncoding(**self.positional_encoding)
        peg_after = self.peg_after_cfg if self.encoder_uses_peg else ()
        self.encoder = PEGDeformableDetrTransformerEncoder(
            **self.encoder, peg_after=peg_after, peg_cfg=self.peg_cfg,
            num_levels=self.num_feature_levels)
        self.decoder = DeformableDetrTransformerDecoder(**self.decoder)
        self.embed_dims = self.encoder.embed_dims
        self.cape = self._build_cape(self.embed_dims)
        if not self.as_two_stage:
            self.query_embedding = nn.Embedding(self.num_queries, self.embed_dims * 2)
        num_feats = self.positional_encoding.num_feats
        assert num_feats * 2 == self.embed_dims, \
            'embed_dims should be exactly 2 times of num_feats. ' \
            f'Found {self.embed_dims} and {num_feats}.'
        self.level_embed = nn.Parameter(torch.Tensor(self.num_feature_levels, self.embed_dims))
        if self.as_two_stage:
            self.memory_trans_fc = nn.Linear(self.embed_dims, self.embed_dims)
            self.memory_trans_norm = nn.LayerNorm(self.embed_dims)
            self.pos_trans_fc = nn.Linear(self.embed_dims * 2, self.embed_dims * 2)
            self.pos_trans_norm = nn.LayerNorm(self.embed_dims * 2)
        else:
            self.reference_points_fc = nn.Linear(self.embed_dims, 2)

    def init_weights(self) -> None:
        """Deformable-DETR's initialisation; then the PEG convolutions get their own default
        (xavier on a depthwise kernel is not meant)."""
        super().init_weights()
        for peg in self.encoder.pegs:
            for m in peg.modules():
                if isinstance(m, nn.Conv2d):
                    m.reset_parameters()

    def pre_transformer(self,
                        mlvl_feats: Tuple[Tensor],
                        batch_data_samples: OptSampleList = None) -> Tuple[Dict, Dict]:
        """As :meth:`DeformableDETR.pre_transformer`; without sine the encoder positions are
        the per-level CAPE (with CAPE) plus the level embeddings (``level_embed=True``), or
        None, and no sine is computed."""
        if self.encoder_uses_sine:
            return super().pre_transformer(mlvl_feats, batch_data_samples)
        assert batch_data_samples is not None
        batch_size = mlvl_feats[0].size(0)
        input_img_h, input_img_w = batch_data_samples[0].batch_input_shape
        img_shape_list = [sample.img_shape for sample in batch_data_samples]
        same_shape = all(s[0] == input_img_h and s[1] == input_img_w for s in img_shape_list)
        if torch.onnx.is_in_onnx_export() or same_shape:
            mlvl_masks = [None] * len(mlvl_feats)
        else:
            masks = mlvl_feats[0].new_ones((batch_size, input_img_h, input_img_w))
            for img_id, (img_h, img_w) in enumerate(img_shape_list):
                masks[img_id, :img_h, :img_w] = 0
            mlvl_masks = [
                F.interpolate(masks[None], size=feat.shape[-2:]).to(torch.bool).squeeze(0)
                for feat in mlvl_feats
            ]
        feat_flatten, lvl_pos_flatten, mask_flatten, spatial_shapes = [], [], [], []
        for lvl, (feat, mask) in enumerate(zip(mlvl_feats, mlvl_masks)):
            _, c, h, w = feat.shape
            feat_flatten.append(feat.view(batch_size, c, -1).permute(0, 2, 1))
            mask_flatten.append(mask.flatten(1) if mask is not None else None)
            lvl_pos = None
            if self.use_level_embed:
                lvl_pos = self.level_embed[lvl].view(1, 1, -1).to(feat.dtype).expand(
                    batch_size, h * w, -1)
            if self.encoder_uses_cape:
                cape = self._cape_pos(feat, mask_flatten[-1])
                lvl_pos = cape if lvl_pos is None else cape + lvl_pos
            lvl_pos_flatten.append(lvl_pos)
            spatial_shapes.append(torch._shape_as_tensor(feat)[2:])  # traceable (ONNX)
        feat_flatten = torch.cat(feat_flatten, 1)
        feat_pos = torch.cat(lvl_pos_flatten, 1) if lvl_pos_flatten[0] is not None else None
        mask_flatten = torch.cat(mask_flatten, 1) if mlvl_masks[0] is not None else None
        spatial_shapes = torch.stack(spatial_shapes).to(feat_flatten.device)
        level_start_index = torch.cat((spatial_shapes.new_zeros(
            (1, )), spatial_shapes.prod(1).cumsum(0)[:-1]))
        if mlvl_masks[0] is not None:
            valid_ratios = torch.stack([self.get_valid_ratio(m) for m in mlvl_masks], 1)
        else:
            valid_ratios = mlvl_feats[0].new_ones(batch_size, len(mlvl_feats), 2)
        encoder_inputs_dict = dict(
            feat=feat_flatten,
            feat_mask=mask_flatten,
            feat_pos=feat_pos,
            spatial_shapes=spatial_shapes,
            level_start_index=level_start_index,
            valid_ratios=valid_ratios)
        decoder_inputs_dict = dict(
            memory_mask=mask_flatten,
            spatial_shapes=spatial_shapes,
            level_start_index=level_start_index,
            valid_ratios=valid_ratios)
        return encoder_inputs_dict, decoder_inputs_dict

    def extra_repr(self) -> str:
        return (f'encoder_pos={self.encoder_pos!r}, level_embed={self.use_level_embed}, '
                f'peg_after={self.encoder.peg_after}')

