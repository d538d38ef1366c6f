"""DINOv3-style RoPE: axial rotary embedding of coordinates normalised to [-1, 1], with
training-time shift, jitter and rescale of the coordinates."""
import math
from typing import Optional, Sequence

import torch
from torch import Tensor

from mmposenc.registry import MODELS
from .rotary import RotaryPositionEncoding, apply_rotary_half, log_uniform_

NORMALIZE_MODES = ('separate', 'max', 'min')


def dinov3_periods(head_dims: int, base: Optional[float] = 100.,
                   min_period: Optional[float] = None,
                   max_period: Optional[float] = None) -> Tensor:
    """The ``d/4`` periods of DINOv3's RoPE: ``base^(k / (d/4))``, ``k < d/4``, or
    geometrically spaced from ``min_period`` to ``max_period`` (float32)."""
    n = head_dims // 4
    both = min_period is not None and max_period is not None
    if (base is None and not both) or (base is not None and
                                       (min_period is not None or max_period is not None)):
        raise ValueError('give either base or both min_period and max_period, got '
                         f'base={base}, min_period={min_period}, max_period={max_period}')
    if base is not None:
        return base**(torch.arange(n, dtype=torch.float32) / n)
    ratio = max_period / min_period
    return ratio**torch.linspace(0, 1, n) / ratio * max_period


def normalized_coords(hw_shape: Sequence, valid_hw: Optional[Tensor] = None,
                      normalize: str = 'separate', device=None) -> Tensor:
    """Cell centres mapped to ``[-1, 1]`` over each image's own extent, float32 ``(B or 1,
    H*W, 2)`` as (x, y).

    ``'separate'`` divides rows by the image's height and columns by its width; ``'max'`` /
    ``'min'`` divide both by the larger / smaller side. ``valid_hw`` (B, 2) gives each
    image's rows and columns in a padded batch (the padded cells get coordinates beyond 1,
    which masked keys never show); None uses the whole grid.
    """
    H, W = hw_shape[0], hw_shape[1]
    ys = torch.arange(H, device=device, dtype=torch.float32) + 0.5
    xs = torch.arange(W, device=device, dtype=torch.float32) + 0.5
    if valid_hw is None:
        h = torch.full((1, 1), 1., device=device) * H
        w = torch.full((1, 1), 1., device=device) * W
    else:
        h, w = valid_hw[:, 0:1].float(), valid_hw[:, 1:2].float()
    if normalize == 'max':
        h = w = torch.maximum(h, w)
    elif normalize == 'min':
        h = w = torch.minimum(h, w)
    elif normalize != 'separate':
        raise ValueError(f'normalize_coords must be one of {NORMALIZE_MODES}, got {normalize!r}')
    cy = 2 * ys[None] / h - 1  # (B, H)
    cx = 2 * xs[None] / w - 1  # (B, W)
    B = cy.shape[0]
    grid_y = cy[:, :, None].expand(B, cy.shape[1], cx.shape[1])
    grid_x = cx[:, None, :].expand(B, cy.shape[1], cx.shape[1])
    return torch.stack((grid_x.reshape(B, -1), grid_y.reshape(B, -1)), dim=-1)


