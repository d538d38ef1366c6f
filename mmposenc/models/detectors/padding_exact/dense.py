"""RetinaNet and Mask R-CNN in padding-exact mode (see
``docs/user_guides/padding_exact_eval.md``)."""
from typing import List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from mmdet.models.dense_heads import RetinaHead, RPNHead
from mmdet.models.detectors import MaskRCNN, RetinaNet
from mmdet.models.necks import FPN
from mmdet.structures import SampleList
from torch import Tensor, nn

from mmposenc.models.padding_exact.masks import (conv_padding_masks, masks_from_valid_shapes,
                                                 valid_feature_shapes)
from mmposenc.models.padding_exact.ops import masked_conv_module
from mmposenc.models.utils.call_state import CallState
from mmposenc.models.utils.stable_sort import StableSort
from mmposenc.registry import MODELS
from .mixin import PaddingExactMixin, padded_batch

#: The image shapes of each dense head's running ``predict`` / ``loss`` (thread / task local).
_HEAD_SHAPES = CallState(
    'mmposenc_dense_head_img_shapes',
    why="mmdet's BaseDenseHead.predict / loss / loss_and_predict call self(x) with no data "
    "samples: the head's forward needs each image's img_shape")
#: The padding mask of the level each dense head's ``forward_single`` is running on.
_LEVEL_MASK = CallState(
    'mmposenc_dense_head_level_mask',
    why="mmdet's RetinaHead / RPNHead.forward_single(x) call their convolutions as conv(x): "
    'the level mask reaches them only through forward pre-hooks')


@MODELS.register_module()
class MaskedFPN(FPN):
    """mmdet's :class:`~mmdet.models.necks.FPN` that also takes the inputs' padding masks and
    keeps each image's cells independent of the batch (same state dict).

    Args:
        padding_exact (bool): Take the padding masks (False: mmdet's FPN). Defaults to True.
        *args, **kwargs: Those of mmdet's ``FPN``.

    Examples:
        >>> neck = MaskedFPN([8, 16], 8, num_outs=3, add_extra_convs='on_input')
        >>> x = [torch.randn(2, 8, 8, 8), torch.randn(2, 16, 4, 4)]
        >>> masks = [torch.zeros(2, 8, 8, dtype=torch.bool), torch.zeros(2, 4, 4, dtype=torch.bool)]
        >>> masks[0][1, 5:], masks[1][1, 3:] = True, True
        >>> [tuple(o.shape) for o in neck(x, padding_masks=masks)]
        [(2, 8, 8, 8), (2, 8, 4, 4), (2, 8, 2, 2)]
    """

    def __init__(self, *args, padding_exact: bool = True, **kwargs) -> None:
        self.padding_exact = padding_exact
        super().__init__(*args, **kwargs)

    @property
    def takes_padding_masks(self) -> bool:
        """Whether the neck takes padding masks: ``padding_exact``."""
        return self.padding_exact

    def forward(self, inputs: Tuple[Tensor],
                padding_masks: Optional[Sequence[Tensor]] = None) -> tuple:
        if padding_masks is None or not self.padding_exact:
            return super().forward(inputs)
        assert len(inputs) == len(self.in_channels)
        masks = list(padding_masks)
        laterals, lateral_masks = [], []
        for i, conv in enumerate(self.lateral_convs):
            out, mask = masked_conv_module(conv, inputs[i + self.start_level],
                                           masks[i + self.start_level])
            laterals.append(out)
            lateral_masks.append(mask)
        for i in range(len(laterals) - 1, 0, -1):
            if 'scale_factor' in self.upsample_cfg:
                up = F.interpolate(laterals[i], **self.upsample_cfg)
            else:
                up = F.interpolate(laterals[i], size=laterals[i - 1].shape[2:],
                                   **self.upsample_cfg)
            laterals[i - 1] = (laterals[i - 1] + up).masked_fill(lateral_masks[i - 1][:, None], 0)
        outs, out_masks = [], []
        for i in range(len(laterals)):
            out, mask = masked_conv_module(self.fpn_convs[i], laterals[i], lateral_masks[i])
            outs.append(out)
            out_masks.append(mask)
        used = len(laterals)
        if self.num_outs > used:
            if not self.add_extra_convs:
                for _ in range(self.num_outs - used):
                    out = F.max_pool2d(outs[-1], 1, stride=2)
                    mask = conv_padding_masks(out_masks[-1], out.shape[-2:], (1, 1), (2, 2),
                                              (0, 0))
                    outs.append(out.masked_fill(mask[:, None], 0))
                    out_masks.append(mask)
            else:
                if self.add_extra_convs == 'on_input':
                    source = inputs[self.backbone_end_level - 1]
                    source_mask = masks[self.backbone_end_level - 1]
                elif self.add_extra_convs == 'on_lateral':
                    source, source_mask = laterals[-1], lateral_masks[-1]
                else:  # 'on_output'
                    source, source_mask = outs[-1], out_masks[-1]
                for i in range(used, self.num_outs):
                    if i > used:
                        source, source_mask = outs[-1], out_masks[-1]
                        if self.relu_before_extra_convs:
                            source = F.relu(source)
                    out, mask = masked_conv_module(self.fpn_convs[i], source, source_mask)
                    outs.append(out)
                    out_masks.append(mask)
        return tuple(outs)


