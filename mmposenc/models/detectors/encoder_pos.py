"""The encoder position switch of every mmposenc detector: one mechanism for all hosts.

mmdet hard-codes a :class:`~mmdet.models.layers.SinePositionalEncoding` in the encoder of its
DETR family (DETR, Conditional-DETR, DAB-DETR, Deformable-DETR, DINO) and of Mask2Former's
pixel decoder. This module replaces it by configuration, in three parts that every mmposenc
model shares:

- the switch (:class:`EncoderPosMixin`): ``encoder_pos`` (one of :data:`ENCODER_POS_TYPES`),
  ``peg_after``, ``peg_cfg``, ``cape_cfg``; the positions of one level
  (:meth:`EncoderPosMixin.level_pos`: sine, CAPE, level embedding, none) and the encoder, built
  by the host and then turned into its PEG version in place
  (:meth:`EncoderPosMixin.install_peg_encoder`, so no host's ``_init_layers`` is copied and the
  stock modules are initialised as in the stock model at the same seed);
- the PEG placement (:class:`PEGEncoderMixin`): PEGs after chosen layers of any mmdet encoder
  whose ``forward`` runs ``self.layers`` in turn, by a forward hook on those layers, so the host's
  own loop runs unchanged (DAB-DETR's position scaling, Mask2Former's given reference points);
  :data:`PEG_ENCODERS` maps each host encoder to its PEG version;
- the masks: the exact padding masks of :class:`~mmposenc.models.detectors.ExactPaddingMixin`
  (``ceil(img / stride)`` valid cells per image) feed the attention, the PEGs, the sine
  normalisation, the CAPE extent and ``valid_ratios`` in the two ``pre_transformer`` of
  :class:`DetrEncoderPosMixin` (single level: DETR, Conditional-DETR, DAB-DETR) and
  :class:`DeformableEncoderPosMixin` (multi-level: Deformable-DETR, DINO).

A new detector of either kind is then one class line, e.g.::

    @MODELS.register_module()
    class PEGDINO(DeformableEncoderPosMixin, DINO):
        '''DINO with the encoder position switch.'''

Position encodings used elsewhere than in the encoder are the host's and stay: the memory
positions of the DETR-like decoders' cross-attention (``decoder_pos='sine'`` by default), the
box-coordinate sine of DAB-DETR's and DINO's query positions (computed from the reference boxes,
not by the positional-encoding module) and Mask2Former's transformer-decoder level positions.
"""
import copy
import functools
from typing import Dict, Optional, Sequence, Tuple

import torch
from mmdet.models.layers import (DABDetrTransformerEncoder, DeformableDetrTransformerEncoder,
                                 DetrTransformerEncoder, Mask2FormerTransformerEncoder)
from mmdet.models.detectors.deformable_detr import DeformableDETR
from mmdet.structures import OptSampleList
from mmengine.model import BaseModule, ModuleList, initialize
from torch import Tensor, nn

from mmposenc.registry import MODELS
from ..utils.call_state import CallState
from .padding_exact.mixin import ExactPaddingMixin
from .rotary_encoder import bind_rotary_angles, install_rotary_attention

#: Rotary encoder positions (dot-product self-attention only: DETR, Conditional-DETR, DAB-DETR)
#: and the encoding each builds by default.
ROTARY_ENCODER_POS = {
    'rope_mixed': 'mmposenc.RoPEMixed',
    'rope_mixed+peg': 'mmposenc.RoPEMixed',
    'rope_dinov3': 'mmposenc.DINOv3RoPE',
    'rope_dinov3+peg': 'mmposenc.DINOv3RoPE',
}
#: Position encodings the encoder can use (see :class:`EncoderPosMixin`).
ENCODER_POS_TYPES = ('sine', 'peg', 'sine+peg', 'cape', 'cape+peg', 'none',
                     *ROTARY_ENCODER_POS)
#: Memory positions the DETR-like decoders' cross-attention can use.
DECODER_POS_TYPES = ('sine', 'none')
#: The PEG inputs of each encoder's running ``forward`` (read by the forward hooks on its
#: layers; local to the thread / asyncio task, so concurrent calls keep their own).
_PEG_INPUTS = CallState('mmposenc_peg_inputs')


