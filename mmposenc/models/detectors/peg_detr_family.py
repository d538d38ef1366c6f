"""Conditional-DETR, DAB-DETR and DINO with the encoder position switch.

Each is mmdet's detector plus the shared switch of
:mod:`mmposenc.models.detectors.encoder_pos` and the stages of
:class:`~mmposenc.models.detectors.peg_detr.DetrEncoderPosMixin` /
:class:`~mmposenc.models.detectors.peg_deformable_detr.DeformableEncoderPosMixin`: ``encoder_pos`` ('sine' / 'peg' / 'sine+peg' /
'cape' / 'cape+peg' / 'none'), ``peg_after``, ``peg_cfg``, ``cape_cfg``, exact padding masks
(:class:`~mmposenc.models.detectors.PaddingExactMixin`). ``encoder_pos='sine'`` is the stock
model (same state-dict keys; bit-identical where mmdet's nearest-interpolated masks are exact:
no padding, or padded sizes that are multiples of every stride).

What each keeps of the host's position encodings by default:

- Conditional-DETR and DAB-DETR (one level, :class:`DetrEncoderPosMixin`): the decoder's
  cross-attention keys get the sine memory positions (``decoder_pos='sine'``; ``'none'`` gives
  zeros); their conditional spatial queries and DAB-DETR's anchor-box query positions are sine
  encodings of the reference points, computed by the decoders and unchanged. DAB-DETR's encoder
  scales the position embedding of each layer by an MLP of the tokens; without a position
  embedding (``'peg'``, ``'none'``) that MLP is unused (kept so that stock checkpoints load).
- Conditional-DETR's decoder encodes its reference points with ``coordinate_to_encoding``'s
  default of 128 features per axis (256 channels) whatever the width, and projects them with
  ``Linear(embed_dims, embed_dims)``: at any width but 256 mmdet's model fails in its first
  forward. ``ref_sine_feats='embed_dims'`` (:class:`WidthConditionalDetrTransformerDecoder`)
  takes ``embed_dims // 2`` per axis, as mmdet's DAB-DETR decoder does; at width 256 that is
  128 and the model is mmdet's bit for bit. The default ``'mmdet'`` keeps mmdet's decoder and
  refuses other widths when built.
- DINO (multi-level, :class:`DeformableEncoderPosMixin`): the deformable decoder takes no memory
  positions; its query positions (sine of the anchor boxes) and denoising queries are DINO's,
  as are the two-stage proposals (computed from the exact masks). The learnt level embedding
  stays on the encoder tokens without sine (``level_embed=True``). Two changes make DINO's
  predictions padding-exact (:mod:`mmposenc.models.detectors.exact_queries`): the query
  selection ranks the image's own tokens only (:class:`ExactTwoStageMixin`: padded tokens
  scored lowest), and the decoder encodes its query positions from the anchor boxes relative
  to the image (:class:`ExactQueryPosDinoDecoder`), where mmdet encodes them scaled to the
  padded batch (``reference_points * valid_ratios``); ``exact_queries=False`` turns both off.

GroundingDINO is not here: its text branch needs a BERT checkpoint that cannot be downloaded in
our test environment, so it could not be tested.
"""
import inspect

import torch
from mmdet.models.detectors.conditional_detr import ConditionalDETR
from mmdet.models.detectors.dab_detr import DABDETR
from mmdet.models.detectors.dino import DINO
from mmdet.models.layers import ConditionalDetrTransformerDecoder
from mmdet.models.layers.transformer.utils import coordinate_to_encoding
from torch import Tensor

from mmposenc.registry import MODELS
from .exact_queries import ExactQueryPosDinoDecoder, ExactTwoStageMixin
from .peg_deformable_detr import DeformableEncoderPosMixin
from .peg_detr import DetrEncoderPosMixin
from .stable_selection import StableSelectionMixin


#: ``ref_sine_feats`` choices of :class:`PEGConditionalDETR`
REF_SINE_FEATS = ('mmdet', 'embed_dims')
#: features per axis of mmdet's reference-point sine (``coordinate_to_encoding``'s default)
MMDET_REF_SINE_FEATS = inspect.signature(coordinate_to_encoding).parameters['num_feats'].default


