"""The encoder position switch of every mmposenc detector (see
``docs/user_guides/swap_detector_pe.md``)."""
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

#: Rotary encoder positions and the encoding each builds by default.
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
#: The options a mode may carry in its value, and which modes use each.
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
    """The mode and the options of an ``encoder_pos`` value (a mode or ``dict(mode=...,
    **options)``).

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
    """Refuse arguments that ``encoder_pos`` would silently ignore (``None`` = not given).

    Raises:
        ValueError: One line naming ``owner``, the argument, the mode and the fix.
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
    """The inputs of mmdet's Deformable-DETR encoder from per-level maps, masks and positions.

    Args:
        feats (Sequence[Tensor]): Maps (bs, C, h_l, w_l).
        masks (Sequence[Tensor], optional): Bool (bs, h_l, w_l) per level, True = padded.
        positions (Sequence[Tensor | None]): Positions (bs, h_l * w_l, C) per level, or Nones.

    Returns:
        dict: ``feat`` (bs, sum h_l w_l, C), ``feat_pos``, ``feat_mask``, ``spatial_shapes``
        (L, 2), ``level_start_index`` and ``valid_ratios`` (bs, L, 2; None without masks).
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
    """Mixin with the ``encoder_pos`` switch of a detector or pixel decoder; put it before the
    host class.

    Args:
        encoder_pos (str | dict): A mode of :data:`ENCODER_POS_TYPES`, or
            ``dict(mode=..., **options)`` with the options below. Defaults to ``'peg'``.
        peg_after (Sequence[int], optional): PEG positions: ``i`` = after encoder layer ``i``,
            ``-1`` = before the first layer. None (default) is ``(0, )``.
        peg_cfg (dict, optional): Config of each PEG. Defaults to :attr:`default_peg_cfg`.
        cape_cfg (dict, optional): Config of the encoder's CAPE. None (default) is
            ``dict(type='mmposenc.CAPE2d')``.
        rope_cfg (dict, optional): Config of the rotary encoding. None (default) is the
            mode's class (:data:`ROTARY_ENCODER_POS`).

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
        """Refuse a mode this host cannot run (rotary on deformable attention)."""
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
        """Turn the host's encoder into its PEG version in place and build ``self.cape`` and
        ``self.rope`` (None where unused)."""
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
        """The host's initialisation, then the PEG convolutions' default one (not the host's
        xavier) and the PEGs' own ``init_cfg``."""
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
        """The encoder's rotary encoding, its attention made rotary; None without rotation."""
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
        """CAPE of ``feat``'s grid as (bs, h*w, C), zero at padded tokens."""
        return self.cape(
            feat.shape[-2:], batch_size=feat.shape[0], padding_mask=padding_mask).to(feat.dtype)

    def sine_pos(self, feat: Tensor, mask: Optional[Tensor]) -> Tensor:
        """The host's sine encoding of ``feat``'s grid as (bs, h*w, C), normalised per image."""
        sine = (self.sine_encoding(None, input=feat)
                if mask is None else self.sine_encoding(mask))
        # mmdet's sine is float32: a float64 model gets it in float64 (bf16 / fp16 keep it)
        sine = sine.to(torch.promote_types(sine.dtype, feat.dtype))
        return sine.view(feat.shape[0], feat.shape[1], -1).permute(0, 2, 1)

    def level_pos(self, feat: Tensor, mask: Optional[Tensor],
                  level_embed: Optional[Tensor] = None) -> Optional[Tensor]:
        """Encoder positions of one level per ``encoder_pos``, (bs, h*w, C) or None.

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
        """The encoder's ``rotary=(encoding, angles)`` keyword in a rotary mode, else ``{}``."""
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