def check_encoder_pos(encoder_pos: str) -> str:
    """``encoder_pos`` if it is one of :data:`ENCODER_POS_TYPES`, else a ValueError."""
    if encoder_pos not in ENCODER_POS_TYPES:
        raise ValueError(f'encoder_pos must be one of {ENCODER_POS_TYPES}, got {encoder_pos!r}')
    return encoder_pos


def check_ablation_args(owner: str, encoder_pos: str, peg_after=None, peg_cfg=None,
                        cape_cfg=None, level_embed: Optional[bool] = None,
                        rope_cfg=None) -> None:
    """Refuse arguments that ``encoder_pos`` would silently ignore (a config meant for an
    ablation would otherwise run the baseline): ``peg_after`` / ``peg_cfg`` without PEG,
    ``cape_cfg`` without CAPE, ``rope_cfg`` without a rotary mode, ``level_embed=False`` with
    sine (the sine encoding is always added with the level embedding, as in mmdet). ``None``
    means not given.

    Raises:
        ValueError: One line naming ``owner``, the argument, the mode and the fix.
    """
    check_encoder_pos(encoder_pos)
    uses_peg = 'peg' in encoder_pos
    peg_modes = "'peg', 'sine+peg' or 'cape+peg'"  # every host has these
    for name, value, needed, modes in (
            ('peg_after', peg_after, uses_peg, peg_modes),
            ('peg_cfg', peg_cfg, uses_peg, peg_modes),
            ('cape_cfg', cape_cfg, 'cape' in encoder_pos, "'cape' or 'cape+peg'"),
            ('rope_cfg', rope_cfg, encoder_pos in ROTARY_ENCODER_POS,
             ' or '.join(repr(m) for m in ROTARY_ENCODER_POS))):
        if value is not None and not needed:
            raise ValueError(f'{owner}: {name}={value!r} has no effect with encoder_pos='
                             f'{encoder_pos!r}; use encoder_pos={modes} or remove {name}')
    if level_embed is False and encoder_pos in ('sine', 'sine+peg'):
        raise ValueError(f'{owner}: level_embed=False has no effect with encoder_pos='
                         f"{encoder_pos!r} (the sine encoding is always added with the level "
                         "embedding, as in mmdet); remove level_embed or use a mode without "
                         "sine ('peg', 'cape', 'cape+peg', 'none')")


def check_peg_after(peg_after: Sequence[int], num_layers: int) -> Tuple[int, ...]:
    """Validate PEG positions: ``i`` = after encoder layer ``i``, ``-1`` = before layer 0."""
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


