"""Padding-exact query selection and query positions for mmdet's two-stage DETRs (see
``docs/user_guides/padding_exact_eval.md``)."""
import functools
from typing import Tuple

import torch
from mmdet.models.layers import DinoTransformerDecoder
from mmdet.models.layers.transformer.utils import coordinate_to_encoding, inverse_sigmoid
from torch import Tensor, nn

from ..utils.call_state import CallState

#: The memory padding mask of each detector's running ``pre_decoder`` (thread / task local).
_MEMORY_MASK = CallState(
    'mmposenc_two_stage_memory_mask',
    why="mmdet's DeformableDETR.pre_decoder / DINO.pre_decoder call the class branch "
        '(bbox_head.cls_branches[decoder.num_layers]) with the transformed memory alone; the '
        'memory mask reaches that call no other way short of copying pre_decoder')


class ExactTwoStageMixin:
    """Mixin running a two-stage DETR's query selection over each image's own tokens only
    (padded tokens scored lowest); put it before the host detector.

    Args:
        exact_queries (bool): Rank each image's own tokens only (in ``PEGDINO`` also the exact
            query positions); False is mmdet's selection. Defaults to True.

    Examples::

        class PEGDINO(ExactTwoStageMixin, DeformableEncoderPosMixin, DINO): ...
    """

    def __init__(self, *args, exact_queries: bool = True, **kwargs) -> None:
        self.exact_queries = exact_queries  # before the host's __init__ (and _init_layers)
        super().__init__(*args, **kwargs)
        if self.exact_queries and self.as_two_stage:
            self.bbox_head.cls_branches[self.decoder.num_layers].register_forward_hook(
                functools.partial(ExactTwoStageMixin._lowest_at_padding, self))

    def _lowest_at_padding(self, branch: nn.Module, args, scores: Tensor) -> Tensor:
        """Forward hook setting padded tokens' (bs, num_tokens, C) ``scores`` to the lowest."""
        mask = _MEMORY_MASK.get(self)
        if mask is None or scores.shape[:2] != mask.shape:
            return scores
        return scores.masked_fill(mask[..., None], torch.finfo(scores.dtype).min)

    def pre_decoder(self, memory: Tensor, memory_mask: Tensor, spatial_shapes: Tensor,
                    **kwargs) -> Tuple[dict]:
        """The host's ``pre_decoder``, its top-k over each image's own tokens only."""
        with _MEMORY_MASK.bind(self, memory_mask):
            return super().pre_decoder(memory, memory_mask, spatial_shapes, **kwargs)

    def extra_repr(self) -> str:
        return f'{super().extra_repr()}, exact_queries={self.exact_queries}'


class ExactQueryPosDinoDecoder(DinoTransformerDecoder):
    """mmdet's :class:`~mmdet.models.layers.DinoTransformerDecoder` encoding query positions
    from the boxes relative to the image, not to the padded batch (arguments are mmdet's)."""

    def forward(self, query: Tensor, value: Tensor, key_padding_mask: Tensor,
                self_attn_mask: Tensor, reference_points: Tensor, spatial_shapes: Tensor,
                level_start_index: Tensor, valid_ratios: Tensor, reg_branches: nn.ModuleList,
                **kwargs) -> Tuple[Tensor]:
        """mmdet's loop, the query position encoded from ``reference_points``."""
        intermediate = []
        intermediate_reference_points = [reference_points]
        for lid, layer in enumerate(self.layers):
            if reference_points.shape[-1] == 4:
                scale = torch.cat([valid_ratios, valid_ratios], -1)[:, None]
            else:
                assert reference_points.shape[-1] == 2
                scale = valid_ratios[:, None]
            reference_points_input = reference_points[:, :, None] * scale
            # the one change: mmdet encodes reference_points_input[:, :, 0, :]; the sine's
            # width is ref_point_head's (4 x 128 in mmdet 3.3, 4 x embed_dims in 3.5)
            num_feats = self.ref_point_head.layers[0].in_features // reference_points.shape[-1]
            query_pos = self.ref_point_head(
                coordinate_to_encoding(reference_points, num_feats=num_feats))
            query = layer(
                query,
                query_pos=query_pos,
                value=value,
                key_padding_mask=key_padding_mask,
                self_attn_mask=self_attn_mask,
                spatial_shapes=spatial_shapes,
                level_start_index=level_start_index,
                valid_ratios=valid_ratios,
                reference_points=reference_points_input,
                **kwargs)
            if reg_branches is not None:
                new_reference_points = (reg_branches[lid](query) + inverse_sigmoid(
                    reference_points, eps=1e-3)).sigmoid()
                reference_points = new_reference_points.detach()
            if self.return_intermediate:
                intermediate.append(self.norm(query))
                intermediate_reference_points.append(new_reference_points)
        if self.return_intermediate:
            return torch.stack(intermediate), torch.stack(intermediate_reference_points)
        return query, reference_points
