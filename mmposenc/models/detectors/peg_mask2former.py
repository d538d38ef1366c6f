"""Mask2Former's pixel decoder with the encoder position switch, for mmdet and mmseg.

Mask2Former's pixel decoder (mmdet's :class:`~mmdet.models.layers.MSDeformAttnPixelDecoder`, used
by mmdet's COCO instance / panoptic configs and by mmseg's ADE20K configs) runs a
Deformable-DETR encoder over the last three backbone levels with a hard-coded
:class:`~mmdet.models.layers.SinePositionalEncoding` plus a level embedding.
:class:`PEGMSDeformAttnPixelDecoder` takes the switch of
:mod:`mmposenc.models.detectors.encoder_pos` instead (``encoder_pos``, ``peg_after``,
``peg_cfg``, ``cape_cfg``, ``level_embed``; multi-level masked PEGs, one CAPE per level), with
the same modules and state-dict keys as mmdet's (plus ``encoder.pegs`` with PEGs).

Padding. mmdet's pixel decoder masks nothing: padded cells are image to its encoder (all-False
masks, sine normalised over the padded map, reference points over the padded map, GroupNorm of
the input projections over the padded map). Ours does the same unless it knows the image
shapes: inside the ``forward`` of :class:`PaddingAwareMask2FormerHead` (mmdet) or
:class:`PaddingAwareSegMask2FormerHead` (mmseg), mmdet's / mmseg's Mask2Former heads that hand
each image's ``img_shape`` to the pixel decoder, its encoder gets exact padding masks
(``ceil(img / stride)`` cells per image and level, strides from the decoder's ``strides``): the
input projections normalise each image's valid cells alone, the attention and PEGs skip padded
tokens, the sine / CAPE are normalised over each image's extent and the reference points and
valid ratios are those of Deformable-DETR. The encoder memory on an image's valid tokens is then
the same alone and in a padded batch. The pixel decoder's FPN then keeps to each image's cells
too (``'fpn'`` of :data:`EXACT_STEPS`), and with ``padding_exact=True`` (default) the head's
transformer decoder and final resize do (:class:`PixelDecoderShapesMixin`): with a
padding-exact backbone an image gets the same masks and scores alone and in any padded batch.
The losses see the padding as mmdet's (the mask logits there are zero).

With no padded image in the batch (every image as large as the batch: e.g. mmseg's training
crops and slide inference, ONNX export; mmdet's LSJ crops can be smaller than the 1024 fixed
pad, and those batches take the masked path) the mask-free path is taken, and ``encoder_pos='sine'`` is then
bit-identical to mmdet's pixel decoder (and the head to mmdet's / mmseg's). The transformer
decoder's own level positions are the head's ``positional_encoding`` in every mode.
"""
from typing import List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from mmdet.models.dense_heads import Mask2FormerHead
from mmdet.models.layers import MSDeformAttnPixelDecoder
from torch import Tensor, nn

from mmposenc.registry import MODELS
from ..necks.masked_channel_mapper import masked_conv_module
from ..utils.call_state import CallState
from ..utils.padding_masks import (masks_from_valid_shapes, valid_feature_shapes,
                                   valid_shapes_of_masks)
from .encoder_pos import EncoderPosMixin, check_ablation_args, flatten_levels

#: The steps that make Mask2Former exact on a padded batch, beyond the encoder's masks (each can
#: be left out, ``_exact_steps`` of the pixel decoder and the head, to show it is needed): the
#: pixel decoder's FPN on each image's own cells (``'fpn'``: GroupNorm over them, the coarser
#: level resized at the image's scale, zeros around the 3x3 convolutions); the transformer
#: decoder's level positions normalised over each image's cells (``'key_pos'``); padded cells
#: never attended, the empty-mask rule over the image's cells (``'key_mask'``); each image's
#: attention masks and final mask logits resized from its own cells at its own scale
#: (``'attn_mask_resize'``, ``'mask_resize'``).
EXACT_STEPS = frozenset({'fpn', 'key_pos', 'key_mask', 'attn_mask_resize', 'mask_resize'})

#: The image shapes of each pixel decoder's running :meth:`~PEGMSDeformAttnPixelDecoder
#: .image_shapes` context (local to the thread / asyncio task).
_IMG_SHAPES = CallState('mmposenc_pixel_decoder_img_shapes')