def flatten_levels(feats: Sequence[Tensor], masks: Optional[Sequence[Tensor]],
                   positions: Sequence[Optional[Tensor]]) -> Dict[str, Optional[Tensor]]:
    """The multi-level encoder inputs of mmdet's Deformable-DETR encoder (Deformable-DETR,
    DINO, Mask2Former's pixel decoder), from per-level maps, masks and positions.

    Args:
        feats (Sequence[Tensor]): Maps (bs, C, h_l, w_l).
        masks (Sequence[Tensor], optional): Bool (bs, h_l, w_l) per level, True = padded.
        positions (Sequence[Tensor | None]): Positions (bs, h_l * w_l, C) per level, or Nones.

    Returns:
        dict: ``feat`` (bs, sum h_l w_l, C), ``feat_pos`` (or None), ``feat_mask`` (or None
        without masks), ``spatial_shapes`` (L, 2, traceable), ``level_start_index`` and
        ``valid_ratios`` (bs, L, 2; None without masks: the caller picks its dtype of ones).
    """
    spatial_shapes = torch.stack([torch._shape_as_tensor(f)[2:] for f in feats]).to(
        feats[0].device)  # traceable (ONNX)
    return dict(
        feat=torch.cat([f.flatten(2).permute(0, 2, 1) for f in feats], 1),
        feat_pos=torch.cat(positions, 1) if positions[0] is not None else None,
        feat_mask=None if masks is None else torch.cat([m.flatten(1) for m in masks], 1),
        spatial_shapes=spatial_shapes,
        level_start_index=torch.cat((spatial_shapes.new_zeros(
            (1, )), spatial_shapes.prod(1).cumsum(0)[:-1])),
        valid_ratios=None if masks is None else torch.stack(
            [DeformableDETR.get_valid_ratio(m) for m in masks], 1))


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
    """PEGs after chosen layers of an mmdet transformer encoder, around the host's own loop.

    Put it before an encoder class whose ``forward`` calls ``self.layers`` one after the other
    and feeds each layer's output to the next (all of mmdet's DETR-family encoders). A PEG
    after layer ``i`` is a forward hook on ``self.layers[i]`` that replaces the layer's output
    by ``peg(output, **peg_inputs)``; a PEG at ``-1`` runs on the input before the host's
    ``forward``. The PEG inputs (grid shapes and the padding mask) are those of the running
    ``forward`` call (context-local, so concurrent calls on one encoder keep their own); the
    subclass says which (:meth:`peg_inputs`).

    Args:
        peg_after (Sequence[int]): ``i`` = a PEG after encoder layer ``i``, ``-1`` = before
            the first layer; empty for none (the stock encoder). Defaults to ``()``.
        peg_cfg (dict, optional): Config of each PEG (``embed_dims`` and, for multi-level
            encoders, ``num_levels`` filled in). Defaults to :attr:`default_peg_cfg`.
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
        """Turn a built host encoder (an instance of the host class this class extends) into
        this class in place: its layers, weights and state-dict keys are kept, the PEGs are
        added. Building the encoder once keeps the random stream of the host's construction,
        so a model without PEGs is initialised exactly as the stock one at the same seed.

        Args:
            encoder (nn.Module): The host's encoder.
            peg_after, peg_cfg, num_levels: As in the constructor (``peg_cfg`` None is
                :attr:`default_peg_cfg`).

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
                    functools.partial(self._peg_after_layer, index))

    def _peg_after_layer(self, index: int, layer: nn.Module, args, output: Tensor) -> Tensor:
        peg_inputs = _PEG_INPUTS.get(self)
        if peg_inputs is None:
            raise RuntimeError(f'encoder layer {self.peg_after[index]} ran outside its '
                               'encoder\'s forward: its PEG has no grid shapes')
        return self.pegs[index](output, **peg_inputs)

    def peg_inputs(self, **forward_kwargs) -> dict:
        """The keyword arguments of the PEGs, from those of ``forward``."""
        raise NotImplementedError

    def encode(self, query: Tensor, **kwargs) -> Tensor:
        """The host encoder's ``forward``."""
        return super().forward(query, **kwargs)

    def forward_with_pegs(self, query: Tensor, peg_inputs: dict, **kwargs) -> Tensor:
        """:meth:`encode` with the PEGs of ``peg_after`` applied (``peg_inputs`` to each)."""
        if not len(self.pegs):
            return self.encode(query, **kwargs)
        if self.peg_after[0] == -1:
            query = self.pegs[0](query, **peg_inputs)
        with _PEG_INPUTS.bind(self, peg_inputs):
            return self.encode(query, **kwargs)


class SingleLevelPEGEncoderMixin(PEGEncoderMixin):
    """:class:`PEGEncoderMixin` for DETR-like encoders: one token grid, a
    :class:`~mmposenc.models.layers.MaskedPEG` per position."""

    def forward(self, query: Tensor, query_pos: Optional[Tensor],
                key_padding_mask: Optional[Tensor],
                hw_shape: Optional[Sequence[int]] = None, **kwargs) -> Tensor:
        """Encode; PEGs see the tokens after the layers named in ``peg_after``.

        Args:
            query (Tensor): Tokens (bs, h*w, C).
            query_pos (Tensor, optional): Position embeddings (bs, h*w, C), None for none.
            key_padding_mask (Tensor, optional): Bool (bs, h*w), True = padded; None when no
                image of the batch is padded.
            hw_shape (Sequence[int], optional): (h, w) of the token grid; needed with PEGs.

        Returns:
            Tensor: The memory (bs, h*w, C).
        """
        if len(self.pegs) and hw_shape is None:
            raise ValueError(f'{type(self).__name__} with PEGs needs hw_shape')
        return self.forward_with_pegs(
            query, dict(hw_shape=hw_shape, key_padding_mask=key_padding_mask),
            query_pos=query_pos, key_padding_mask=key_padding_mask, **kwargs)


