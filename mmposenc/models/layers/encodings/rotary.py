"""The base of the 2D rotary encodings: rotation, float32 angles and the eval cache.

See docs/user_guides/rotary.md.
"""
import math
from typing import Dict, Optional, Sequence, Tuple

import torch
from torch import Tensor

from ..grid import position_grid  # noqa: F401  (the grid every rotary encoding uses)
from .base import BasePositionEncoding


ROTARY_LAYOUTS = ('pairs', 'half')


def apply_rotary(x: Tensor, angles: Tensor, layout: str = 'pairs',
                 dtype: torch.dtype = torch.float32) -> Tensor:
    """Rotate channel pairs of ``x`` by ``angles``, computing in ``dtype``.

    Args:
        x (Tensor): (..., N, d).
        angles (Tensor): (..., N, d/2), broadcastable to ``x``'s leading dimensions.
        layout (str): ``'pairs'`` pairs ``(x[2i], x[2i+1])`` as RoPE-ViT; ``'half'`` pairs
            ``(x[i], x[i + d/2])`` as DINOv3. Defaults to ``'pairs'``.
        dtype (torch.dtype): Of the arithmetic. Defaults to float32.

    Returns:
        Tensor: The rotated ``x``, in ``x``'s dtype.

    Examples:
        >>> x = torch.tensor([[1., 0., 0., 1.]]).bfloat16()
        >>> apply_rotary(x, torch.tensor([[math.pi / 2, 0.]])).dtype
        torch.bfloat16
    """
    xc = x.to(dtype)
    angles = angles.to(dtype)
    cos, sin = angles.cos(), angles.sin()
    if layout == 'pairs':
        x1, x2 = xc[..., 0::2], xc[..., 1::2]
        out = torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2)
    elif layout == 'half':
        x1, x2 = xc.chunk(2, dim=-1)
        out = torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)
    else:
        raise ValueError(f'layout must be one of {ROTARY_LAYOUTS}, got {layout!r}')
    return out.to(x.dtype)


def apply_rotary_pairs(x: Tensor, angles: Tensor, dtype: torch.dtype = torch.float32) -> Tensor:
    """:func:`apply_rotary` with interleaved pairs ``(x[2i], x[2i+1])`` (RoPE-ViT's layout)."""
    return apply_rotary(x, angles, 'pairs', dtype)


def apply_rotary_half(x: Tensor, angles: Tensor, dtype: torch.dtype = torch.float32) -> Tensor:
    """:func:`apply_rotary` with the pairs ``(x[i], x[i + d/2])`` (DINOv3's layout)."""
    return apply_rotary(x, angles, 'half', dtype)


def valid_hw_from_mask(key_padding_mask: Optional[Tensor], hw_shape: Sequence) -> Optional[Tensor]:
    """The valid rows and columns ``(B, 2)`` of each image, from its key padding mask.

    The mask is ``(B, H*W)``, True where padded, images top-left aligned. None gives None.
    """
    if key_padding_mask is None:
        return None
    valid = ~key_padding_mask.view(key_padding_mask.shape[0], hw_shape[0], hw_shape[1])
    return torch.stack((valid[:, :, 0].sum(1), valid[:, 0, :].sum(1)), dim=1)


def _no_cache_now() -> bool:
    """Tracing (ONNX, jit) or compiling: the angles must stay in the graph."""
    compiling = getattr(torch.compiler, 'is_compiling', lambda: False)()
    return compiling or torch.jit.is_tracing() or torch.jit.is_scripting()