def interpolate_valid(x: Tensor, src_valid: Sequence[Sequence[int]],
                      dst_valid: Sequence[Sequence[int]], size: Sequence[int]) -> Tensor:
    """Bilinear resize (``align_corners=False``) of each image's own cells of ``x`` to its own
    cells of a map of ``size``, as the image alone resizes its map: the scale is the image's
    (``src / dst`` cells), not the padded batch's, and the border is the image's own.

    Args:
        x (Tensor): Maps (bs, C, h, w).
        src_valid (Sequence[Sequence[int]]): ``(rows, cols)`` of each image in ``x``.
        dst_valid (Sequence[Sequence[int]]): ``(rows, cols)`` of each image in the output.
        size (Sequence[int]): ``(H, W)`` of the output.

    Returns:
        Tensor: (bs, C, H, W), zero outside each image's ``dst_valid`` cells.

    Examples:
        >>> x = torch.randn(2, 3, 4, 4)
        >>> out = interpolate_valid(x, [(3, 4), (4, 4)], [(5, 7), (8, 8)], (8, 8))
        >>> alone = F.interpolate(x[:1, :, :3], (5, 7), mode='bilinear', align_corners=False)
        >>> torch.equal(out[:1, :, :5, :7], alone), bool(out[0, :, 5:].eq(0).all())
        (True, True)
    """
    out = x.new_zeros(tuple(x.shape[:2]) + tuple(int(v) for v in size))
    for i, ((sh, sw), (dh, dw)) in enumerate(zip(src_valid, dst_valid)):
        sh, sw, dh, dw = int(sh), int(sw), int(dh), int(dw)
        out[i, :, :dh, :dw] = F.interpolate(x[i:i + 1, :, :sh, :sw], size=(dh, dw),
                                            mode='bilinear', align_corners=False)[0]
    return out