class PaddingExactDenseHeadMixin:
    """Mixin making an mmdet dense head (no norm layers) padding-exact: padding zeroed before
    wider-than-1x1 convolutions, each image decoded from its own cells.

    Args:
        padding_exact (bool): False runs mmdet's head as it is. Defaults to True.
    """

    def __init__(self, *args, padding_exact: bool = True, **kwargs) -> None:
        self.padding_exact = padding_exact
        super().__init__(*args, **kwargs)
        norms = [n for n, m in self.named_modules()
                 if isinstance(m, (nn.GroupNorm, nn.modules.batchnorm._BatchNorm))]
        if norms:
            raise ValueError(f'{type(self).__name__}: padding_exact does not cover norm layers '
                             f'({", ".join(norms)}); use a head without norm_cfg')
        for m in self.modules():
            if isinstance(m, nn.Conv2d) and any(k > 1 for k in m.kernel_size):
                m.register_forward_pre_hook(self._zero_padding)

    def _zero_padding(self, conv: nn.Module, args: tuple) -> Optional[tuple]:
        mask = _LEVEL_MASK.get(self)
        if mask is None:
            return None
        x = args[0]
        if mask.shape[-2:] != x.shape[-2:]:
            raise ValueError(f'{type(self).__name__}: padding_exact covers stride-1 head '
                             f'convolutions, got a map of {tuple(x.shape[-2:])} at a level of '
                             f'{tuple(mask.shape[-2:])}')
        return (x.masked_fill(mask[:, None], 0), *args[1:])

    def _image_shapes(self, batch_data_samples):
        shapes = ([s.metainfo['img_shape'] for s in batch_data_samples]
                  if self.padding_exact and padded_batch(batch_data_samples) else None)
        return _HEAD_SHAPES.bind(self, shapes)

    def _valid_cells(self, featmap_sizes, shapes) -> List[List[Tuple[int, int]]]:
        """Per level, each image's ``ceil(img / stride)`` cells."""
        return [valid_feature_shapes(shapes, None, size, stride=tuple(stride)[::-1])
                for size, stride in zip(featmap_sizes, self.prior_generator.strides)]

    def forward(self, x: Tuple[Tensor]) -> tuple:
        shapes = _HEAD_SHAPES.get(self)
        if shapes is None:
            return super().forward(x)
        valid = self._valid_cells([f.shape[-2:] for f in x], shapes)
        outs = []
        for feat, cells in zip(x, valid):
            with _LEVEL_MASK.bind(self, masks_from_valid_shapes(cells, feat.shape[-2:],
                                                                feat.device)):
                outs.append(self.forward_single(feat))
        return tuple(map(list, zip(*outs)))

    def predict_by_feat(self, cls_scores: List[Tensor], bbox_preds: List[Tensor],
                        score_factors: Optional[List[Tensor]] = None,
                        batch_img_metas: Optional[List[dict]] = None, **kwargs):
        """mmdet's ``predict_by_feat`` per image on its own cells, with stable sorts."""
        shapes = _HEAD_SHAPES.get(self)
        if shapes is None:
            return super().predict_by_feat(cls_scores, bbox_preds, score_factors,
                                           batch_img_metas, **kwargs)
        valid = self._valid_cells([c.shape[-2:] for c in cls_scores], shapes)
        results = []
        for i, meta in enumerate(batch_img_metas):
            def crop(maps):
                return None if maps is None else [
                    m[i:i + 1, ..., :v[i][0], :v[i][1]] for m, v in zip(maps, valid)]
            with StableSort():
                results.extend(super().predict_by_feat(crop(cls_scores), crop(bbox_preds),
                                                       crop(score_factors), [meta], **kwargs))
        return results

    def predict(self, x, batch_data_samples, rescale: bool = False):
        with self._image_shapes(batch_data_samples):
            return super().predict(x, batch_data_samples, rescale=rescale)

    def loss(self, x, batch_data_samples):
        with self._image_shapes(batch_data_samples):
            return super().loss(x, batch_data_samples)

    def loss_and_predict(self, x, batch_data_samples, proposal_cfg=None):
        with self._image_shapes(batch_data_samples):
            return super().loss_and_predict(x, batch_data_samples, proposal_cfg=proposal_cfg)


