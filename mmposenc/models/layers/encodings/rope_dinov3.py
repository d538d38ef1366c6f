"""DINOv3's RoPE: axial rotary embedding of normalised, augmented coordinates."""
import math
from typing import Optional, Sequence, Tuple, Union

import torch
from torch import Tensor

from mmposenc.registry import MODELS
from ..grid import position_grid
from .rotary import RotaryPositionEncoding, apply_rotary_half, log_uniform_

NORMALIZE_MODES = ('separate', 'max', 'min')
TRAIN_DRAWS = ('per_block', 'per_forward')
#: DINOv3's names of the RoPE dtypes (``pos_embed_rope_dtype``)
ROPE_DTYPES = {'fp32': torch.float32, 'bf16': torch.bfloat16, 'fp16': torch.float16}


def dinov3_periods(head_dims: int, base: Optional[float] = 100.,
                   min_period: Optional[float] = None,
                   max_period: Optional[float] = None,
                   dtype: torch.dtype = torch.float32) -> Tensor:
    """The ``d/4`` periods of DINOv3's RoPE, computed in ``dtype``.

    They are ``base^(k / (d/4))``, or spaced geometrically from ``min_period`` to ``max_period``.
    """
    n = head_dims // 4
    both = min_period is not None and max_period is not None
    if (base is None and not both) or (base is not None and
                                       (min_period is not None or max_period is not None)):
        raise ValueError('give either base or both min_period and max_period, got '
                         f'base={base}, min_period={min_period}, max_period={max_period}')
    if base is not None:
        return base**(torch.arange(n, dtype=dtype) / n)
    ratio = max_period / min_period
    return ratio**torch.linspace(0, 1, n, dtype=dtype) / ratio * max_period


def image_extents(hw_shape: Sequence, valid_hw: Optional[Tensor] = None,
                  normalize: str = 'separate', device=None) -> Tensor:
    """The extents ``(B or 1, 2)`` (rows, columns) that DINOv3 normalises each image over.

    ``'separate'`` uses the image's own height and width, ``'max'`` and ``'min'`` one side.
    ``valid_hw`` ``(B, 2)`` holds each image's rows and columns; None uses the whole grid.
    """
    if valid_hw is None:
        h = torch.full((1, 1), 1., device=device) * hw_shape[0]
        w = torch.full((1, 1), 1., device=device) * hw_shape[1]
    else:
        h, w = valid_hw[:, 0:1].float(), valid_hw[:, 1:2].float()
    if normalize == 'max':
        h = w = torch.maximum(h, w)
    elif normalize == 'min':
        h = w = torch.minimum(h, w)
    elif normalize != 'separate':
        raise ValueError(f'normalize_coords must be one of {NORMALIZE_MODES}, got {normalize!r}')
    return torch.cat((h, w), dim=1)


