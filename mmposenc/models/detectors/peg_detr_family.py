"""Conditional-DETR, DAB-DETR and DINO with the encoder position switch (see
``docs/user_guides/swap_detector_pe.md``)."""
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
    """mmdet's Conditional-DETR decoder with the reference-point sine at the decoder's width
    (same state dict; mmdet's bit for bit at width 256)."""

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
            query_pos (Tensor): Query positions, (bs, num_queries, embed_dims).
            key_pos (Tensor): Memory positions, (bs, num_keys, embed_dims), or None.
            key_padding_mask (Tensor): (bs, num_keys), True at padded keys.

        Returns:
            tuple[Tensor]: The post-normed outputs, (num_layers or 1, bs, num_queries,
            embed_dims), and the reference points (bs, num_queries, 2) in [0, 1].
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

    Args:
        encoder_pos (str): ``'sine'`` (stock), ``'peg'``, ``'sine+peg'``, ``'cape'``,
            ``'cape+peg'`` or ``'none'``. Defaults to ``'peg'``.
        decoder_pos (str): Memory positions of the cross-attention keys: ``'sine'`` (stock)
            or ``'none'``. Defaults to ``'sine'``.
        peg_after (Sequence[int]): PEG positions (``-1`` = before the first layer).
            Defaults to ``(0, )``.
        peg_cfg (dict, optional): Config of each PEG. Defaults to
            ``dict(type='mmposenc.MaskedPEG', kernel_size=3)``.
        cape_cfg (dict): Config of the CAPE. Defaults to ``dict(type='mmposenc.CAPE2d')``.
        ref_sine_feats (str): Features per axis of the decoder's reference-point sine:
            ``'mmdet'`` (128, width 256 only) or ``'embed_dims'`` (``embed_dims // 2``).
            Defaults to ``'mmdet'``.
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
        """The host's layers, the decoder made :class:`WidthConditionalDetrTransformerDecoder`
        in place with ``ref_sine_feats='embed_dims'``."""
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

    Args:
        encoder_pos (str): ``'sine'`` (stock), ``'peg'``, ``'sine+peg'``, ``'cape'``,
            ``'cape+peg'`` or ``'none'``. Defaults to ``'peg'``.
        decoder_pos (str): Memory positions of the cross-attention keys: ``'sine'`` (stock)
            or ``'none'``. Defaults to ``'sine'``.
        peg_after (Sequence[int]): PEG positions. Defaults to ``(0, )``.
        peg_cfg (dict, optional): Defaults to ``dict(type='mmposenc.MaskedPEG', kernel_size=3)``.
        cape_cfg (dict): Defaults to ``dict(type='mmposenc.CAPE2d')``.
        *args, **kwargs: Those of :class:`mmdet.models.DABDETR`.

    Examples:
        >>> # in a config inheriting mmdet::dab_detr/dab-detr_r50_8xb2-50e_coco.py
        >>> model = dict(type='mmposenc.PEGDABDETR', encoder_pos='peg')
    """


@MODELS.register_module()
class PEGDINO(StableSelectionMixin, ExactTwoStageMixin, DeformableEncoderPosMixin, DINO):
    """DINO with a configurable encoder position encoding.

    Args:
        encoder_pos (str): ``'sine'`` (stock: sine + level embedding), ``'peg'``,
            ``'sine+peg'``, ``'cape'``, ``'cape+peg'`` or ``'none'``. Defaults to ``'peg'``.
        level_embed (bool): Keep the level embedding without sine. Defaults to True.
        peg_after (Sequence[int]): PEG positions. Defaults to ``(0, )``.
        peg_cfg (dict, optional): Defaults to ``dict(type='mmposenc.MultiLevelMaskedPEG',
            kernel_size=3, share_weights=False)``.
        cape_cfg (dict): Defaults to ``dict(type='mmposenc.CAPE2d')``.
        exact_queries (bool): Padding-exact query selection and query positions
            (:mod:`~mmposenc.models.detectors.exact_queries`); False is mmdet's DINO.
            Defaults to True.
        *args, **kwargs: Those of :class:`mmdet.models.DINO`.

    Examples:
        >>> # in a config inheriting mmdet::dino/dino-4scale_r50_8xb2-12e_coco.py
        >>> model = dict(type='mmposenc.PEGDINO', encoder_pos='peg')
    """

    def _init_layers(self) -> None:
        """The host's layers, the decoder made :class:`ExactQueryPosDinoDecoder` in place."""
        super()._init_layers()
        if self.exact_queries:
            self.decoder.__class__ = ExactQueryPosDinoDecoder
