"""The encoder position switch of every mmposenc detector: one mechanism for all hosts.

mmdet hard-codes a :class:`~mmdet.models.layers.SinePositionalEncoding` in the encoder of its
DETR family (DETR, Conditional-DETR, DAB-DETR, Deformable-DETR, DINO) and of Mask2Former's
pixel decoder. :class:`EncoderPosMixin` replaces it by configuration, for every host alike:

- the modes (:data:`ENCODER_POS_TYPES`) and their validation (:func:`check_ablation_args`:
  an option the mode would not use is refused, never dropped);
- what a mode builds: the encoder the host built, turned into its PEG version in place
  (:meth:`EncoderPosMixin.install_peg_encoder`, the encoders of
  :mod:`mmposenc.models.detectors.layers`; no host's ``_init_layers`` is copied and the stock
  modules are initialised as in the stock model at the same seed), the CAPE, the rotary
  encoding (its attention layers made rotary);
- the position source: the positions of one level (:meth:`EncoderPosMixin.level_pos`: sine,
  CAPE, level embedding, none) and the rotary angles the encoder is given
  (:meth:`EncoderPosMixin.rotary_kwargs`).

The detectors' stages (``pre_transformer``, ``forward_encoder``, ``forward_decoder``) that
feed these into mmdet's transformer are in the detector modules:
:class:`~mmposenc.models.detectors.peg_detr.DetrEncoderPosMixin` (single level: DETR,
Conditional-DETR, DAB-DETR) and
:class:`~mmposenc.models.detectors.peg_deformable_detr.DeformableEncoderPosMixin` (multi-level:
Deformable-DETR, DINO). A new detector of either kind is then one class line, e.g.::

    @MODELS.register_module()
    class PEGDINO(DeformableEncoderPosMixin, DINO):
        '''DINO with the encoder position switch.'''

Position encodings used elsewhere than in the encoder are the host's and stay: the memory
positions of the DETR-like decoders' cross-attention (``decoder_pos='sine'`` by default), the
box-coordinate sine of DAB-DETR's and DINO's query positions (computed from the reference boxes,
not by the positional-encoding module) and Mask2Former's transformer-decoder level positions.
"""
import copy
from typing import Dict, Mapping, Optional, Sequence, Tuple, Union

import torch
from mmdet.models.detectors.deformable_detr import DeformableDETR
from mmengine.model import BaseModule, initialize
from torch import Tensor, nn

from mmposenc.registry import MODELS
# the encoder layers live in .layers; these names stay importable from here
from .layers import (PEG_ENCODERS, PEGDABDetrTransformerEncoder,  # noqa: F401
                     PEGDeformableDetrTransformerEncoder, PEGDetrTransformerEncoder,
                     PEGEncoderMixin, PEGMask2FormerTransformerEncoder, build_pegs,
                     check_peg_after, encoder_angles, install_rotary_attention)

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
#: The options a mode may carry in its value (``encoder_pos=dict(mode=..., **options)``), and
#: which modes use each.
MODE_OPTIONS = {
    'peg_after': ('peg', 'sine+peg', 'cape+peg', 'rope_mixed+peg', 'rope_dinov3+peg'),
    'peg_cfg': ('peg', 'sine+peg', 'cape+peg', 'rope_mixed+peg', 'rope_dinov3+peg'),
    'cape_cfg': ('cape', 'cape+peg'),
    'rope_cfg': tuple(ROTARY_ENCODER_POS),
}

#: the modes each option's refusal suggests (the PEG modes that every host has)
_MODES_HINT = dict(peg_after="'peg', 'sine+peg' or 'cape+peg'",
                   peg_cfg="'peg', 'sine+peg' or 'cape+peg'", cape_cfg="'cape' or 'cape+peg'",
                   rope_cfg=' or '.join(repr(m) for m in ROTARY_ENCODER_POS))


def split_encoder_pos(encoder_pos) -> Tuple[str, dict]:
    """The mode and the options of an ``encoder_pos`` value.

    A string is a mode with its defaults; a dict ``dict(mode=..., **options)`` carries the
    options of its mode (keys of :data:`MODE_OPTIONS`), so that replacing the value (e.g.
    ``--cfg-options model.encoder_pos=sine``) replaces the options with it.

    Examples:
        >>> split_encoder_pos('sine')
        ('sine', {})
        >>> split_encoder_pos(dict(mode='peg', peg_after=(-1, 0)))
        ('peg', {'peg_after': (-1, 0)})
    """
    if isinstance(encoder_pos, str):
        return check_encoder_pos(encoder_pos), {}
    if not isinstance(encoder_pos, Mapping):
        raise TypeError(f'encoder_pos must be a mode (one of {ENCODER_POS_TYPES}) or a dict '
                        f'dict(mode=..., **options), got {encoder_pos!r}')
    options = dict(encoder_pos)
    if 'mode' not in options:
        raise ValueError(f"encoder_pos={encoder_pos!r} has no 'mode': write "
                         f"dict(mode=<one of {ENCODER_POS_TYPES}>, **options)")
    mode = check_encoder_pos(options.pop('mode'))
    unknown = sorted(set(options) - set(MODE_OPTIONS))
    if unknown:
        raise ValueError(f'encoder_pos=dict(mode={mode!r}, ...) has no option {unknown[0]!r}; '
                         f'its options are {tuple(MODE_OPTIONS)}')
    return mode, options


