"""The padding-exact mode of Mask2Former's heads (mmdet and mmseg)."""
from typing import List, Sequence, Tuple

import torch
import torch.nn.functional as F
from mmdet.models.dense_heads import Mask2FormerHead
from torch import Tensor

from mmposenc.models.padding_exact.masks import valid_feature_shapes, valid_shapes_of_masks
from mmposenc.models.padding_exact.ops import interpolate_valid
from mmposenc.registry import MODELS

#: The masking steps of the exact mode (tests leave one out; see padding_exact_eval.md).
EXACT_STEPS = frozenset({'fpn', 'key_pos', 'key_mask', 'attn_mask_resize', 'mask_resize'})


class PixelDecoderShapesMixin:
    """Mixin giving a Mask2Former head the image sizes for its pixel decoder and, in
    padding-exact mode, running the rest of the head on each image's own cells.

    Args:
        padding_exact (bool): Run the head exactly (False: only the pixel decoder masks the
            padding). Defaults to True.
    """

    _exact_steps = EXACT_STEPS

    def __init__(self, *args, padding_exact: bool = True, **kwargs) -> None:
        self.padding_exact = padding_exact
        super().__init__(*args, **kwargs)

    def forward(self, x: Sequence[Tensor], batch_data_samples) -> Tuple:
        decoder = self.pixel_decoder
        if not hasattr(decoder, 'image_shapes'):
            return super().forward(x, batch_data_samples)
        img_shapes = [s.metainfo['img_shape'] for s in batch_data_samples]
        masks = decoder.padding_masks(x, img_shapes) if self.padding_exact else None
        if masks is None:  # the host's forward calls pixel_decoder(x): bind the shapes
            with decoder.image_shapes(img_shapes):
                return super().forward(x, batch_data_samples)
        return self.exact_forward(x, masks, img_shapes)

    def exact_forward(self, x: Sequence[Tensor], masks: List[Tensor],
                      img_shapes: Sequence[Sequence[int]]) -> Tuple[List[Tensor]]:
        """mmdet's ``Mask2FormerHead.forward`` on a padded batch, each image as alone.

        Args:
            x (Sequence[Tensor]): Backbone maps, finest first.
            masks (list[Tensor]): Bool (bs, h, w) padding masks of ``x`` (True = padded).
            img_shapes (Sequence[Sequence[int]]): ``(h, w)`` of each image.

        Returns:
            tuple[list[Tensor]]: Class and mask logits of every decoder layer, as mmdet's.
        """
        batch_size = x[0].shape[0]
        mask_features, memorys = self.pixel_decoder(x, img_shapes=img_shapes)
        num_levels = self.num_transformer_feat_level
        # memorys (coarsest first) are the decoder's input levels, last first
        level_masks = [masks[len(masks) - 1 - i] for i in range(num_levels)]
        mask_valid = valid_shapes_of_masks(masks[0]).tolist()
        keys, key_pos = [], []
        for i in range(num_levels):
            key = self.decoder_input_projs[i](memorys[i]).flatten(2).permute(0, 2, 1)
            keys.append(key + self.level_embed.weight[i].view(1, 1, -1))
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
            num_queries, h_l * w_l), True = not attended.
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
        """Final mask logits resized to ``size``, each image's own cells to its ``img_shape``.

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


@MODELS.register_module(name=['PaddingExactMask2FormerHead', 'PaddingAwareMask2FormerHead'])
class PaddingExactMask2FormerHead(PixelDecoderShapesMixin, Mask2FormerHead):
    """mmdet's :class:`~mmdet.models.dense_heads.Mask2FormerHead` in padding-exact mode (also
    registered as ``PaddingAwareMask2FormerHead``).

    Examples:
        >>> # in a config inheriting mmdet::mask2former/mask2former_r50_8xb2-lsj-50e_coco.py
        >>> model = dict(panoptic_head=dict(type='mmposenc.PaddingExactMask2FormerHead'))
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

    @MODELS.register_module(
        name=['PaddingExactSegMask2FormerHead', 'PaddingAwareSegMask2FormerHead'])
    class PaddingExactSegMask2FormerHead(PixelDecoderShapesMixin, SegMask2FormerHead):
        """mmseg's :class:`~mmseg.models.decode_heads.Mask2FormerHead` in padding-exact mode
        (also registered as ``PaddingAwareSegMask2FormerHead``).

        Examples:
            >>> # in a config inheriting
            >>> # mmseg::mask2former/mask2former_r50_8xb2-160k_ade20k-512x512.py
            >>> model = dict(decode_head=dict(type='mmposenc.PaddingExactSegMask2FormerHead'))
        """

        def predict(self, x: Tuple[Tensor], batch_img_metas: List[dict],
                    test_cfg) -> Tensor:
            """mmseg's ``predict``, the mask logits resized by :meth:`upsample_mask_preds`."""
            from mmseg.structures import SegDataSample
            all_cls_scores, all_mask_preds = self(
                x, [SegDataSample(metainfo=m) for m in batch_img_metas])
            meta = batch_img_metas[0]
            size = meta['pad_shape'] if 'pad_shape' in meta else meta['img_shape']
            mask_pred = self.upsample_mask_preds(
                all_mask_preds[-1], [m['img_shape'] for m in batch_img_metas], size).sigmoid()
            cls_score = F.softmax(all_cls_scores[-1], dim=-1)[..., :-1]
            return torch.einsum('bqc, bqhw->bchw', cls_score, mask_pred)

    #: The former name of :class:`PaddingExactSegMask2FormerHead`.
    PaddingAwareSegMask2FormerHead = PaddingExactSegMask2FormerHead
else:
    PaddingExactSegMask2FormerHead = PaddingAwareSegMask2FormerHead = None

#: The former name of :class:`PaddingExactMask2FormerHead`.
PaddingAwareMask2FormerHead = PaddingExactMask2FormerHead
