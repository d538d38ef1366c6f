"""What every 2D rotary encoding shares: the rotation, float32 angles and the eval cache.

A rotary encoding rotates channel pairs of each head's queries and keys by angles that are
linear in the token's 2D coordinates, so that ``q_i . k_j`` sees the positions only through
the rotation between them. The encodings differ in the coordinates (patch indices, or
normalised to ``[-1, 1]``), the frequencies (fixed axial, or learnable and mixed) and how the
channels are paired; :class:`RotaryPositionEncoding` holds the rest:

- the angles are computed in float32 with autocast disabled (bf16 cannot represent
  ``x * f`` for ``x`` in the tens to within a radian) and the rotation
  (:func:`apply_rotary`) runs in float32 before casting back to the dtype of the queries, as
  RoPE-ViT's code does (``DINOv3RoPE(rope_dtype='bf16')`` is the one opt-in exception: the
  bf16 RoPE of DINOv3's default recipe);
- the grid comes from :func:`~mmposenc.models.layers.grid.position_grid`;
- every operation is real-valued (no complex tensors), so the encodings export to ONNX;
- the angles of a grid are cached while they need no autograd graph and draw nothing at
  random (:meth:`RotaryPositionEncoding.cacheable`), keyed by the grid, the layer, the device
  and the version of the tensors they are computed from, so an optimizer step, a
  ``load_state_dict`` or a move to another device invalidates them;
- a padded batch gives each image the coordinates of its own region
  (``valid_hw``, the valid rows and columns of each image, top-left aligned as mmdet pads).
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
    """Rotate channel pairs of ``x`` by ``angles``, computing in ``dtype`` (float32 unless
    asked otherwise, as RoPE-ViT and DINOv3's float32 recipes do), returning ``x``'s dtype.

    Args:
        x (Tensor): (..., N, d).
        angles (Tensor): (..., N, d/2), broadcastable to ``x``'s leading dimensions.
        layout (str): How the channels pair up:

            - ``'pairs'``: interleaved ``(x[2i], x[2i+1])`` (RoPE-ViT: the complex view of
              ``x.reshape(..., d/2, 2)`` times ``exp(i * angles)``);
            - ``'half'``: ``(x[i], x[i + d/2])`` (DINOv3: ``x * cos + rotate_half(x) * sin``
              with the angles tiled twice).

            Defaults to ``'pairs'``.
        dtype (torch.dtype): Of the arithmetic: ``x`` and ``angles`` are cast to it, the
            cosines, sines and products are computed in it. Defaults to float32.

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
    """The valid rows and columns ``(B, 2)`` of each image of a padded batch, from its key
    padding mask ``(B, H*W)`` (True = padded; images top-left aligned, as mmdet pads).
    None without a mask. Traceable (no Python numbers are read from tensors)."""
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

    Subclasses implement :meth:`grid_coords` (float32 ``(B or 1, H*W, 2)``), :meth:`angles_of`
    (coordinates -> ``(B or 1, heads or 1, H*W, head_dims/2)``) and :meth:`rotate`, and set
    :attr:`angle_sources` (the tensors the angles are computed from, by attribute name) and
    :attr:`per_layer`. The extra (class) tokens are not rotated, as in the papers.

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

    # ------------------------------------------------------------- subclass API
    def grid_coords(self, hw_shape: Sequence, valid_hw: Optional[Tensor] = None,
                    device=None) -> Tensor:
        """Float32 coordinates ``(B or 1, H*W, 2)`` as ``(x, y)`` of the grid, row-major."""
        raise NotImplementedError

    def angles_of(self, coords: Tensor, layer_idx: int) -> Tensor:
        """Float32 (or the encoding's compute dtype) angles ``(B or 1, heads or 1, H*W, head_dims/2)`` of ``coords``."""
        raise NotImplementedError

    def rotate(self, x: Tensor, angles: Tensor) -> Tensor:
        """``x`` (B, heads, H*W, head_dims) rotated by ``angles`` (:func:`apply_rotary`, in
        float32, returned in ``x``'s dtype)."""
        raise NotImplementedError

    def random_now(self) -> bool:
        """Whether the angles of this call are drawn at random (training augmentation)."""
        return False

    @property
    def draw_per_layer(self) -> bool:
        """Whether every layer gets its own random draw now: each call of :meth:`angles`
        draws afresh, so a caller that computes the angles of all layers up front must call
        :meth:`angles` once per layer rather than share one result (DINOv3's RoPE in
        training, ``train_draw='per_block'``). False for deterministic angles."""
        return False

    def start_forward(self) -> None:
        """Called once per forward of the model, before the angles of its first layer: an
        encoding whose draw is shared by the layers of a forward makes it here."""

    # ------------------------------------------------------------------ angles
    def cacheable(self) -> bool:
        """The angles may come from the cache: no random draw, no autograd graph to build
        (grad disabled, or no source that requires grad) and not tracing / compiling."""
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
        """Angles ``(B or 1, heads or 1, H*W, head_dims/2)`` of the grid, float32 (bf16 for
        ``DINOv3RoPE(rope_dtype='bf16')``).

        Computed with autocast off. In training with :attr:`draw_per_layer`, every call
        makes a new random draw. Served from the cache when :meth:`cacheable` and the batch
        has no padding (``valid_hw`` None); the key holds the grid, the layer, the device and
        the data pointer and version counter of every :attr:`angle_sources` tensor, so any
        in-place update through autograd-visible ops (optimizer steps, ``load_state_dict``,
        ``copy_`` under ``no_grad``) or a move invalidates it. Edits through ``.data`` are
        invisible to the version counter: call :meth:`clear_cache` after them.

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

    # ------------------------------------------------------------------- hooks
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
    """Samples of ``exp(U[-log(bound), log(bound)])``, i.e. log-uniform in
    ``[1/bound, bound]``, drawn and exponentiated in ``dtype`` (float32)."""
    b = math.log(bound)
    return torch.empty(shape, device=device, dtype=dtype).uniform_(-b, b).exp()