class WidthConditionalDetrTransformerDecoder(ConditionalDetrTransformerDecoder):
    """mmdet's Conditional-DETR decoder with the reference-point sine at the decoder's width.

    mmdet's :class:`~mmdet.models.layers.ConditionalDetrTransformerDecoder` calls
    ``coordinate_to_encoding(reference_xy)`` with its default ``num_feats=128`` (a 256-channel
    sine whatever ``embed_dims``), which its cross-attention's ``qpos_sine_proj``
    (``Linear(embed_dims, embed_dims)``) and ``query_scale`` (``embed_dims`` outputs) accept at
    width 256 only. This decoder encodes ``embed_dims // 2`` features per axis (``embed_dims``
    channels, as mmdet's DAB-DETR decoder does); everything else is mmdet's: same modules,
    parameters and state-dict keys, and at width 256 the same computation bit for bit.
    :class:`PEGConditionalDETR` makes its decoder this class in place with
    ``ref_sine_feats='embed_dims'``.
    """

    def forward(self,
                query: Tensor,
                key: Tensor = None,
                query_pos: Tensor = None,
                key_pos: Tensor = None,
                key_padding_mask: Tensor = None):
        """mmdet's forward with ``num_feats=embed_dims // 2`` in the reference-point sine.

        Args:
            query (Tensor): Content queries, (bs, num_queries, embed_dims).
            key (Tensor): Encoder memory, (bs, num_keys, embed_dims).
            query_pos (Tensor): Query positions (the learnt query embedding),
                (bs, num_queries, embed_dims).
            key_pos (Tensor): Memory positions, (bs, num_keys, embed_dims), or None.
            key_padding_mask (Tensor): (bs, num_keys), True at padded keys.

        Returns:
            tuple[Tensor]: The decoder's (post-normed) outputs, (num_layers, bs, num_queries,
            embed_dims) with ``return_intermediate`` (else (1, ...)), and the reference points
            (bs, num_queries, 2) in [0, 1].
        """
        reference = self.ref_point_head(query_pos).sigmoid()  # [bs, num_queries, 2]
        reference_xy = reference[..., :2]
        intermediate = []
        for layer_id, layer in enumerate(self.layers):
            pos_transformation = 1 if layer_id == 0 else self.query_scale(query)
            ref_sine_embed = coordinate_to_encoding(
                coord_tensor=reference_xy, num_feats=self.embed_dims // 2)
            ref_sine_embed = ref_sine_embed * pos_transformation
            query = layer(
                query,
                key=key,
                query_pos=query_pos,
                key_pos=key_pos,
                key_padding_mask=key_padding_mask,
                ref_sine_embed=ref_sine_embed,
                is_first=(layer_id == 0))
            if self.return_intermediate:
                intermediate.append(self.post_norm(query))
        if self.return_intermediate:
            return torch.stack(intermediate), reference
        return self.post_norm(query).unsqueeze(0), reference


@MODELS.register_module()
class PEGConditionalDETR(StableSelectionMixin, DetrEncoderPosMixin, ConditionalDETR):
    """Conditional-DETR with a configurable encoder position encoding.

    `Conditional DETR for Fast Training Convergence <https://arxiv.org/abs/2108.06152>`_ with
    the encoder positions of `CPVT <https://arxiv.org/abs/2102.10882>`_ (PEG) or
    `CAPE <https://arxiv.org/abs/2106.03143>`_.

    Args:
        encoder_pos (str): ``'sine'`` (stock), ``'peg'``, ``'sine+peg'``, ``'cape'``,
            ``'cape+peg'`` or ``'none'``
            (:class:`~mmposenc.models.detectors.encoder_pos.EncoderPosMixin`).
            Defaults to ``'peg'``.
        decoder_pos (str): Memory positions of the cross-attention keys: ``'sine'`` (stock)
            or ``'none'``. Defaults to ``'sine'``.
        peg_after (Sequence[int]): PEG positions (``-1`` = before the first layer).
            Defaults to ``(0, )``.
        peg_cfg (dict, optional): Config of each PEG. Defaults to
            ``dict(type='mmposenc.MaskedPEG', kernel_size=3)``.
        cape_cfg (dict): Config of the CAPE. Defaults to ``dict(type='mmposenc.CAPE2d')``.
        ref_sine_feats (str): Features per axis of the decoder's sine of the reference points
            (its conditional spatial queries):

            - ``'mmdet'``: mmdet's 128 (256 channels), which works at ``embed_dims`` 256 only
              (another width is refused when built);
            - ``'embed_dims'``: ``embed_dims // 2``
              (:class:`WidthConditionalDetrTransformerDecoder`; ``embed_dims`` a multiple of
              4), for models of any width; at 256 the same model as ``'mmdet'`` bit for bit.

            Same parameters and state dict either way. Defaults to ``'mmdet'``.
        *args, **kwargs: Those of :class:`mmdet.models.ConditionalDETR`.

    Examples:
        >>> # in a config inheriting mmdet::conditional_detr/conditional-detr_r50_8xb2-50e_coco.py
        >>> model = dict(type='mmposenc.PEGConditionalDETR', encoder_pos='peg')
        >>> # a width-64 model (configs/peg_detr/conditional-detr-sine_*_shapes.py)
        >>> model = dict(type='mmposenc.PEGConditionalDETR', ref_sine_feats='embed_dims')
    """

    def __init__(self, *args, ref_sine_feats: str = 'mmdet', **kwargs) -> None:
        if ref_sine_feats not in REF_SINE_FEATS:
            raise ValueError(f'PEGConditionalDETR: ref_sine_feats must be one of '
                             f'{REF_SINE_FEATS}, got {ref_sine_feats!r}')
        self.ref_sine_feats = ref_sine_feats
        super().__init__(*args, **kwargs)

    def _init_layers(self) -> None:
        """The host's layers; with ``ref_sine_feats='embed_dims'`` the decoder made
        :class:`WidthConditionalDetrTransformerDecoder` in place (same modules and weights)."""
        super()._init_layers()
        dims = self.decoder.embed_dims
        if self.ref_sine_feats == 'embed_dims':
            if dims % 4:
                raise ValueError(f'PEGConditionalDETR: ref_sine_feats=\'embed_dims\' encodes '
                                 f'embed_dims // 2 sin / cos features per axis: embed_dims must '
                                 f'be a multiple of 4, got {dims}')
            self.decoder.__class__ = WidthConditionalDetrTransformerDecoder
        elif dims != 2 * MMDET_REF_SINE_FEATS:
            raise ValueError(f'PEGConditionalDETR: embed_dims {dims} with ref_sine_feats='
                             f'\'mmdet\' (a {2 * MMDET_REF_SINE_FEATS}-channel reference-point '
                             f'sine, which the decoder cannot take): set ref_sine_feats='
                             f'\'embed_dims\' in the model config')

    def extra_repr(self) -> str:
        return super().extra_repr() + f', ref_sine_feats={self.ref_sine_feats!r}'


@MODELS.register_module()
class PEGDABDETR(StableSelectionMixin, DetrEncoderPosMixin, DABDETR):
    """DAB-DETR with a configurable encoder position encoding.

    `DAB-DETR: Dynamic Anchor Boxes are Better Queries for DETR
    <https://arxiv.org/abs/2201.12329>`_ with the encoder positions of
    `CPVT <https://arxiv.org/abs/2102.10882>`_ (PEG) or `CAPE <https://arxiv.org/abs/2106.03143>`_.

    Args:
        encoder_pos (str): ``'sine'`` (stock), ``'peg'``, ``'sine+peg'``, ``'cape'``,
            ``'cape+peg'`` or ``'none'``. Defaults to ``'peg'``.
        decoder_pos (str): Memory positions of the cross-attention keys: ``'sine'`` (stock)
            or ``'none'``. Defaults to ``'sine'``.
        peg_after (Sequence[int]): PEG positions. Defaults to ``(0, )``.
        peg_cfg (dict, optional): Defaults to ``dict(type='mmposenc.MaskedPEG', kernel_size=3)``.
        cape_cfg (dict): Defaults to ``dict(type='mmposenc.CAPE2d')``.
        *args, **kwargs: Those of :class:`mmdet.models.DABDETR` (``with_random_refpoints``,
            ``num_patterns``, ...).

    Examples:
        >>> # in a config inheriting mmdet::dab_detr/dab-detr_r50_8xb2-50e_coco.py
        >>> model = dict(type='mmposenc.PEGDABDETR', encoder_pos='peg')
    """


@MODELS.register_module()
class PEGDINO(StableSelectionMixin, ExactTwoStageMixin, DeformableEncoderPosMixin, DINO):
    """DINO with a configurable encoder position encoding.

    `DINO: DETR with Improved DeNoising Anchor Boxes for End-to-End Object Detection
    <https://arxiv.org/abs/2203.03605>`_ with the encoder positions of
    `CPVT <https://arxiv.org/abs/2102.10882>`_ (multi-level masked PEG) or
    `CAPE <https://arxiv.org/abs/2106.03143>`_ (one per level).

    Args:
        encoder_pos (str): ``'sine'`` (stock: sine + level embedding), ``'peg'``,
            ``'sine+peg'``, ``'cape'``, ``'cape+peg'`` or ``'none'``. Defaults to ``'peg'``.
        level_embed (bool): Keep the level embedding without sine. Defaults to True.
        peg_after (Sequence[int]): PEG positions. Defaults to ``(0, )``.
        peg_cfg (dict, optional): Defaults to ``dict(type='mmposenc.MultiLevelMaskedPEG',
            kernel_size=3, share_weights=False)``.
        cape_cfg (dict): Defaults to ``dict(type='mmposenc.CAPE2d')``.
        exact_queries (bool): Padding-exact queries
            (:mod:`~mmposenc.models.detectors.exact_queries`): the query selection over each
            image's own tokens (:class:`ExactTwoStageMixin`) and the decoder's query positions
            from the anchor boxes relative to each image (:class:`ExactQueryPosDinoDecoder`),
            so that an image's predictions do not depend on the padding of its batch. False is
            mmdet's DINO (selection over the padded batch, boxes scaled to it). Same state dict
            either way; alone both compute the same. Defaults to True.
        *args, **kwargs: Those of :class:`mmdet.models.DINO` (``dn_cfg``, ...).

    Examples:
        >>> # in a config inheriting mmdet::dino/dino-4scale_r50_8xb2-12e_coco.py
        >>> model = dict(type='mmposenc.PEGDINO', encoder_pos='peg')
    """

    def _init_layers(self) -> None:
        """The host's layers; with ``exact_queries`` the decoder made
        :class:`ExactQueryPosDinoDecoder` in place (same modules and weights)."""
        super()._init_layers()
        if self.exact_queries:
            self.decoder.__class__ = ExactQueryPosDinoDecoder