def encoder_pos_mode(encoder_pos) -> str:
    """The mode of an ``encoder_pos`` value (a mode, or ``dict(mode=..., **options)``).

    Examples:
        >>> encoder_pos_mode(dict(mode='peg', peg_cfg=dict(type='mmposenc.MaskedPEG')))
        'peg'
    """
    return split_encoder_pos(encoder_pos)[0]


def check_encoder_pos(encoder_pos: str) -> str:
    """``encoder_pos`` if it is one of :data:`ENCODER_POS_TYPES`, else a ValueError."""
    if encoder_pos not in ENCODER_POS_TYPES:
        raise ValueError(f'encoder_pos must be one of {ENCODER_POS_TYPES}, got {encoder_pos!r}')
    return encoder_pos


def check_ablation_args(owner: str, encoder_pos, peg_after=None, peg_cfg=None,
                        cape_cfg=None, level_embed: Optional[bool] = None,
                        rope_cfg=None) -> None:
    """Refuse arguments that ``encoder_pos`` would silently ignore (a config meant for an
    ablation would otherwise run the baseline): ``peg_after`` / ``peg_cfg`` without PEG,
    ``cape_cfg`` without CAPE, ``rope_cfg`` without a rotary mode, ``level_embed=False`` with
    sine (the sine encoding is always added with the level embedding, as in mmdet). ``None``
    means not given. ``encoder_pos`` is a mode or ``dict(mode=..., **options)``; the options
    of a dict are checked with the others.

    Raises:
        ValueError: One line naming ``owner``, the first argument, the mode and the fix (every
            argument to remove).
    """
    mode, options = split_encoder_pos(encoder_pos)
    given = dict(peg_after=peg_after, peg_cfg=peg_cfg, cape_cfg=cape_cfg, rope_cfg=rope_cfg)
    given.update(options)
    unused = [name for name, value in given.items()
              if value is not None and mode not in MODE_OPTIONS[name]]
    if unused:
        name = unused[0]
        if name in options:
            fix = f'remove {", ".join(unused)} from the encoder_pos dict'
        else:
            fix = (f'remove {", ".join(unused)} (' + ', '.join(f'{n}=None' for n in unused) +
                   '; options given in encoder_pos=dict(mode=..., ...) go with the mode)')
        raise ValueError(f'{owner}: {name}={given[name]!r} has no effect with encoder_pos='
                         f'{mode!r}; use encoder_pos={_MODES_HINT[name]} or {fix}')
    if level_embed is False and mode in ('sine', 'sine+peg'):
        raise ValueError(f'{owner}: level_embed=False has no effect with encoder_pos='
                         f"{mode!r} (the sine encoding is always added with the level "
                         "embedding, as in mmdet); remove level_embed or use a mode without "
                         "sine ('peg', 'cape', 'cape+peg', 'none')")


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