@MODELS.register_module()
class DINOv3RoPE(RotaryPositionEncoding):
    """The rotary position embedding of `DINOv3 <https://arxiv.org/abs/2508.10104>`_
    (``RopePositionEmbedding`` of facebookresearch/dinov3): axial RoPE on coordinates
    normalised to ``[-1, 1]``, with random shift, jitter and rescale of the coordinates in
    training.

    Each patch's centre is mapped to ``[-1, 1]`` per axis over its image's own extent
    (``normalize_coords='separate'``; ``'max'`` / ``'min'`` divide by one side), so an image
    in a padded batch gets the coordinates it has alone. In training, once per forward and for
    the whole batch (as DINOv3): a shift ``U[-shift, shift]`` per axis is added, then the
    coordinates are multiplied by a jitter ``log-U[1/jitter, jitter]`` per axis and by one
    rescale ``log-U[1/rescale, rescale]`` (each only when set). The angle of channel pair
    ``t`` is ``2 pi c / period_t`` with ``period_t = base^(t / (d/4))``: the first ``d/4``
    pairs rotate with the row coordinate, the last ``d/4`` with the column (DINOv3's order),
    and channels ``i`` and ``i + d/2`` form a pair (DINOv3's rotate-half layout). No learnt
    parameters; the class token is not rotated. CAPE's augmentation (shift, scale) on a rotary
    carrier.

    Args:
        embed_dims (int): Token channels.
        num_heads (int): Attention heads; ``embed_dims / num_heads`` divisible by 4.
            Defaults to 1.
        num_layers (int): Unused (all layers share the angles). Defaults to 1.
        num_extra_tokens (int): Leading tokens left unrotated. Defaults to 0.
        base (float, optional): Period base. Defaults to 100 (DINOv3).
        min_period (float, optional): With ``max_period`` instead of ``base``.
        max_period (float, optional): See ``min_period``.
        normalize_coords (str): ``'separate'``, ``'max'`` or ``'min'``. Defaults to
            ``'separate'`` (DINOv3).
        shift_coords (float, optional): Training shift bound. Defaults to None (off, as
            DINOv3's released recipes).
        jitter_coords (float, optional): Training per-axis scale bound (> 1). Defaults to None.
        rescale_coords (float, optional): Training global scale bound (> 1). Defaults to 2
            (DINOv3's ViT-7B pre-training and ViT-L distillation recipes; the module's own
            default there is None).
        cache_size (int): See :class:`RotaryPositionEncoding`. Defaults to 64.
        init_cfg (dict, optional): Initialization config. Defaults to None.

    Examples:
        >>> import torch
        >>> rope = DINOv3RoPE(32, num_heads=2, num_extra_tokens=1).eval()
        >>> q = k = torch.rand(1, 2, 1 + 12, 16)
        >>> [t.shape for t in rope.transform_qk(q, k, (3, 4), layer_idx=0)]
        [torch.Size([1, 2, 13, 16]), torch.Size([1, 2, 13, 16])]
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
        self.base = base
        self.min_period, self.max_period = min_period, max_period
        self.normalize_coords = normalize_coords
        self.shift_coords = shift_coords
        self.jitter_coords = jitter_coords
        self.rescale_coords = rescale_coords
        # persistent, as DINOv3 (its checkpoints carry rope_embed.periods)
        self.register_buffer('periods', dinov3_periods(self.head_dims, base, min_period,
                                                       max_period))
        self._draw = None

    @property
    def augments(self) -> bool:
        return any(v is not None for v in (self.shift_coords, self.jitter_coords,
                                           self.rescale_coords))

    def random_now(self) -> bool:
        return self.training and self.augments

    def start_forward(self) -> None:
        """Draw this forward's shift, jitter and rescale (training with augmentation only)."""
        self._draw = self._new_draw() if self.random_now() else None

    def _new_draw(self) -> dict:
        device = self.periods.device
        draw = {}
        if self.shift_coords is not None:
            draw['shift'] = torch.empty(2, device=device).uniform_(-self.shift_coords,
                                                                   self.shift_coords)
        if self.jitter_coords is not None:
            draw['jitter'] = log_uniform_(2, self.jitter_coords, device)
        if self.rescale_coords is not None:
            draw['rescale'] = log_uniform_(1, self.rescale_coords, device)
        return draw

    def grid_coords(self, hw_shape, valid_hw=None, device=None) -> Tensor:
        """Normalised (x, y) coordinates, augmented in training (DINOv3's order: shift,
        jitter, rescale; the draws are stored per axis as (row, column) like DINOv3's)."""
        device = device if device is not None else self.periods.device
        coords = normalized_coords(hw_shape, valid_hw, self.normalize_coords, device)
        if not self.random_now():
            return coords
        if self._draw is None:
            self._draw = self._new_draw()
        draw = {k: v.to(device) for k, v in self._draw.items()}
        if 'shift' in draw:
            coords = coords + draw['shift'].flip(0)  # (row, col) -> (x, y)
        if 'jitter' in draw:
            coords = coords * draw['jitter'].flip(0)
        if 'rescale' in draw:
            coords = coords * draw['rescale']
        return coords

    def angles_of(self, coords: Tensor, layer_idx: int) -> Tensor:
        """(B or 1, 1, N, d/2): ``2 pi y / periods`` then ``2 pi x / periods``."""
        p = self.periods.float().to(coords.device)
        ang = 2 * math.pi * coords.float()[..., None] / p  # (B, N, 2 (x, y), d/4)
        return torch.cat((ang[..., 1, :], ang[..., 0, :]), dim=-1)[:, None]

    def rotate(self, x: Tensor, angles: Tensor) -> Tensor:
        return apply_rotary_half(x, angles)

    def extra_repr(self) -> str:
        periods = (f'base={self.base}' if self.base is not None else
                   f'min_period={self.min_period}, max_period={self.max_period}')
        return (super().extra_repr() + f', {periods}, normalize_coords='
                f'{self.normalize_coords!r}, shift_coords={self.shift_coords}, '
                f'jitter_coords={self.jitter_coords}, rescale_coords={self.rescale_coords}')
