"""mmdet's DETR-family transformer encoders with PEGs after chosen layers."""
import functools
from typing import Optional, Sequence, Tuple

from mmdet.models.layers import (DABDetrTransformerEncoder, DeformableDetrTransformerEncoder,
                                 DetrTransformerEncoder, Mask2FormerTransformerEncoder)
from mmengine.model import ModuleList
from torch import Tensor, nn

from mmposenc.registry import MODELS


def check_peg_after(peg_after: Sequence[int], num_layers: int) -> Tuple[int, ...]:
    """Validate PEG positions: ``i`` = after encoder layer ``i``, ``-1`` = before layer 0.

    Examples:
        >>> check_peg_after((0, -1), num_layers=6)
        (-1, 0)
    """
    if isinstance(peg_after, int):
        peg_after = (peg_after, )
    positions = tuple(int(i) for i in peg_after)
    bad = [i for i in positions if not -1 <= i < num_layers]
    if bad:
        raise ValueError(f'peg_after entries must lie in [-1, {num_layers - 1}] (-1 = before '
                         f'the first of the {num_layers} encoder layers), got {bad}')
    if len(set(positions)) != len(positions):
        raise ValueError(f'peg_after has duplicates: {positions}')
    return tuple(sorted(positions))


def build_pegs(peg_cfg: Optional[dict], peg_after: Tuple[int, ...], **defaults) -> ModuleList:
    """One PEG per position of ``peg_after``; ``defaults`` fill keys missing in ``peg_cfg``."""
    if peg_after and peg_cfg is None:
        raise ValueError('peg_after asks for PEGs but peg_cfg is None')
    pegs = ModuleList()
    for _ in peg_after:
        cfg = dict(peg_cfg)
        for key, value in defaults.items():
            cfg.setdefault(key, value)
        pegs.append(MODELS.build(cfg))
    return pegs