class EncoderPosMixin:
    """The ``encoder_pos`` switch: arguments, encoder, positions of one level.

    Put it before the host class (a detector or a pixel decoder whose encoder is built in its
    ``__init__`` / ``_init_layers`` from the config ``self.encoder``). Its arguments are stored
    before the host's ``__init__`` runs.

    Args:
        encoder_pos (str | dict): Position encoding of the encoder tokens: a mode with its
            defaults, or the mode with its options, ``dict(mode=..., **options)`` (the options
            below; they go with the mode, so ``--cfg-options model.encoder_pos=sine`` replaces
            both). The modes:

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

    The options may also be given as arguments of their own (as configs written before the
    mode's value carried them do); an option given both ways is refused. A mode the host
    cannot run is refused first, with the reason (:meth:`check_mode_supported`); then
    ``peg_after`` or ``peg_cfg`` with a mode without PEG, ``cape_cfg`` with a mode without
    CAPE and ``rope_cfg`` with a mode without rotation are refused with a ValueError
    (:func:`check_ablation_args`): they would be ignored.

    Examples:
        >>> # in a config inheriting mmdet::detr/detr_r50_8xb2-150e_coco.py
        >>> model = dict(type='mmposenc.PEGDETR',
        ...              encoder_pos=dict(mode='peg', peg_after=(-1, 0)))
        >>> # the ablation, one line on the command line: --cfg-options model.encoder_pos=sine
    """

    default_peg_cfg = dict(type='mmposenc.MaskedPEG', kernel_size=3)
    #: learnt level embeddings without sine (multi-level hosts set it)
    use_level_embed = False
    #: whether the encoder's self-attention is a dot product that a rotary mode can rotate
    supports_rotary = False

    def __init__(self, *args, encoder_pos: Union[str, dict] = 'peg',
                 peg_after: Optional[Sequence[int]] = None, peg_cfg: Optional[dict] = None,
                 cape_cfg: Optional[dict] = None, rope_cfg: Optional[dict] = None,
                 **kwargs) -> None:
        owner = type(self).__name__
        try:
            mode, options = split_encoder_pos(encoder_pos)
        except (TypeError, ValueError) as err:
            raise type(err)(f'{owner}: {err}') from None
        self.check_mode_supported(mode)  # first: the reason, not an option it leaves unused
        for name, value in dict(peg_after=peg_after, peg_cfg=peg_cfg, cape_cfg=cape_cfg,
                                rope_cfg=rope_cfg).items():
            if value is None:
                continue
            if name in options:
                raise ValueError(f'{owner}: {name} is given twice, {name}={value!r} and in '
                                 f'encoder_pos=dict(mode={mode!r}, {name}={options[name]!r}); '
                                 f'keep one')
            options[name] = value
        check_ablation_args(owner, mode, **options)
        self.encoder_pos = mode
        self.rope_cfg = options.get('rope_cfg')
        self.peg_after_cfg = options.get('peg_after', (0, ))
        self.peg_cfg = options.get('peg_cfg', copy.deepcopy(self.default_peg_cfg))
        self.cape_cfg = options.get('cape_cfg', dict(type='mmposenc.CAPE2d'))
        super().__init__(*args, **kwargs)

    def check_mode_supported(self, mode: str) -> None:
        """Refuse, with the reason first, a mode this host cannot run (the rotary modes on a
        deformable-attention encoder)."""
        if mode in ROTARY_ENCODER_POS and not self.supports_rotary:
            raise ValueError(
                f'{type(self).__name__}: rotary encodings need dot-product attention, and this '
                'encoder runs multi-scale deformable attention (no q.k product to rotate): '
                f'encoder_pos={mode!r} is not supported here; use one of '
                f'{", ".join(repr(m) for m in self.supported_modes())}, or a rotary mode with '
                'mmposenc.PEGDETR / PEGConditionalDETR / PEGDABDETR')

    @classmethod
    def supported_modes(cls) -> Tuple[str, ...]:
        """The modes of :data:`ENCODER_POS_TYPES` this host runs."""
        return tuple(m for m in ENCODER_POS_TYPES
                     if cls.supports_rotary or m not in ROTARY_ENCODER_POS)

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
        ``pegs``), and build the CAPE (``self.cape``, None without CAPE) and the rotary
        encoding (``self.rope``, None without rotation). The encoder is built once, by the
        host: the stock modules are initialised from the same random stream as in the stock
        model."""
        peg_cls = PEG_ENCODERS.get(type(self.encoder))
        if peg_cls is None:
            raise TypeError(f'no PEG version of {type(self.encoder).__name__} in '
                            f'mmposenc.models.detectors.layers.PEG_ENCODERS')
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
        (:func:`~mmposenc.models.detectors.layers.install_rotary_attention`); None without a
        rotary mode."""
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
        # mmdet's sine is float32: a float64 model gets it in float64 (bf16 / fp16 keep it)
        sine = sine.to(torch.promote_types(sine.dtype, feat.dtype))
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

    def rotary_kwargs(self, hw_shape: Optional[Sequence[int]],
                      padding_mask: Optional[Tensor], device) -> dict:
        """The encoder's extra keyword arguments of a rotary mode: ``rotary=(encoding,
        angles)``, the angles of every layer for the ``hw_shape`` grid (each image's own
        region per ``padding_mask`` (bs, h*w)), which the encoder's loop hands to the rotary
        attention of each layer; ``{}`` without rotation."""
        if self.rope is None:
            return {}
        if hw_shape is None:
            raise ValueError(f'{type(self).__name__} with encoder_pos={self.encoder_pos!r} '
                             'needs hw_shape for the rotary angles')
        angles = encoder_angles(self.rope, len(self.encoder.layers), hw_shape, padding_mask,
                                device)
        return dict(rotary=(self.rope, angles))

    def extra_repr(self) -> str:
        return f'encoder_pos={self.encoder_pos!r}, peg_after={self.encoder.peg_after}'