@MODELS.register_module()
class DINOv3RoPE(RotaryPositionEncoding):
    """The rotary position embedding of `DINOv3 <https://arxiv.org/abs/2508.10104>`_.

    It is an axial RoPE of cell centres normalised to ``[-1, 1]`` over each image's extent. In
    training the coordinates get a random shift, jitter and rescale. It has no learnt
    parameters. See docs/user_guides/rotary.md.

    Args:
        embed_dims (int): Token channels.
        num_heads (int): Attention heads; ``embed_dims / num_heads`` divisible by 4.
            Defaults to 1.
        num_layers (int): Unused (all layers share the periods). Defaults to 1.
        num_extra_tokens (int): Leading tokens left unrotated. Defaults to 0.
        base (float, optional): Period base. Defaults to 100.
        min_period (float, optional): With ``max_period`` instead of ``base``.
        max_period (float, optional): See ``min_period``.
        normalize_coords (str): ``'separate'``, ``'max'`` or ``'min'``. Defaults to
            ``'separate'``.
        shift_coords (float, optional): Training shift bound. Defaults to None (off).
        jitter_coords (float, optional): Training per-axis scale bound (> 1). Defaults to None.
        rescale_coords (float, optional): Training global scale bound (> 1). Defaults to 2.
        train_draw (str): ``'per_block'`` draws the augmentation at every :meth:`angles`
            call, ``'per_forward'`` once per forward. Defaults to ``'per_block'``.
        rope_dtype (str): ``'fp32'``, ``'bf16'`` or ``'fp16'``: the dtype the whole RoPE is
            computed in. Defaults to ``'fp32'``.
        cache_size (int): See :class:`RotaryPositionEncoding`. Defaults to 64.
        init_cfg (dict, optional): Initialization config. Defaults to None.

    Examples:
        >>> import torch
        >>> rope = DINOv3RoPE(32, num_heads=2, num_extra_tokens=1).eval()
        >>> q = k = torch.rand(1, 2, 1 + 12, 16)
        >>> [t.shape for t in rope.transform_qk(q, k, (3, 4), layer_idx=0)]
        [torch.Size([1, 2, 13, 16]), torch.Size([1, 2, 13, 16])]
        >>> rope.train().draw_per_layer  # rescale_coords=2: a new draw in every block
        True
    """

    angle_sources = ('periods', )

    def __init__(self,
                 embed_dims: int,
                 num_heads: int = 1,
                 num_layers: int = 1,
                 num_extra_tokens: int = 0,
                 base: Optional[float] = 100.,
                 min_period: Optional[float] = None,
                 max_period: Optional[float] = None,
                 normalize_coords: str = 'separate',
                 shift_coords: Optional[float] = None,
                 jitter_coords: Optional[float] = None,
                 rescale_coords: Optional[float] = 2.,
                 train_draw: str = 'per_block',
                 rope_dtype: Union[str, torch.dtype] = 'fp32',
                 cache_size: int = 64,
                 init_cfg: Optional[dict] = None):
        super().__init__(embed_dims, num_heads, num_layers, num_extra_tokens, cache_size,
                         init_cfg)
        if normalize_coords not in NORMALIZE_MODES:
            raise ValueError(f'normalize_coords must be one of {NORMALIZE_MODES}, got '
                             f'{normalize_coords!r}')
        for name, bound in (('jitter_coords', jitter_coords), ('rescale_coords', rescale_coords)):
            if bound is not None and bound < 1:
                raise ValueError(f'{name} is a bound >= 1 of a log-uniform scale, got {bound}')
        if shift_coords is not None and shift_coords < 0:
            raise ValueError(f'shift_coords must be >= 0, got {shift_coords}')
        if train_draw not in TRAIN_DRAWS:
            raise ValueError(f'train_draw must be one of {TRAIN_DRAWS}, got {train_draw!r}')
        if isinstance(rope_dtype, torch.dtype):
            names = {v: k for k, v in ROPE_DTYPES.items()}
            rope_dtype = names.get(rope_dtype, rope_dtype)
        if rope_dtype not in ROPE_DTYPES:
            raise ValueError(f'rope_dtype must be one of {tuple(ROPE_DTYPES)}, got '
                             f'{rope_dtype!r}')
        self.base = base
        self.min_period, self.max_period = min_period, max_period
        self.normalize_coords = normalize_coords
        self.shift_coords = shift_coords
        self.jitter_coords = jitter_coords
        self.rescale_coords = rescale_coords
        self.train_draw = train_draw
        self.rope_dtype = rope_dtype
        # persistent: DINOv3's checkpoints carry rope_embed.periods. Float32, holding the
        # values DINOv3 computes in rope_dtype.
        self.register_buffer('periods', dinov3_periods(self.head_dims, base, min_period,
                                                       max_period, self.compute_dtype).float())
        self._draw = None

    @property
    def compute_dtype(self) -> torch.dtype:
        """The dtype of the whole RoPE computation (``rope_dtype`` as a torch dtype)."""
        return ROPE_DTYPES[self.rope_dtype]

    @property
    def augments(self) -> bool:
        return any(v is not None for v in (self.shift_coords, self.jitter_coords,
                                           self.rescale_coords))

    def random_now(self) -> bool:
        return self.training and self.augments

    @property
    def draw_per_layer(self) -> bool:
        """True in training with augmentation and ``train_draw='per_block'``."""
        return self.random_now() and self.train_draw == 'per_block'

    def start_forward(self) -> None:
        """Draw the augmentation shared by this forward's layers (``'per_forward'`` only)."""
        self._draw = (self._new_draw() if self.random_now() and
                      self.train_draw == 'per_forward' else None)

    def _new_draw(self) -> dict:
        """One draw of shift, jitter and rescale, per axis as (row, column), like DINOv3's."""
        device, dtype = self.periods.device, self.compute_dtype
        draw = {}
        if self.shift_coords is not None:
            draw['shift'] = torch.empty(2, device=device, dtype=dtype).uniform_(
                -self.shift_coords, self.shift_coords)
        if self.jitter_coords is not None:
            draw['jitter'] = log_uniform_(2, self.jitter_coords, device, dtype)
        if self.rescale_coords is not None:
            draw['rescale'] = log_uniform_(1, self.rescale_coords, device, dtype)
        return draw

    def grid_coords(self, hw_shape, valid_hw=None, device=None) -> Tensor:
        """Normalised (x, y) coordinates in :attr:`compute_dtype`, augmented in training."""
        device = device if device is not None else self.periods.device
        extent = image_extents(hw_shape, valid_hw, self.normalize_coords, device)
        coords = position_grid(hw_shape, 'centres', extent, device, self.compute_dtype)
        if not self.random_now():
            return coords
        if self.train_draw == 'per_block':
            draw = self._new_draw()
        else:
            if self._draw is None:
                self._draw = self._new_draw()
            draw = self._draw
        draw = {k: v.to(device) for k, v in draw.items()}
        if 'shift' in draw:
            coords = coords + draw['shift'].flip(0)  # (row, col) -> (x, y)
        if 'jitter' in draw:
            coords = coords * draw['jitter'].flip(0)
        if 'rescale' in draw:
            coords = coords * draw['rescale']
        return coords

    def angles_of(self, coords: Tensor, layer_idx: int) -> Tensor:
        """Angles ``(B or 1, 1, N, d/2)``: ``2 pi y / periods``, then ``2 pi x / periods``."""
        dtype = self.compute_dtype
        p = self.periods.to(device=coords.device, dtype=dtype)
        ang = 2 * math.pi * coords.to(dtype)[..., None] / p  # (B, N, 2 (x, y), d/4)
        return torch.cat((ang[..., 1, :], ang[..., 0, :]), dim=-1)[:, None]

    def transform_qk(self, q: Tensor, k: Tensor, hw_shape: Sequence,
                     layer_idx: int) -> Tuple[Tensor, Tensor]:
        """Rotate the patch queries and keys; extra tokens pass through ``rope_dtype`` too."""
        q, k = super().transform_qk(q, k, hw_shape, layer_idx)
        e = self.num_extra_tokens
        if e and self.rope_dtype != 'fp32':
            dtype = self.compute_dtype
            q = torch.cat((q[..., :e, :].to(dtype).to(q.dtype), q[..., e:, :]), dim=-2)
            k = torch.cat((k[..., :e, :].to(dtype).to(k.dtype), k[..., e:, :]), dim=-2)
        return q, k

    def rotate(self, x: Tensor, angles: Tensor) -> Tensor:
        """DINOv3's rotate-half rotation in :attr:`compute_dtype`, in ``x``'s dtype."""
        return apply_rotary_half(x, angles, self.compute_dtype)

    def extra_repr(self) -> str:
        periods = (f'base={self.base}' if self.base is not None else
                   f'min_period={self.min_period}, max_period={self.max_period}')
        return (super().extra_repr() + f', {periods}, normalize_coords='
                f'{self.normalize_coords!r}, shift_coords={self.shift_coords}, '
                f'jitter_coords={self.jitter_coords}, rescale_coords={self.rescale_coords}, '
                f'train_draw={self.train_draw!r}, rope_dtype={self.rope_dtype!r}')
