"""Padding-exact query selection and query positions for mmdet's two-stage DETRs (issue 20).

With padding-exact backbones and exact padding masks, an image's encoder memory on its own
tokens is the same alone and in any padded batch. Two places of mmdet's two-stage detectors
then still let the padding of the batch into an image's predictions:

- **the query selection** (DINO, and Deformable-DETR with ``as_two_stage=True``): the top-k
  tokens by the encoder's class score become the decoder's anchor boxes. mmdet's
  ``gen_encoder_output_proposals`` zeroes the memory of padded tokens (and gives them infinite
  boxes), so every padded token gets one and the same score, the score of the image's own
  invalid border tokens; with enough padding, hundreds of them enter the top-k (measured: 753
  of DINO's 900 queries on a 800 x 1067 image batched with a 1202 x 800 one) and push the
  image's own tokens out. :class:`ExactTwoStageMixin` scores the padded tokens lowest, so the
  image's own tokens are ranked exactly as alone;
- **DINO's query positions**: its decoder encodes each layer's query position from the anchor
  boxes scaled to the padded batch (``reference_points * valid_ratios``), i.e. other positions
  for the same box in every batch. :class:`ExactQueryPosDinoDecoder` encodes the boxes as
  they are (relative to the image, as alone), the deformable attention still sampling at the
  scaled boxes as in mmdet.

Alone (or in a batch that pads nothing) both compute exactly what mmdet computes, and neither
adds a parameter: mmdet's checkpoints load unchanged.
"""
import functools
from typing import Tuple

import torch
from mmdet.models.layers import DinoTransformerDecoder
from mmdet.models.layers.transformer.utils import coordinate_to_encoding, inverse_sigmoid
from torch import Tensor, nn

from ..utils.call_state import CallState

#: The memory padding mask of each detector's running ``pre_decoder`` (thread / task local),
#: read by the forward hook on the encoder's class branch.
_MEMORY_MASK = CallState(
    'mmposenc_two_stage_memory_mask',
    why="mmdet's DeformableDETR.pre_decoder / DINO.pre_decoder call the class branch "
        '(bbox_head.cls_branches[decoder.num_layers]) with the transformed memory alone; the '
        'memory mask reaches that call no other way short of copying pre_decoder')


class ExactTwoStageMixin:
    """The two-stage query selection over each image's own tokens only.

    Put it before the host detector (mmdet's ``DINO``, or a ``DeformableDETR`` with
    ``as_two_stage=True``). The encoder's class branch
    (``bbox_head.cls_branches[decoder.num_layers]``, which scores the tokens for the top-k)
    gets a forward hook that, during ``pre_decoder``, sets the scores of the padded tokens
    (``memory_mask`` True) to the lowest finite value of their dtype: they rank last, so the
    top-k is the image's own tokens ranked as alone (unless the image has fewer tokens than
    queries, which fails alone too). Without padding nothing changes. The branch is used
    nowhere else in these detectors. Training sees the same: a padded token is never a query
    (DINO), and its encoder score gets no gradient (Deformable-DETR's loss on all tokens:
    its target is background, its sigmoid 0).

    Args:
        exact_queries (bool): Rank each image's own tokens only (and, in a subclass such as
            :class:`~mmposenc.models.detectors.PEGDINO`, its other query fixes); False is
            mmdet's selection. Same state dict either way. Defaults to True.

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
        """The hook: (bs, num_tokens, C) ``scores`` with padded tokens' set to the lowest."""
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
    """mmdet's :class:`~mmdet.models.layers.DinoTransformerDecoder` with its query positions
    taken from the reference boxes relative to the image, not to the padded batch.

    mmdet (like the official DINO) computes each layer's query position embedding as
    ``ref_point_head(coordinate_to_encoding(reference_points * valid_ratios))``: the boxes
    scaled to the padded batch, so an image's queries get other positions in every batch that
    pads it (its ``valid_ratios`` < 1) than alone (1). Here the sine is taken of the boxes as
    they are (relative to the image's own valid region, as the image alone has them); the
    deformable attention still samples at ``reference_points * valid_ratios`` (the image's
    region of the padded maps), exactly as in mmdet. Alone, or in a batch that pads nothing,
    both are the same numbers; the state dict is mmdet's.

    Arguments, inputs and outputs are mmdet's
    (:meth:`~mmdet.models.layers.DinoTransformerDecoder.forward`).
    """

    def forward(self, query: Tensor, value: Tensor, key_padding_mask: Tensor,
                self_attn_mask: Tensor, reference_points: Tensor, spatial_shapes: Tensor,
                level_start_index: Tensor, valid_ratios: Tensor, reg_branches: nn.ModuleList,
                **kwargs) -> Tuple[Tensor]:
        """mmdet's loop, the query position encoded from ``reference_points`` (relative to
        each image) instead of ``reference_points * valid_ratios`` (relative to the batch)."""
        intermediate = []
        intermediate_reference_points = [reference_points]
        for lid, layer in enumerate(self.layers):
            if reference_points.shape[-1] == 4:
                scale = torch.cat([valid_ratios, valid_ratios], -1)[:, None]
            else:
                assert reference_points.shape[-1] == 2
                scale = valid_ratios[:, None]
            reference_points_input = reference_points[:, :, None] * scale
            # the one change: mmdet encodes reference_points_input[:, :, 0, :]. The sine's
            # width is the host's: ref_point_head takes 4 x 128 channels in mmdet 3.3, 4 x
            # embed_dims in onedl-mmdetection 3.5
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
