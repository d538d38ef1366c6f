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
shapes: called by :class:`~mmposenc.models.detectors.padding_exact.PaddingExactMask2FormerHead`
(mmdet) or :class:`~mmposenc.models.detectors.padding_exact.PaddingExactSegMask2FormerHead`
(mmseg), mmdet's / mmseg's Mask2Former heads that hand each image's ``img_shape`` to the pixel
decoder (``img_shapes``, or bound around the host's call), its encoder gets exact padding masks
(``ceil(img / stride)`` cells per image and level, strides from the decoder's ``strides``): the
input projections normalise each image's valid cells alone, the attention and PEGs skip padded
tokens, the sine / CAPE are normalised over each image's extent and the reference points and
valid ratios are those of Deformable-DETR. The encoder memory on an image's valid tokens is then
the same alone and in a padded batch. The pixel decoder's FPN then keeps to each image's cells
too (``'fpn'`` of :data:`~mmposenc.models.detectors.padding_exact.mask2former.EXACT_STEPS`),
and with ``padding_exact=True`` (default) the head's transformer decoder and final resize do
(:class:`~mmposenc.models.detectors.padding_exact.PixelDecoderShapesMixin`): with a
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
from mmdet.models.layers import MSDeformAttnPixelDecoder
from torch import Tensor, nn

from mmposenc.models.padding_exact.masks import (masks_from_valid_shapes, valid_feature_shapes,
                                                 valid_shapes_of_masks)
from mmposenc.models.padding_exact.ops import interpolate_valid, masked_conv_module
from mmposenc.models.utils.call_state import CallState
from mmposenc.registry import MODELS
from .encoder_pos import EncoderPosMixin, check_ablation_args, flatten_levels
from .padding_exact.mask2former import EXACT_STEPS

#: The image shapes of each pixel decoder's running :meth:`~PEGMSDeformAttnPixelDecoder
#: .image_shapes` context (local to the thread / asyncio task).
_IMG_SHAPES = CallState(
    'mmposenc_pixel_decoder_img_shapes',
    why="mmdet's / mmseg's Mask2FormerHead.forward calls self.pixel_decoder(x) with no image "
    "shapes (the head's host path: padding_exact=False, or no padded image)")


def _as_shapes(img_shapes: Sequence[Sequence[int]]) -> List[Tuple[int, int]]:
    return [tuple(int(v) for v in s[:2]) for s in img_shapes]


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
        ...     type='mmposenc.PaddingExactMask2FormerHead',
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
        ``(h, w)`` (one per image of the batch, the part of the batch input that is image),
        for a caller that cannot pass ``forward``'s ``img_shapes`` (a host head's
        ``self.pixel_decoder(x)``). The shapes are context-local: concurrent calls on one
        decoder keep their own."""
        return _IMG_SHAPES.bind(self, _as_shapes(img_shapes))

    def padding_masks(self, feats: Sequence[Tensor],
                      img_shapes: Optional[Sequence[Sequence[int]]] = None
                      ) -> Optional[List[Tensor]]:
        """Exact bool (bs, h, w) masks of ``feats`` (one per input level, True = padded) for
        ``img_shapes``, else the image shapes of the running :meth:`image_shapes` context;
        None without either, in ONNX export, or when no image is padded at any level."""
        shapes = _IMG_SHAPES.get(self) if img_shapes is None else _as_shapes(img_shapes)
        if shapes is None or torch.onnx.is_in_onnx_export():
            return None
        if len(shapes) != feats[0].shape[0]:
            raise ValueError(f'{len(shapes)} image shapes for a batch of {feats[0].shape[0]}')
        valid = [valid_feature_shapes(shapes, None, f.shape[-2:], stride=(s, s))
                 for f, s in zip(feats, self.strides)]
        if all(v == tuple(f.shape[-2:]) for vs, f in zip(valid, feats) for v in vs):
            return None
        return [masks_from_valid_shapes(v, f.shape[-2:], f.device) for v, f in zip(valid, feats)]

    def forward(self, feats: List[Tensor],
                img_shapes: Optional[Sequence[Sequence[int]]] = None
                ) -> Tuple[Tensor, List[Tensor]]:
        """Encode the last ``num_encoder_levels`` levels, then the FPN as mmdet.

        Args:
            feats (list[Tensor]): Backbone maps (bs, in_channels[i], h_i, w_i), finest first.
            img_shapes (Sequence[Sequence[int]], optional): ``(h, w)`` of each image of a
                padded batch: its padding is masked (:meth:`padding_masks`). None: those of
                the running :meth:`image_shapes` context, if any.

        Returns:
            tuple: ``mask_feature`` (bs, out_channels, h_0, w_0) and the ``num_outs``
            multi-scale maps (bs, feat_channels, h, w), coarsest first.
        """
        batch_size = feats[0].shape[0]
        masks = self.padding_masks(feats, img_shapes)
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