@MODELS.register_module()
class PEGMSDeformAttnPixelDecoder(EncoderPosMixin, MSDeformAttnPixelDecoder):
    """Mask2Former's pixel decoder with a configurable encoder position encoding.

    `Masked-attention Mask Transformer for Universal Image Segmentation
    <https://arxiv.org/abs/2112.01527>`_ with the encoder positions of `CPVT
    <https://arxiv.org/abs/2102.10882>`_ (multi-level masked PEG) or `CAPE
    <https://arxiv.org/abs/2106.03143>`_ (one per level). See the module doc for padding.

    Args:
        encoder_pos (str): ``'sine'`` (stock: sine + level embedding), ``'peg'``,
            ``'sine+peg'``, ``'cape'``, ``'cape+peg'`` or ``'none'``. Defaults to ``'peg'``.
        level_embed (bool, optional): Without sine, still add the learnt level embedding
            (``level_encoding``) to the encoder tokens (False with sine is refused: the sine
            encoding always comes with it). None (default) is True.
        peg_after (Sequence[int], optional): PEG positions: ``i`` = after encoder layer
            ``i``, ``-1`` = before the first. None (default) is ``(0, )``; refused without PEG.
        peg_cfg (dict, optional): Config of each PEG (``embed_dims``, ``num_levels`` filled
            in). Defaults to ``dict(type='mmposenc.MultiLevelMaskedPEG', kernel_size=3,
            share_weights=False)``.
        cape_cfg (dict, optional): Config of the CAPE for ``'cape'`` / ``'cape+peg'``
            (refused without CAPE). None (default) is ``dict(type='mmposenc.CAPE2d')``.
        *args, **kwargs: Those of :class:`mmdet.models.layers.MSDeformAttnPixelDecoder`
            (``in_channels``, ``strides``, ``feat_channels``, ``encoder``, ...).

    Examples:
        >>> # in a config inheriting mmdet::mask2former/mask2former_r50_8xb2-lsj-50e_coco.py
        >>> model = dict(panoptic_head=dict(
        ...     type='mmposenc.PaddingAwareMask2FormerHead',
        ...     pixel_decoder=dict(type='mmposenc.PEGMSDeformAttnPixelDecoder',
        ...                        encoder_pos='peg')))
    """

    default_peg_cfg = dict(type='mmposenc.MultiLevelMaskedPEG', kernel_size=3,
                           share_weights=False)
    _exact_steps = EXACT_STEPS

    def __init__(self, *args, level_embed: Optional[bool] = None, **kwargs) -> None:
        check_ablation_args(type(self).__name__, kwargs.get('encoder_pos', 'peg'),
                            level_embed=level_embed)
        self.use_level_embed = level_embed is not False
        super().__init__(*args, **kwargs)
        self.install_peg_encoder(num_levels=self.num_encoder_levels)

    @property
    def sine_encoding(self) -> nn.Module:
        return self.postional_encoding  # mmdet's attribute name

    def image_shapes(self, img_shapes: Sequence[Sequence[int]]):
        """Within the context, ``forward`` masks the padding of images of ``img_shapes``
        ``(h, w)`` (one per image of the batch, the part of the batch input that is image).
        The shapes are context-local: concurrent calls on one decoder keep their own."""
        return _IMG_SHAPES.bind(self, [tuple(int(v) for v in s[:2]) for s in img_shapes])

    def padding_masks(self, feats: Sequence[Tensor]) -> Optional[List[Tensor]]:
        """Exact bool (bs, h, w) masks of ``feats`` (one per input level, True = padded) for
        the image shapes of the running :meth:`image_shapes` context; None outside it, in ONNX
        export, or when no image is padded at any level."""
        shapes = _IMG_SHAPES.get(self)
        if shapes is None or torch.onnx.is_in_onnx_export():
            return None
        if len(shapes) != feats[0].shape[0]:
            raise ValueError(f'{len(shapes)} image shapes for a batch of {feats[0].shape[0]}')
        valid = [valid_feature_shapes(shapes, None, f.shape[-2:], stride=(s, s))
                 for f, s in zip(feats, self.strides)]
        if all(v == tuple(f.shape[-2:]) for vs, f in zip(valid, feats) for v in vs):
            return None
        return [masks_from_valid_shapes(v, f.shape[-2:], f.device) for v, f in zip(valid, feats)]

    def forward(self, feats: List[Tensor]) -> Tuple[Tensor, List[Tensor]]:
        """Encode the last ``num_encoder_levels`` levels, then the FPN as mmdet.

        Args:
            feats (list[Tensor]): Backbone maps (bs, in_channels[i], h_i, w_i), finest first.

        Returns:
            tuple: ``mask_feature`` (bs, out_channels, h_0, w_0) and the ``num_outs``
            multi-scale maps (bs, feat_channels, h, w), coarsest first.
        """
        batch_size = feats[0].shape[0]
        masks = self.padding_masks(feats)
        maps, positions, level_masks = [], [], []
        for i in range(self.num_encoder_levels):
            level = self.num_input_levels - i - 1
            feat, mask = feats[level], None if masks is None else masks[level]
            if mask is None:
                x = self.input_convs[i](feat)
            else:  # GroupNorm over each image's valid cells
                x = masked_conv_module(self.input_convs[i], feat, mask)[0]
            positions.append(self.level_pos(x, mask, self.level_encoding.weight[i]))
            maps.append(x)
            level_masks.append(mask)
        inputs = flatten_levels(maps, None if masks is None else level_masks, positions)
        spatial_shapes = inputs['spatial_shapes']
        if masks is None:
            reference_points = self._grid_reference_points(feats, batch_size)
            valid_ratios = reference_points.new_ones((batch_size, self.num_encoder_levels, 2))
        else:
            valid_ratios = inputs['valid_ratios']
            reference_points = self.encoder.get_encoder_reference_points(
                spatial_shapes, valid_ratios, device=feats[0].device)
        memory = self.encoder(
            query=inputs['feat'],
            query_pos=inputs['feat_pos'],
            key_padding_mask=inputs['feat_mask'],
            spatial_shapes=spatial_shapes,
            reference_points=reference_points,
            level_start_index=inputs['level_start_index'],
            valid_ratios=valid_ratios)
        memory = memory.permute(0, 2, 1)
        num_tokens = [s[0] * s[1] for s in spatial_shapes]
        outs = [
            m.reshape(batch_size, -1, s[0], s[1])
            for m, s in zip(torch.split(memory, num_tokens, dim=-1), spatial_shapes)
        ]
        if masks is not None:  # the padded tokens of the memory are not the image's
            outs = [o.masked_fill(m[:, None], 0) for o, m in zip(outs, level_masks)]
        for i in range(self.num_input_levels - self.num_encoder_levels - 1, -1, -1):
            if masks is None or 'fpn' not in self._exact_steps:
                lateral = self.lateral_convs[i](feats[i])
                y = lateral + F.interpolate(
                    outs[-1], size=lateral.shape[-2:], mode='bilinear', align_corners=False)
                outs.append(self.output_convs[i](y))
                continue
            # each image's own cells: GroupNorm over them, the coarser map's own cells
            # upsampled to them (the scale of the image alone), zeros around the 3x3 conv
            lateral = masked_conv_module(self.lateral_convs[i], feats[i], masks[i])[0]
            y = lateral + interpolate_valid(outs[-1], valid_shapes_of_masks(masks[i + 1]),
                                            valid_shapes_of_masks(masks[i]),
                                            lateral.shape[-2:])
            outs.append(masked_conv_module(self.output_convs[i], y, masks[i])[0])
        mask_feature = self.mask_feature(outs[-1])
        if masks is not None:
            mask_feature = mask_feature.masked_fill(masks[0][:, None], 0)
        return mask_feature, outs[:self.num_outs]

    def _grid_reference_points(self, feats: Sequence[Tensor], batch_size: int) -> Tensor:
        """mmdet's reference points: cell centres of each encoder level over its whole map,
        (bs, num_tokens, num_levels, 2) normalised to [0, 1]."""
        points = []
        for i in range(self.num_encoder_levels):
            level = self.num_input_levels - i - 1
            feat = feats[level]
            centres = self.point_generator.single_level_grid_priors(
                feat.shape[-2:], level, device=feat.device)
            wh = torch._shape_as_tensor(feat)[2:].to(feat.device).unsqueeze(0).flip(dims=[0, 1])
            points.append(centres / (wh * self.strides[level]))
        points = torch.cat(points, 0)
        return points[None, :, None].repeat(batch_size, 1, self.num_encoder_levels, 1)

    def extra_repr(self) -> str:
        return f'{super().extra_repr()}, level_embed={self.use_level_embed}'


