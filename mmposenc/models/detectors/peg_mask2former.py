"""Mask2Former's pixel decoder with the encoder position switch, for mmdet and mmseg (see
``docs/user_guides/swap_detector_pe.md``)."""
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

#: The image shapes bound by each pixel decoder's ``image_shapes`` (thread / task local).
_IMG_SHAPES = CallState(
    'mmposenc_pixel_decoder_img_shapes',
    why="mmdet's / mmseg's Mask2FormerHead.forward calls self.pixel_decoder(x) with no image "
    "shapes (the head's host path: padding_exact=False, or no padded image)")


def _as_shapes(img_shapes: Sequence[Sequence[int]]) -> List[Tuple[int, int]]:
    return [tuple(int(v) for v in s[:2]) for s in img_shapes]


@MODELS.register_module()
class PEGMSDeformAttnPixelDecoder(EncoderPosMixin, MSDeformAttnPixelDecoder):
    """Mask2Former's pixel decoder with a configurable encoder position encoding, masking the
    padding when given the image shapes (same state dict as mmdet's, plus the PEGs).

    Args:
        encoder_pos (str): ``'sine'`` (stock: sine + level embedding), ``'peg'``,
            ``'sine+peg'``, ``'cape'``, ``'cape+peg'`` or ``'none'``. Defaults to ``'peg'``.
        level_embed (bool, optional): Add the level embedding without sine (refused False
            with sine). None (default) is True.
        peg_after (Sequence[int], optional): PEG positions: ``i`` = after encoder layer
            ``i``, ``-1`` = before the first. None (default) is ``(0, )``; refused without PEG.
        peg_cfg (dict, optional): Config of each PEG. Defaults to
            ``dict(type='mmposenc.MultiLevelMaskedPEG', kernel_size=3, share_weights=False)``.
        cape_cfg (dict, optional): Config of the CAPE (refused without CAPE). None (default)
            is ``dict(type='mmposenc.CAPE2d')``.
        *args, **kwargs: Those of :class:`mmdet.models.layers.MSDeformAttnPixelDecoder`.

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
        """Context in which ``forward`` masks the padding of images of ``img_shapes``
        ``(h, w)``, for callers that cannot pass them."""
        return _IMG_SHAPES.bind(self, _as_shapes(img_shapes))

    def padding_masks(self, feats: Sequence[Tensor],
                      img_shapes: Optional[Sequence[Sequence[int]]] = None
                      ) -> Optional[List[Tensor]]:
        """Exact bool (bs, h, w) padding masks of ``feats`` (True = padded), None when there
        are no shapes (given or bound), in ONNX export or without padding."""
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
            img_shapes (Sequence[Sequence[int]], optional): ``(h, w)`` of each image, whose
                padding is masked. None: those bound by :meth:`image_shapes`, if any.

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
            # each image's own cells: masked GroupNorm, upsampled at its own scale
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
        """mmdet's reference points over the whole maps, (bs, num_tokens, num_levels, 2)."""
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