@MODELS.register_module()
class PaddingExactRetinaHead(PaddingExactDenseHeadMixin, RetinaHead):
    """mmdet's :class:`~mmdet.models.dense_heads.RetinaHead`, exact on padded batches
    (:class:`PaddingExactDenseHeadMixin`; arguments and state dict are mmdet's)."""


@MODELS.register_module()
class PaddingExactRPNHead(PaddingExactDenseHeadMixin, RPNHead):
    """mmdet's :class:`~mmdet.models.dense_heads.RPNHead`, exact on padded batches
    (:class:`PaddingExactDenseHeadMixin`; arguments and state dict are mmdet's)."""


@MODELS.register_module()
class PaddingExactRetinaNet(PaddingExactMixin, RetinaNet):
    """mmdet's :class:`~mmdet.models.detectors.RetinaNet` in padding-exact mode (same state dict).

    Examples:
        >>> # in a config inheriting a RetinaNet config of configs/pvt_peg
        >>> model = dict(type='mmposenc.PaddingExactRetinaNet',
        ...              backbone=dict(padding_exact=True),
        ...              neck=dict(type='mmposenc.MaskedFPN'),
        ...              bbox_head=dict(type='mmposenc.PaddingExactRetinaHead'))
    """


def edge_padded(feats: Sequence[Tensor], img_shapes: Sequence[Sequence[int]],
                strides: Sequence[int]) -> List[Tensor]:
    """Each map with each image's own cells edge-replicated into its padding (for RoIAlign)."""
    out = []
    for feat, stride in zip(feats, strides):
        H, W = feat.shape[-2:]
        maps = []
        for i, (h, w) in enumerate(valid_feature_shapes(img_shapes, None, (H, W),
                                                        stride=(stride, stride))):
            maps.append(F.pad(feat[i:i + 1, :, :h, :w], (0, W - w, 0, H - h),
                              mode='replicate'))
        out.append(torch.cat(maps))
    return out


@MODELS.register_module()
class PaddingExactMaskRCNN(PaddingExactMixin, MaskRCNN):
    """mmdet's :class:`~mmdet.models.detectors.MaskRCNN` in padding-exact mode (same state dict).

    Args:
        edge_pad_rois (bool): Edge-replicate the maps for the RoI heads on padded batches.
            Defaults to True.
        *args, **kwargs: Those of mmdet's ``MaskRCNN`` and
            :class:`~mmposenc.models.detectors.padding_exact.PaddingExactMixin`.

    Examples:
        >>> # in a config inheriting a Mask R-CNN config of configs/pvt_peg
        >>> model = dict(type='mmposenc.PaddingExactMaskRCNN',
        ...              backbone=dict(padding_exact=True),
        ...              neck=dict(type='mmposenc.MaskedFPN'),
        ...              rpn_head=dict(type='mmposenc.PaddingExactRPNHead'))
    """

    def __init__(self, *args, edge_pad_rois: bool = True,
                 padding_exact: Optional[bool] = None, **kwargs) -> None:
        # the model's switch (PaddingExactMixin) off: mmdet's RoI reads too
        self.edge_pad_rois = edge_pad_rois and padding_exact is not False
        super().__init__(*args, padding_exact=padding_exact, **kwargs)

    def predict(self, batch_inputs: Tensor, batch_data_samples: SampleList,
                rescale: bool = True) -> SampleList:
        """mmdet's ``predict``, the RoI heads reading :func:`edge_padded` maps."""
        with self._samples_for_neck(batch_data_samples):
            x = self.extract_feat(batch_inputs)
        if batch_data_samples[0].get('proposals', None) is None:
            rpn_results_list = self.rpn_head.predict(x, batch_data_samples, rescale=False)
        else:
            rpn_results_list = [s.proposals for s in batch_data_samples]
        if self.edge_pad_rois and padded_batch(batch_data_samples):
            x = edge_padded(x, [s.img_shape for s in batch_data_samples],
                            self.roi_head.bbox_roi_extractor.featmap_strides)
        results_list = self.roi_head.predict(x, rpn_results_list, batch_data_samples,
                                             rescale=rescale)
        return self.add_pred_to_datasample(batch_data_samples, results_list)