class MultiLevelPEGEncoderMixin(PEGEncoderMixin):
    """:class:`PEGEncoderMixin` for Deformable-DETR-like encoders: the tokens of all levels
    concatenated, a :class:`~mmposenc.models.layers.MultiLevelMaskedPEG` per position (each
    level on its own grid with its own mask)."""

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
        """Encode the concatenated multi-level tokens; arguments as in the host encoder
        (``query_pos`` and ``key_padding_mask`` may be None)."""
        peg_inputs = dict(spatial_shapes=spatial_shapes, level_start_index=level_start_index,
                          key_padding_mask=key_padding_mask)
        return self.forward_with_pegs(
            query, peg_inputs, query_pos=query_pos, key_padding_mask=key_padding_mask,
            spatial_shapes=spatial_shapes, level_start_index=level_start_index,
            valid_ratios=valid_ratios, **kwargs)


class PEGDetrTransformerEncoder(SingleLevelPEGEncoderMixin, DetrTransformerEncoder):
    """DETR's encoder (also Conditional-DETR's) with masked PEGs after chosen layers.

    Args:
        peg_after (Sequence[int]): Where PEGs go: ``i`` applies one after encoder layer ``i``
            (CPVT: ``(0, )``), ``-1`` before the first layer. Empty for none (the stock
            encoder). Defaults to ``()``.
        peg_cfg (dict, optional): Config of each PEG (``embed_dims`` filled in).
            Defaults to ``dict(type='mmposenc.MaskedPEG')``.
        *args, **kwargs: Those of :class:`mmdet.models.layers.DetrTransformerEncoder`.
    """


class PEGDABDetrTransformerEncoder(SingleLevelPEGEncoderMixin, DABDetrTransformerEncoder):
    """DAB-DETR's encoder with masked PEGs after chosen layers.

    DAB-DETR scales the position embedding of every layer by an MLP of the tokens
    (``query_scale``). Without position embeddings (``query_pos=None``: ``encoder_pos`` 'peg'
    or 'none') there is nothing to scale: the layers run as in DETR's encoder and
    ``query_scale`` is unused (kept so that stock checkpoints load).
    """

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