class RotaryPositionEncoding(BasePositionEncoding):
    """Base class of the 2D rotary encodings: angles of a grid, rotation, cache.

    Subclasses implement :meth:`grid_coords`, :meth:`angles_of` and :meth:`rotate`, and set
    :attr:`angle_sources` and :attr:`per_layer`. Extra tokens are not rotated.

    Args:
        embed_dims, num_heads, num_layers, num_extra_tokens, init_cfg: As
            :class:`BasePositionEncoding`; ``embed_dims / num_heads`` must be divisible by 4.
        cache_size (int): Angle tensors kept for the eval cache (0: no cache).
            Defaults to 64.
    """

    hooks = ('transform_qk', )
    #: the tensors (attribute names) the angles are computed from; their versions key the cache
    angle_sources: Tuple[str, ...] = ()
    #: whether each layer has its own angles
    per_layer = False

    def __init__(self,
                 embed_dims: int,
                 num_heads: int = 1,
                 num_layers: int = 1,
                 num_extra_tokens: int = 0,
                 cache_size: int = 64,
                 init_cfg: Optional[dict] = None):
        super().__init__(embed_dims, num_heads, num_layers, num_extra_tokens, init_cfg)
        if self.head_dims % 4:
            raise ValueError(f'{type(self).__name__}: embed_dims / num_heads must be divisible '
                             f'by 4 (two axes, channel pairs), got {embed_dims} / {num_heads}')
        if cache_size < 0:
            raise ValueError(f'cache_size must be >= 0, got {cache_size}')
        self.cache_size = int(cache_size)
        self._angle_cache: Dict[tuple, Tensor] = {}
        #: cache hits and misses since the last :meth:`clear_cache` (for tests and benchmarks)
        self.cache_stats = dict(hits=0, misses=0)

    def grid_coords(self, hw_shape: Sequence, valid_hw: Optional[Tensor] = None,
                    device=None) -> Tensor:
        """Float32 coordinates ``(B or 1, H*W, 2)`` as ``(x, y)`` of the grid, row-major."""
        raise NotImplementedError

    def angles_of(self, coords: Tensor, layer_idx: int) -> Tensor:
        """The angles ``(B or 1, heads or 1, H*W, head_dims/2)`` of ``coords``."""
        raise NotImplementedError

    def rotate(self, x: Tensor, angles: Tensor) -> Tensor:
        """``x`` ``(B, heads, H*W, head_dims)`` rotated by ``angles``, in ``x``'s dtype."""
        raise NotImplementedError

    def random_now(self) -> bool:
        """Whether the angles of this call are drawn at random (training augmentation)."""
        return False

    @property
    def draw_per_layer(self) -> bool:
        """Whether each call of :meth:`angles` draws afresh, so layers must not share one."""
        return False

    def start_forward(self) -> None:
        """Called once per forward, before the first layer's angles; a shared draw goes here."""

    def cacheable(self) -> bool:
        """Whether the angles may come from the cache: no draw, no graph, no tracing."""
        if self.cache_size == 0 or self.random_now() or _no_cache_now():
            return False
        if torch.is_grad_enabled() and any(
                getattr(self, n).requires_grad for n in self.angle_sources):
            return False
        return True

    def _sources_key(self) -> tuple:
        return tuple((getattr(self, n).data_ptr(), getattr(self, n)._version)
                     for n in self.angle_sources)

    def angles(self, hw_shape: Sequence, layer_idx: int = 0, valid_hw: Optional[Tensor] = None,
               device=None) -> Tensor:
        """The angles ``(B or 1, heads or 1, H*W, head_dims/2)`` of the grid.

        They are computed with autocast off, and come from the eval cache when
        :meth:`cacheable` and the batch is not padded. See docs/user_guides/rotary.md.

        Args:
            hw_shape (Sequence): (H, W) of the grid.
            layer_idx (int): The layer (ignored unless :attr:`per_layer`). Defaults to 0.
            valid_hw (Tensor, optional): (B, 2) valid rows and columns of each image of a
                padded batch; None when the batch is not padded.
            device: Where to compute them. Defaults to the module's.
        """
        if not self.per_layer:
            layer_idx = 0
        elif not 0 <= layer_idx < self.num_layers:
            raise IndexError(f'{type(self).__name__} has {self.num_layers} layers of '
                             f'frequencies, got layer_idx={layer_idx}')
        use_cache = valid_hw is None and self.cacheable()
        if use_cache:
            key = (int(hw_shape[0]), int(hw_shape[1]), layer_idx, str(device),
                   self._sources_key())
            hit = self._angle_cache.get(key)
            if hit is not None:
                self.cache_stats['hits'] += 1
                return hit
            self.cache_stats['misses'] += 1
        with torch.autocast(device_type=torch.device(device or 'cpu').type, enabled=False):
            angles = self.angles_of(self.grid_coords(hw_shape, valid_hw, device), layer_idx)
        if use_cache:
            if len(self._angle_cache) >= self.cache_size:
                self._angle_cache.clear()
            self._angle_cache[key] = angles
        return angles

    def clear_cache(self) -> None:
        """Drop the cached angles (needed only after editing a source through ``.data``)."""
        self._angle_cache.clear()
        self.cache_stats = dict(hits=0, misses=0)

    def _apply(self, fn, *args, **kwargs):
        # .to() / .cuda() / .half(): the cached tensors would stay where they were
        self.clear_cache()
        return super()._apply(fn, *args, **kwargs)

    def transform_qk(self, q: Tensor, k: Tensor, hw_shape: Sequence,
                     layer_idx: int) -> Tuple[Tensor, Tensor]:
        """Rotate the patch queries and keys ``(B, heads, E + H*W, head_dims)``; the ``E``
        extra tokens are left as they are."""
        self.check_grid(q, hw_shape)
        if layer_idx == 0:
            self.start_forward()
        angles = self.angles(hw_shape, layer_idx, device=q.device)
        e = self.num_extra_tokens
        if e == 0:
            return self.rotate(q, angles), self.rotate(k, angles)
        return (torch.cat((q[..., :e, :], self.rotate(q[..., e:, :], angles)), dim=-2),
                torch.cat((k[..., :e, :], self.rotate(k[..., e:, :], angles)), dim=-2))

    def extra_repr(self) -> str:
        return super().extra_repr() + f', cache_size={self.cache_size}'


def log_uniform_(shape, bound: float, device=None, dtype: torch.dtype = torch.float32) -> Tensor:
    """Samples log-uniform in ``[1/bound, bound]``, drawn and exponentiated in ``dtype``."""
    b = math.log(bound)
    return torch.empty(shape, device=device, dtype=dtype).uniform_(-b, b).exp()