class PixelDecoderShapesMixin:
    """Hands each image's ``img_shape`` to a pixel decoder that can mask padding (one with
    ``image_shapes``, e.g. :class:`PEGMSDeformAttnPixelDecoder`) for the duration of the head's
    ``forward``; other pixel decoders run as the host calls them.

    With ``padding_exact=True`` (default) and such a pixel decoder, the rest of the head gives
    each image of a padded batch what it gives the image alone, too (:meth:`exact_forward`,
    :meth:`upsample_mask_preds`): the transformer decoder's level positions are normalised
    over each image's own cells, its masked attention never attends to padded cells (and a
    query whose mask covers none of the image's cells attends to all of them, as alone), the
    attention masks are each image's own mask cells resized to its own cells of the level, and
    the final mask logits are each image's own cells resized to its ``img_shape``.
    ``padding_exact=False``: only the pixel decoder masks the padding.

    Args:
        padding_exact (bool): See above. Defaults to True.
    """

    _exact_steps = EXACT_STEPS

    def __init__(self, *args, padding_exact: bool = True, **kwargs) -> None:
        self.padding_exact = padding_exact
        super().__init__(*args, **kwargs)

    def forward(self, x: Sequence[Tensor], batch_data_samples) -> Tuple:
        decoder = self.pixel_decoder
        if not hasattr(decoder, 'image_shapes'):
            return super().forward(x, batch_data_samples)
        with decoder.image_shapes([s.metainfo['img_shape'] for s in batch_data_samples]):
            masks = decoder.padding_masks(x) if self.padding_exact else None
            if masks is None:
                return super().forward(x, batch_data_samples)
            return self.exact_forward(x, masks)

    def exact_forward(self, x: Sequence[Tensor], masks: List[Tensor]) -> Tuple[List[Tensor]]:
        """mmdet's ``Mask2FormerHead.forward`` on a padded batch, each image as alone.

        Args:
            x (Sequence[Tensor]): Backbone maps, finest first.
            masks (list[Tensor]): Bool (bs, h, w) padding masks of ``x`` (True = padded).

        Returns:
            tuple[list[Tensor]]: Class logits and mask logits of every decoder layer, as
            mmdet's (the mask logits are zero on padded cells).
        """
        batch_size = x[0].shape[0]
        mask_features, memorys = self.pixel_decoder(x)
        num_levels = self.num_transformer_feat_level
        # memorys (coarsest first) are the decoder's input levels, last first
        level_masks = [masks[len(masks) - 1 - i] for i in range(num_levels)]
        mask_valid = valid_shapes_of_masks(masks[0]).tolist()
        keys, key_pos = [], []
        for i in range(num_levels):
            key = self.decoder_input_projs[i](memorys[i]).flatten(2).permute(0, 2, 1)
            keys.append(key + self.level_embed.weight[i].view(1, 1, -1))
            # the sine normalised over each image's own cells
            pos_mask = level_masks[i] if 'key_pos' in self._exact_steps else torch.zeros_like(
                level_masks[i])
            key_pos.append(self.decoder_positional_encoding(pos_mask).flatten(2).permute(0, 2, 1))
        query_feat = self.query_feat.weight.unsqueeze(0).repeat((batch_size, 1, 1))
        query_embed = self.query_embed.weight.unsqueeze(0).repeat((batch_size, 1, 1))

        cls_pred_list, mask_pred_list = [], []
        cls_pred, mask_pred, attn_mask = self.exact_forward_head(
            query_feat, mask_features, mask_valid, level_masks[0])
        cls_pred_list.append(cls_pred)
        mask_pred_list.append(mask_pred)
        for i in range(self.num_transformer_decoder_layers):
            level = i % num_levels
            query_feat = self.transformer_decoder.layers[i](
                query=query_feat,
                key=keys[level],
                value=keys[level],
                query_pos=query_embed,
                key_pos=key_pos[level],
                cross_attn_mask=attn_mask,
                query_key_padding_mask=None,
                key_padding_mask=None)
            cls_pred, mask_pred, attn_mask = self.exact_forward_head(
                query_feat, mask_features, mask_valid, level_masks[(i + 1) % num_levels])
            cls_pred_list.append(cls_pred)
            mask_pred_list.append(mask_pred)
        return cls_pred_list, mask_pred_list

    def exact_forward_head(self, decoder_out: Tensor, mask_feature: Tensor,
                           mask_valid: Sequence[Sequence[int]],
                           level_mask: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
        """mmdet's ``_forward_head`` plus the loop's rule for empty masks, per image.

        Args:
            decoder_out (Tensor): (bs, num_queries, C).
            mask_feature (Tensor): (bs, C, h, w), zero on padded cells.
            mask_valid (Sequence[Sequence[int]]): Each image's cells in ``mask_feature``.
            level_mask (Tensor): Bool (bs, h_l, w_l) padding mask of the level attended next.

        Returns:
            tuple[Tensor]: ``cls_pred`` (bs, num_queries, cls_out_channels), ``mask_pred``
            (bs, num_queries, h, w) and the cross-attention mask (bs * num_heads,
            num_queries, h_l * w_l), True = not attended: padded cells always; an image's
            cells where its resized mask is below 0.5, unless that is all of them.
        """
        decoder_out = self.transformer_decoder.post_norm(decoder_out)
        cls_pred = self.cls_embed(decoder_out)
        mask_embed = self.mask_embed(decoder_out)
        mask_pred = torch.einsum('bqc,bchw->bqhw', mask_embed, mask_feature)
        if 'attn_mask_resize' in self._exact_steps:
            attn_mask = interpolate_valid(mask_pred, mask_valid,
                                          valid_shapes_of_masks(level_mask).tolist(),
                                          level_mask.shape[-2:])
        else:
            attn_mask = F.interpolate(mask_pred, level_mask.shape[-2:], mode='bilinear',
                                      align_corners=False)
        attn_mask = attn_mask.flatten(2).sigmoid() < 0.5
        padded = level_mask.flatten(1)[:, None]  # (bs, 1, h_l * w_l)
        if 'key_mask' not in self._exact_steps:
            padded = torch.zeros_like(padded)
        empty = (attn_mask | padded).all(-1, keepdim=True)
        attn_mask = (attn_mask & ~empty) | padded
        attn_mask = attn_mask.unsqueeze(1).repeat((1, self.num_heads, 1, 1)).flatten(0, 1)
        return cls_pred, mask_pred, attn_mask.detach()

    def upsample_mask_preds(self, mask_preds: Tensor, img_shapes: Sequence[Sequence[int]],
                            size: Sequence[int]) -> Tensor:
        """The final mask logits resized to the batch input, as mmdet / mmseg do, but each
        image's own cells resized to its ``img_shape`` (the scale of the image alone), zeros
        around; the host's single resize when ``padding_exact`` is False or no image is
        smaller than ``size``.

        Args:
            mask_preds (Tensor): (bs, num_queries, h, w) at the pixel decoder's finest stride.
            img_shapes (Sequence[Sequence[int]]): ``(h, w)`` of each image.
            size (Sequence[int]): ``(H, W)`` of the output (the batch input).

        Returns:
            Tensor: (bs, num_queries, H, W).
        """
        size = tuple(int(v) for v in size[:2])
        shapes = [tuple(int(v) for v in s[:2]) for s in img_shapes]
        if 'mask_resize' not in self._exact_steps or not self.padding_exact or all(
                s == size for s in shapes) or not hasattr(
                self.pixel_decoder, 'image_shapes') or torch.onnx.is_in_onnx_export():
            return F.interpolate(mask_preds, size=size, mode='bilinear', align_corners=False)
        stride = self.pixel_decoder.strides[0]
        valid = valid_feature_shapes(shapes, None, mask_preds.shape[-2:], stride=(stride, stride))
        return interpolate_valid(mask_preds, valid, shapes, size)


@MODELS.register_module()
class PaddingAwareMask2FormerHead(PixelDecoderShapesMixin, Mask2FormerHead):
    """mmdet's :class:`~mmdet.models.dense_heads.Mask2FormerHead` whose pixel decoder masks the
    padding of each image (with :class:`PEGMSDeformAttnPixelDecoder`; arguments and state dict
    are mmdet's).

    Examples:
        >>> # in a config inheriting mmdet::mask2former/mask2former_r50_8xb2-lsj-50e_coco.py
        >>> model = dict(panoptic_head=dict(type='mmposenc.PaddingAwareMask2FormerHead'))
    """

    def predict(self, x: Tuple[Tensor], batch_data_samples) -> Tuple[Tensor, Tensor]:
        """mmdet's ``predict``, the mask logits resized by :meth:`upsample_mask_preds`."""
        all_cls_scores, all_mask_preds = self(x, batch_data_samples)
        metas = [s.metainfo for s in batch_data_samples]
        mask_preds = self.upsample_mask_preds(all_mask_preds[-1],
                                              [m['img_shape'] for m in metas],
                                              metas[0]['batch_input_shape'])
        return all_cls_scores[-1], mask_preds


try:
    from mmseg.models.decode_heads import Mask2FormerHead as SegMask2FormerHead
except ImportError:  # mmseg is optional for the detectors
    SegMask2FormerHead = None

if SegMask2FormerHead is not None:

    @MODELS.register_module()
    class PaddingAwareSegMask2FormerHead(PixelDecoderShapesMixin, SegMask2FormerHead):
        """mmseg's :class:`~mmseg.models.decode_heads.Mask2FormerHead` whose pixel decoder
        masks the padding of each image (with :class:`PEGMSDeformAttnPixelDecoder`; arguments
        and state dict are mmseg's).

        Examples:
            >>> # in a config inheriting
            >>> # mmseg::mask2former/mask2former_r50_8xb2-160k_ade20k-512x512.py
            >>> model = dict(decode_head=dict(type='mmposenc.PaddingAwareSegMask2FormerHead'))
        """

        def predict(self, x: Tuple[Tensor], batch_img_metas: List[dict],
                    test_cfg) -> Tensor:
            """mmseg's ``predict``, the mask logits resized by :meth:`upsample_mask_preds`
            (to ``pad_shape`` if given, else ``img_shape``, as mmseg)."""
            from mmseg.structures import SegDataSample
            all_cls_scores, all_mask_preds = self(
                x, [SegDataSample(metainfo=m) for m in batch_img_metas])
            meta = batch_img_metas[0]
            size = meta['pad_shape'] if 'pad_shape' in meta else meta['img_shape']
            mask_pred = self.upsample_mask_preds(
                all_mask_preds[-1], [m['img_shape'] for m in batch_img_metas], size).sigmoid()
            cls_score = F.softmax(all_cls_scores[-1], dim=-1)[..., :-1]
            return torch.einsum('bqc, bqhw->bchw', cls_score, mask_pred)