class EncoderPosMixin:
    """The ``encoder_pos`` switch: arguments, encoder, positions of one level.

    Put it before the host class (a detector or a pixel decoder whose encoder is built in its
    ``__init__`` / ``_init_layers`` from the config ``self.encoder``). Its arguments are stored
    before the host's ``__init__`` runs.

    Args:
        encoder_pos (str): Position encoding of the encoder tokens.

            - ``'sine'``: the host's sine encoding (stock model);
            - ``'peg'``: no sine encoding; masked PEGs at ``peg_after``;
            - ``'sine+peg'``: both;
            - ``'cape'``: :class:`~mmposenc.models.layers.CAPE2d` (per-image valid extent,
              augmented in training only) where the sine encoding was;
            - ``'cape+peg'``: CAPE and masked PEGs;
            - ``'rope_mixed'`` / ``'rope_dinov3'``: no additive encoding; the queries and keys
              of every encoder self-attention rotated by
              :class:`~mmposenc.models.layers.RoPEMixed` /
              :class:`~mmposenc.models.layers.DINOv3RoPE` (dot-product attention only: DETR,
              Conditional-DETR, DAB-DETR; refused with a ValueError elsewhere);
            - ``'rope_mixed+peg'`` / ``'rope_dinov3+peg'``: the rotary encoding and masked PEGs;
            - ``'none'``: neither.

            Defaults to ``'peg'``.
        peg_after (Sequence[int], optional): PEG positions for the PEG modes: ``i`` = after
            encoder layer ``i``, ``-1`` = before the first layer. None (default) is ``(0, )``
            (CPVT).
        peg_cfg (dict, optional): Config of each PEG. Defaults to the host kind's
            (:attr:`default_peg_cfg`).
        cape_cfg (dict, optional): Config of the encoder's CAPE for ``'cape'`` /
            ``'cape+peg'`` (``embed_dims`` filled in). None (default) is
            ``dict(type='mmposenc.CAPE2d')``.
        rope_cfg (dict, optional): Config of the rotary encoding of the rotary modes
            (``embed_dims``, ``num_heads``, ``num_layers`` of the encoder filled in; its type,
            if given, must be the mode's). None (default) is the mode's class with its
            defaults (:data:`ROTARY_ENCODER_POS`).

    ``peg_after`` or ``peg_cfg`` with a mode without PEG, ``cape_cfg`` with a mode without
    CAPE and ``rope_cfg`` with a mode without rotation are refused with a ValueError
    (:func:`check_ablation_args`): they would be ignored.
    """

    default_peg_cfg = dict(type='mmposenc.MaskedPEG', kernel_size=3)
    #: learnt level embeddings without sine (multi-level hosts set it)
    use_level_embed = False
    #: whether the encoder's self-attention is a dot product that a rotary mode can rotate
    supports_rotary = False

    def __init__(self, *args, encoder_pos: str = 'peg',
                 peg_after: Optional[Sequence[int]] = None, peg_cfg: Optional[dict] = None,
                 cape_cfg: Optional[dict] = None, rope_cfg: Optional[dict] = None,
                 **kwargs) -> None:
        check_ablation_args(type(self).__name__, encoder_pos, peg_after, peg_cfg, cape_cfg,
                            rope_cfg=rope_cfg)
        if encoder_pos in ROTARY_ENCODER_POS and not self.supports_rotary:
            raise ValueError(
                f'{type(self).__name__}: encoder_pos={encoder_pos!r} rotates the queries and '
                'keys of dot-product self-attention, and this encoder uses multi-scale '
                'deformable attention (no q.k product to rotate); use one of '
                "'sine', 'peg', 'sine+peg', 'cape', 'cape+peg', 'none' here, or a rotary mode "
                'with mmposenc.PEGDETR / PEGConditionalDETR / PEGDABDETR')
        self.encoder_pos = encoder_pos
        self.rope_cfg = rope_cfg
        self.peg_after_cfg = (0, ) if peg_after is None else peg_after
        self.peg_cfg = copy.deepcopy(self.default_peg_cfg) if peg_cfg is None else peg_cfg
        self.cape_cfg = dict(type='mmposenc.CAPE2d') if cape_cfg is None else cape_cfg
        super().__init__(*args, **kwargs)

    @property
    def encoder_uses_sine(self) -> bool:
        return self.encoder_pos in ('sine', 'sine+peg')

    @property
    def encoder_uses_peg(self) -> bool:
        return self.encoder_pos in ('peg', 'sine+peg', 'cape+peg', 'rope_mixed+peg',
                                    'rope_dinov3+peg')

    @property
    def encoder_uses_rope(self) -> bool:
        return self.encoder_pos in ROTARY_ENCODER_POS

    @property
    def encoder_uses_cape(self) -> bool:
        return self.encoder_pos in ('cape', 'cape+peg')

    @property
    def sine_encoding(self) -> nn.Module:
        """The host's sine encoding module."""
        return self.positional_encoding

    def install_peg_encoder(self, **peg_defaults) -> None:
        """Turn the encoder the host built into its PEG version in place
        (:meth:`PEGEncoderMixin.convert`: same layers, weights and state-dict keys, plus
        ``pegs``), and build the CAPE (``self.cape``, None without CAPE). The encoder is built
        once, by the host: the stock modules are initialised from the same random stream as
        in the stock model."""
        peg_cls = PEG_ENCODERS.get(type(self.encoder))
        if peg_cls is None:
            raise TypeError(f'no PEG version of {type(self.encoder).__name__} in '
                            f'mmposenc.models.detectors.encoder_pos.PEG_ENCODERS')
        peg_after = self.peg_after_cfg if self.encoder_uses_peg else ()
        self.encoder = peg_cls.convert(self.encoder, peg_after=peg_after, peg_cfg=self.peg_cfg,
                                       **peg_defaults)
        self.cape = self._build_cape(self.encoder.embed_dims)
        self.rope = self._build_rope()

    def _init_layers(self) -> None:
        """The host's ``_init_layers``, then its encoder turned into the PEG version."""
        super()._init_layers()
        self.install_peg_encoder(**self.peg_defaults())

    def peg_defaults(self) -> dict:
        """Extra arguments of the PEG encoder (``num_levels`` for multi-level hosts)."""
        return {}

    def init_weights(self) -> None:
        """The host's initialisation, then the PEG convolutions get their own default (the
        hosts' xavier on every >1-dim encoder weight is not meant for a depthwise kernel),
        then the ``init_cfg`` of the PEGs' modules, if any (the hosts' initialisation runs
        after their children's and would overwrite it)."""
        super().init_weights()
        for peg in self.encoder.pegs:
            for m in peg.modules():
                if isinstance(m, nn.Conv2d):
                    m.reset_parameters()
            for m in peg.modules():  # outer modules first, as BaseModule.init_weights
                if isinstance(m, BaseModule) and m.init_cfg:
                    initialize(m, m.init_cfg)

    def _build_cape(self, embed_dims: int) -> Optional[nn.Module]:
        """The encoder's CAPE (``cape_cfg``, ``embed_dims`` filled in), None without CAPE."""
        if not self.encoder_uses_cape:
            return None
        if not isinstance(self.cape_cfg, dict):
            raise ValueError(f'encoder_pos={self.encoder_pos!r} needs a cape_cfg dict, got '
                             f'{self.cape_cfg!r}')
        cfg = dict(self.cape_cfg)
        cfg.setdefault('embed_dims', embed_dims)
        return MODELS.build(cfg)

    def _build_rope(self) -> Optional[nn.Module]:
        """The encoder's rotary encoding (``rope_cfg``), its attention layers made rotary
        (:func:`~mmposenc.models.detectors.rotary_encoder.install_rotary_attention`); None
        without a rotary mode."""
        if not self.encoder_uses_rope:
            return None
        default_type = ROTARY_ENCODER_POS[self.encoder_pos]
        cfg = dict(type=default_type) if self.rope_cfg is None else dict(self.rope_cfg)
        cfg.setdefault('type', default_type)
        if MODELS.get(cfg['type']) is not MODELS.get(default_type):
            raise ValueError(f'{type(self).__name__}: rope_cfg type {cfg["type"]!r} does not '
                             f'match encoder_pos={self.encoder_pos!r} (which builds '
                             f'{default_type!r}); change encoder_pos or the type')
        layer = self.encoder.layers[0]
        cfg.setdefault('embed_dims', self.encoder.embed_dims)
        cfg.setdefault('num_heads', layer.self_attn.num_heads)
        cfg.setdefault('num_layers', self.encoder.num_layers)
        rope = MODELS.build(cfg)
        install_rotary_attention(self.encoder)
        return rope

    def _cape_pos(self, feat: Tensor, padding_mask: Optional[Tensor]) -> Tensor:
        """CAPE of the (bs, C, h, w) map ``feat``'s grid as (bs, h*w, C) in ``feat``'s dtype;
        ``padding_mask`` (bs, h*w) or None. Zero at padded tokens."""
        return self.cape(
            feat.shape[-2:], batch_size=feat.shape[0], padding_mask=padding_mask).to(feat.dtype)

    def sine_pos(self, feat: Tensor, mask: Optional[Tensor]) -> Tensor:
        """The host's sine encoding of ``feat``'s grid as (bs, h*w, C); ``mask`` (bs, h, w)
        normalises each image over its valid extent, None over the whole map."""
        sine = (self.sine_encoding(None, input=feat)
                if mask is None else self.sine_encoding(mask))
        return sine.view(feat.shape[0], feat.shape[1], -1).permute(0, 2, 1)

    def level_pos(self, feat: Tensor, mask: Optional[Tensor],
                  level_embed: Optional[Tensor] = None) -> Optional[Tensor]:
        """Encoder positions of one level per ``encoder_pos``, (bs, h*w, C) or None.

        Sine (with sine) or CAPE (with CAPE), plus ``level_embed`` (C, ) where given (with sine,
        or without it when :attr:`use_level_embed`); None when nothing applies. The sine and
        the level embedding are added as mmdet adds them, so ``'sine'`` is the stock sum.

        Args:
            feat (Tensor): The level's map (bs, C, h, w).
            mask (Tensor, optional): Its padding mask (bs, h, w), True = padded.
            level_embed (Tensor, optional): The level's embedding (C, ).

        Returns:
            Tensor | None: (bs, h*w, C).
        """
        pos = None
        if self.encoder_uses_sine:
            pos = self.sine_pos(feat, mask)
            if level_embed is not None:
                pos = pos + level_embed.view(1, 1, -1)
        elif level_embed is not None and self.use_level_embed:
            bs, _, h, w = feat.shape
            pos = level_embed.view(1, 1, -1).to(feat.dtype).expand(bs, h * w, -1)
        if self.encoder_uses_cape:
            cape = self._cape_pos(feat, None if mask is None else mask.flatten(1))
            pos = cape if pos is None else cape + pos
        return pos

    def extra_repr(self) -> str:
        return f'encoder_pos={self.encoder_pos!r}, peg_after={self.encoder.peg_after}'

    def run_encoder(self, encoder_kwargs: dict, hw_shape: Optional[Sequence[int]],
                    padding_mask: Optional[Tensor], device) -> Tensor:
        """``self.encoder(**encoder_kwargs)``, with the rotary angles of the ``hw_shape``
        grid (each image's own region per ``padding_mask`` (bs, h*w)) bound for its attention
        layers in a rotary mode."""
        if self.rope is None:
            return self.encoder(**encoder_kwargs)
        if hw_shape is None:
            raise ValueError(f'{type(self).__name__} with encoder_pos={self.encoder_pos!r} '
                             'needs hw_shape for the rotary angles')
        with bind_rotary_angles(self.encoder, self.rope, hw_shape, padding_mask, device):
            return self.encoder(**encoder_kwargs)