class PEGEncoderMixin:
    """Mixin adding PEGs after chosen layers of an mmdet transformer encoder, as forward hooks
    around the host's own loop.

    Args:
        peg_after (Sequence[int]): ``i`` = a PEG after encoder layer ``i``, ``-1`` = before
            the first layer; empty for the stock encoder. Defaults to ``()``.
        peg_cfg (dict, optional): Config of each PEG. Defaults to :attr:`default_peg_cfg`.
        num_levels (int, optional): Feature levels of a multi-level encoder.
        *args, **kwargs: Those of the host encoder.
    """

    #: PEG of this encoder when ``peg_cfg`` is not given
    default_peg_cfg = dict(type='mmposenc.MaskedPEG')
    #: whether the PEGs take ``num_levels``
    multi_level = False

    def __init__(self, *args, peg_after: Sequence[int] = (),
                 peg_cfg: Optional[dict] = default_peg_cfg, num_levels: Optional[int] = None,
                 **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._add_pegs(peg_after, peg_cfg, num_levels)

    @classmethod
    def convert(cls, encoder: nn.Module, peg_after: Sequence[int] = (),
                peg_cfg: Optional[dict] = None, num_levels: Optional[int] = None) -> nn.Module:
        """Turn a built host encoder into this class in place, adding the PEGs (the host's
        weights and random stream kept).

        Args:
            encoder (nn.Module): The host's encoder.
            peg_after, peg_cfg, num_levels: As in the constructor.

        Returns:
            nn.Module: ``encoder``, now an instance of ``cls``.
        """
        host = [b for b in cls.__bases__ if not issubclass(b, PEGEncoderMixin)]
        if len(host) != 1 or type(encoder) is not host[0]:
            raise TypeError(f'{cls.__name__}.convert takes a {host[0].__name__}, got '
                            f'{type(encoder).__name__}')
        encoder.__class__ = cls
        encoder._add_pegs(peg_after, cls.default_peg_cfg if peg_cfg is None else peg_cfg,
                          num_levels)
        return encoder

    def _add_pegs(self, peg_after: Sequence[int], peg_cfg: Optional[dict],
                  num_levels: Optional[int]) -> None:
        """Build the PEGs of ``peg_after`` and hook them after their layers."""
        self.peg_after = check_peg_after(peg_after, self.num_layers)
        defaults = dict(embed_dims=self.embed_dims)
        if self.multi_level:
            defaults['num_levels'] = num_levels
        self.pegs = build_pegs(peg_cfg, self.peg_after, **defaults)
        for index, position in enumerate(self.peg_after):
            if position >= 0:
                self.layers[position].register_forward_hook(
                    functools.partial(self._peg_after_layer, index), with_kwargs=True)

    def _peg_after_layer(self, index: int, layer: nn.Module, args, kwargs: dict,
                         output: Tensor) -> Tensor:
        """The hook: the PEG ``index`` on ``output``, with the ``peg_inputs`` of the call."""
        peg_inputs = kwargs.get('peg_inputs')
        if peg_inputs is None:
            raise RuntimeError(f'encoder layer {self.peg_after[index]} ran without '
                               'peg_inputs (outside its encoder\'s forward): its PEG has no '
                               'grid shapes')
        return self.pegs[index](output, **peg_inputs)

    def encode(self, query: Tensor, **kwargs) -> Tensor:
        """The host encoder's ``forward``."""
        return super().forward(query, **kwargs)

    def forward_with_pegs(self, query: Tensor, peg_inputs: dict, **kwargs) -> Tensor:
        """:meth:`encode` with the PEGs of ``peg_after`` applied, given ``peg_inputs``."""
        if not len(self.pegs):
            return self.encode(query, **kwargs)
        if self.peg_after[0] == -1:
            query = self.pegs[0](query, **peg_inputs)
        return self.encode(query, peg_inputs=peg_inputs, **kwargs)


class SingleLevelPEGEncoderMixin(PEGEncoderMixin):
    """:class:`PEGEncoderMixin` for single-grid DETR-like encoders (``MaskedPEG``)."""

    def forward(self, query: Tensor, query_pos: Optional[Tensor],
                key_padding_mask: Optional[Tensor],
                hw_shape: Optional[Sequence[int]] = None, **kwargs) -> Tensor:
        """Encode; PEGs see the tokens after the layers named in ``peg_after``.

        Args:
            query (Tensor): Tokens (bs, h*w, C).
            query_pos (Tensor, optional): Position embeddings (bs, h*w, C), None for none.
            key_padding_mask (Tensor, optional): Bool (bs, h*w), True = padded.
            hw_shape (Sequence[int], optional): (h, w) of the token grid; needed with PEGs.
            **kwargs: Handed to every layer (e.g. ``rotary`` for rotary attention layers).

        Returns:
            Tensor: The memory (bs, h*w, C).
        """
        if len(self.pegs) and hw_shape is None:
            raise ValueError(f'{type(self).__name__} with PEGs needs hw_shape')
        return self.forward_with_pegs(
            query, dict(hw_shape=hw_shape, key_padding_mask=key_padding_mask),
            query_pos=query_pos, key_padding_mask=key_padding_mask, **kwargs)


class MultiLevelPEGEncoderMixin(PEGEncoderMixin):
    """:class:`PEGEncoderMixin` for multi-level Deformable-DETR-like encoders
    (``MultiLevelMaskedPEG``)."""

    default_peg_cfg = dict(type='mmposenc.MultiLevelMaskedPEG')
    multi_level = True

    def __init__(self, *args, peg_cfg: Optional[dict] = default_peg_cfg, num_levels: int = 4,
                 **kwargs) -> None:
        super().__init__(*args, peg_cfg=peg_cfg, num_levels=num_levels, **kwargs)

    @classmethod
    def convert(cls, encoder: nn.Module, peg_after: Sequence[int] = (),
                peg_cfg: Optional[dict] = None, num_levels: int = 4) -> nn.Module:
        return super().convert(encoder, peg_after, peg_cfg, num_levels)

    def forward(self, query: Tensor, query_pos: Optional[Tensor],
                key_padding_mask: Optional[Tensor], spatial_shapes: Tensor,
                level_start_index: Tensor, valid_ratios: Tensor, **kwargs) -> Tensor:
        """Encode the concatenated multi-level tokens; arguments as in the host encoder."""
        peg_inputs = dict(spatial_shapes=spatial_shapes, level_start_index=level_start_index,
                          key_padding_mask=key_padding_mask)
        return self.forward_with_pegs(
            query, peg_inputs, query_pos=query_pos, key_padding_mask=key_padding_mask,
            spatial_shapes=spatial_shapes, level_start_index=level_start_index,
            valid_ratios=valid_ratios, **kwargs)


class PEGDetrTransformerEncoder(SingleLevelPEGEncoderMixin, DetrTransformerEncoder):
    """DETR's encoder (also Conditional-DETR's) with masked PEGs after chosen layers.

    Args:
        peg_after (Sequence[int]): ``i`` = a PEG after encoder layer ``i``, ``-1`` = before
            the first layer; empty for the stock encoder. Defaults to ``()``.
        peg_cfg (dict, optional): Config of each PEG (``embed_dims`` filled in).
            Defaults to ``dict(type='mmposenc.MaskedPEG')``.
        *args, **kwargs: Those of :class:`mmdet.models.layers.DetrTransformerEncoder`.

    Examples:
        >>> import torch
        >>> enc = PEGDetrTransformerEncoder(num_layers=2, layer_cfg=dict(
        ...     self_attn_cfg=dict(embed_dims=32, num_heads=4, batch_first=True),
        ...     ffn_cfg=dict(embed_dims=32, feedforward_channels=64)), peg_after=(0, ))
        >>> enc(torch.randn(2, 12, 32), None, None, hw_shape=(3, 4)).shape
        torch.Size([2, 12, 32])
    """


class PEGDABDetrTransformerEncoder(SingleLevelPEGEncoderMixin, DABDetrTransformerEncoder):
    """DAB-DETR's encoder with masked PEGs after chosen layers (without ``query_pos``, DETR's
    loop; ``query_scale`` kept unused for checkpoints)."""

    def encode(self, query: Tensor, **kwargs) -> Tensor:
        if kwargs.get('query_pos') is None:
            return DetrTransformerEncoder.forward(self, query, **kwargs)
        return super().encode(query, **kwargs)


class PEGDeformableDetrTransformerEncoder(MultiLevelPEGEncoderMixin,
                                          DeformableDetrTransformerEncoder):
    """Deformable-DETR's encoder (also DINO's) with multi-level masked PEGs after chosen layers.

    Args:
        peg_after (Sequence[int]): ``i`` = a PEG after encoder layer ``i``, ``-1`` = before
            the first layer; empty for the stock encoder. Defaults to ``()``.
        peg_cfg (dict, optional): Config of each PEG (``embed_dims`` filled in).
            Defaults to ``dict(type='mmposenc.MultiLevelMaskedPEG')``.
        num_levels (int): Feature levels, passed to PEGs whose config lacks it. Defaults to 4.
        *args, **kwargs: Those of :class:`mmdet.models.layers.DeformableDetrTransformerEncoder`.
    """


class PEGMask2FormerTransformerEncoder(MultiLevelPEGEncoderMixin, Mask2FormerTransformerEncoder):
    """The encoder of Mask2Former's pixel decoder with multi-level masked PEGs after chosen
    layers (arguments as :class:`PEGDeformableDetrTransformerEncoder`)."""


#: The PEG version of each host encoder (:meth:`EncoderPosMixin.install_peg_encoder`).
PEG_ENCODERS = {
    DetrTransformerEncoder: PEGDetrTransformerEncoder,
    DABDetrTransformerEncoder: PEGDABDetrTransformerEncoder,
    DeformableDetrTransformerEncoder: PEGDeformableDetrTransformerEncoder,
    Mask2FormerTransformerEncoder: PEGMask2FormerTransformerEncoder,
}