class DetrEncoderPosMixin(ExactPaddingMixin, EncoderPosMixin):
    """The switch for DETR-like detectors (one level: DETR, Conditional-DETR, DAB-DETR).

    Their encoders run dot-product self-attention, so the rotary modes (``'rope_mixed'``,
    ``'rope_dinov3'``, with or without ``+peg``) apply: each image's coordinates come from its
    own region of the padded batch (the exact mask).

    Args:
        decoder_pos (str): Memory positions (``key_pos``) of the decoder's cross-attention:
            ``'sine'`` (stock; CPVT changed only the encoder) or ``'none'`` (zeros).
            Defaults to ``'sine'``.
        peg_cfg (dict): Defaults to ``dict(type='mmposenc.MaskedPEG', kernel_size=3)``.
        **kwargs: Those of :class:`EncoderPosMixin` and of the host detector.
    """

    supports_rotary = True

    def __init__(self, *args, decoder_pos: str = 'sine', **kwargs) -> None:
        if decoder_pos not in DECODER_POS_TYPES:
            raise ValueError(f'decoder_pos must be one of {DECODER_POS_TYPES}, got '
                             f'{decoder_pos!r}')
        self.decoder_pos = decoder_pos
        super().__init__(*args, **kwargs)

    def pre_transformer(self,
                        img_feats: Tuple[Tensor],
                        batch_data_samples: OptSampleList = None) -> Tuple[Dict, Dict]:
        """As mmdet's ``DETR.pre_transformer`` with the exact padding mask, plus ``hw_shape``;
        positions per config.

        The mask marks exactly the ``ceil(img_h / s) x ceil(img_w / s)`` cells each image has
        alone (:meth:`ExactPaddingMixin.feature_padding_masks`; mmdet nearest-interpolates
        the pixel mask, which marks one more row or column as image when the batch size is
        not a multiple of the stride ``s``). Encoder, sine normalisation, CAPE extent and the
        decoder's memory mask all use it. Where mmdet's mask is exact (batch sizes that are
        multiples of the stride) ``encoder_pos='sine'`` computes exactly what mmdet computes.
        The sine encoding is computed only when the encoder or the decoder uses it.
        """
        feat = img_feats[-1]
        assert batch_data_samples is not None
        batch_size, feat_dim = feat.shape[:2]
        masks = self.feature_padding_masks((feat, ), batch_data_samples, self.encoder_strides)
        masks = None if masks is None else masks[0]
        sine = None
        if self.encoder_uses_sine or self.decoder_pos == 'sine':
            sine = self.sine_pos(feat, masks)
        flat = feat.view(batch_size, feat_dim, -1).permute(0, 2, 1)
        if masks is not None:
            masks = masks.view(batch_size, -1)
        if self.encoder_uses_cape:
            feat_pos = self._cape_pos(feat, masks)
        else:
            feat_pos = sine if self.encoder_uses_sine else None
        memory_pos = sine if self.decoder_pos == 'sine' else None
        encoder_inputs_dict = dict(
            feat=flat, feat_mask=masks, feat_pos=feat_pos, hw_shape=tuple(feat.shape[-2:]))
        decoder_inputs_dict = dict(memory_mask=masks, memory_pos=memory_pos)
        return encoder_inputs_dict, decoder_inputs_dict

    def forward_encoder(self, feat: Tensor, feat_mask: Optional[Tensor],
                        feat_pos: Optional[Tensor],
                        hw_shape: Optional[Sequence[int]] = None) -> Dict:
        """As mmdet's ``DETR.forward_encoder``, passing ``hw_shape`` to the PEGs (and, in a
        rotary mode, binding the angles of the grid for the attention layers)."""
        memory = self.run_encoder(
            dict(query=feat, query_pos=feat_pos, key_padding_mask=feat_mask, hw_shape=hw_shape),
            hw_shape, feat_mask, feat.device)
        return dict(memory=memory)

    def forward_decoder(self, query: Tensor, query_pos: Tensor, memory: Tensor,
                        memory_mask: Optional[Tensor], memory_pos: Optional[Tensor],
                        **kwargs) -> Dict:
        """The host's ``forward_decoder``; ``decoder_pos='none'`` gives zero key positions.

        (mmcv's attention would otherwise reuse ``query_pos`` as ``key_pos`` whenever the
        number of queries equals the number of memory tokens.)
        """
        if memory_pos is None:
            memory_pos = torch.zeros_like(memory)
        return super().forward_decoder(query, query_pos, memory, memory_mask, memory_pos,
                                       **kwargs)

    def extra_repr(self) -> str:
        return f'{super().extra_repr()}, decoder_pos={self.decoder_pos!r}'


class DeformableEncoderPosMixin(ExactPaddingMixin, EncoderPosMixin):
    """The switch for Deformable-DETR-like detectors (multi-level: Deformable-DETR, DINO).

    Args:
        level_embed (bool, optional): Without sine (``'peg'``, ``'cape'``, ``'none'``, ...),
            still add the learnt level embedding to the encoder positions (it tells levels
            apart; it carries no spatial position). When False the ``level_embed`` parameter
            stays (for checkpoint compatibility) but is unused; False with sine is refused (the
            sine encoding always comes with it). None (default) is True.
        peg_cfg (dict): Config of each PEG; ``share_weights=True`` shares one PEG across the
            levels. Defaults to ``dict(type='mmposenc.MultiLevelMaskedPEG', kernel_size=3,
            share_weights=False)``.
        **kwargs: Those of :class:`EncoderPosMixin` and of the host detector.
    """

    default_peg_cfg = dict(type='mmposenc.MultiLevelMaskedPEG', kernel_size=3,
                           share_weights=False)

    def __init__(self, *args, level_embed: Optional[bool] = None, **kwargs) -> None:
        check_ablation_args(type(self).__name__, kwargs.get('encoder_pos', 'peg'),
                            level_embed=level_embed)
        self.use_level_embed = level_embed is not False
        super().__init__(*args, **kwargs)

    def peg_defaults(self) -> dict:
        return dict(num_levels=self.num_feature_levels)

    def pre_transformer(self,
                        mlvl_feats: Tuple[Tensor],
                        batch_data_samples: OptSampleList = None) -> Tuple[Dict, Dict]:
        """As mmdet's ``DeformableDETR.pre_transformer`` with exact padding masks; positions
        per ``encoder_pos`` (:meth:`level_pos`).

        Each level's mask marks exactly the ``ceil(img_h / s) x ceil(img_w / s)`` cells an
        image has alone, ``s`` measured per level (stride-64 extra level included;
        :meth:`ExactPaddingMixin.feature_padding_masks`), where mmdet nearest-interpolates
        the pixel mask. The masks give the encoder and decoder key padding masks, the sine
        normalisation, the CAPE extents and ``valid_ratios``. Where mmdet's masks are exact
        (batch sizes that are multiples of every level's stride) ``encoder_pos='sine'``
        computes exactly what mmdet computes.
        """
        assert batch_data_samples is not None
        masks = self.feature_padding_masks(mlvl_feats, batch_data_samples,
                                           self.encoder_strides)
        positions = [
            self.level_pos(feat, None if masks is None else masks[lvl], self.level_embed[lvl])
            for lvl, feat in enumerate(mlvl_feats)
        ]
        encoder_inputs_dict = flatten_levels(mlvl_feats, masks, positions)
        if masks is None:
            encoder_inputs_dict['valid_ratios'] = mlvl_feats[0].new_ones(
                mlvl_feats[0].size(0), len(mlvl_feats), 2)
        decoder_inputs_dict = dict(
            memory_mask=encoder_inputs_dict['feat_mask'],
            **{k: encoder_inputs_dict[k]
               for k in ('spatial_shapes', 'level_start_index', 'valid_ratios')})
        return encoder_inputs_dict, decoder_inputs_dict

    def extra_repr(self) -> str:
        return f'{super().extra_repr()}, level_embed={self.use_level_embed}'
