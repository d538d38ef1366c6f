"""Axial 2D rotary position embedding (RoPE) of queries and keys."""
from typing import Optional, Sequence

import torch
from torch import Tensor

from mmposenc.registry import MODELS
from ..grid import position_grid
from .rotary import RotaryPositionEncoding, apply_rotary_pairs

#: the rotation of RoPE2d (kept under its former name)
apply_rotary = apply_rotary_pairs


def axial_freqs(head_dims: int, theta: float = 100., device=None,
                dtype=torch.float32) -> Tensor:
    """The ``d/4`` frequencies ``theta^(-k / (d/4))``, ``k < d/4``, of the axial 2D RoPE."""
    if head_dims % 4:
        raise ValueError(f'head_dims must be divisible by 4 for 2D RoPE, got {head_dims}')
    n = head_dims // 4
    return 1. / theta**(torch.arange(n, device=device, dtype=dtype) / n)


def axial_angles(coords: Tensor, freqs: Tensor) -> Tensor:
    """Angles ``(..., N, d/2)`` of coordinates ``(..., N, 2)``: half with ``x``, half with ``y``."""
    return torch.cat((coords[..., 0:1] * freqs, coords[..., 1:2] * freqs), dim=-1)


def build_rope2d_angles(hw_shape: Sequence[int], head_dims: int, theta: float = 100.,
                        device=None, dtype=torch.float32) -> Tensor:
    """Rotation angles of the axial 2D RoPE: :func:`axial_angles` at :func:`axial_freqs`.

    Returns:
        Tensor: (H*W, head_dims // 2), one angle per channel pair, row-major grid order.
    """
    freqs = axial_freqs(head_dims, theta, device, dtype)
    return axial_angles(position_grid(hw_shape, device=device, dtype=dtype), freqs)


@MODELS.register_module()
class RoPE2d(RotaryPositionEncoding):
    """Axial 2D rotary position embedding (`RoPE-Axial <https://arxiv.org/abs/2403.13298>`_).

    Half of the channel pairs rotate with the column, half with the row. It has no parameters.
    See docs/user_guides/rotary.md.

    Args:
        embed_dims (int): Token channels.
        num_heads (int): Attention heads; ``embed_dims / num_heads`` must be divisible by
            4. Defaults to 1.
        num_layers (int): Unused (interface). Defaults to 1.
        num_extra_tokens (int): Leading extra tokens. Defaults to 0.
        theta (float): Frequency base. Defaults to 100.
        cache_size (int): See :class:`RotaryPositionEncoding`. Defaults to 64.
        init_cfg (dict, optional): Initialization config. Defaults to None.

    Examples:
        >>> import torch
        >>> rope = RoPE2d(32, num_heads=2)
        >>> q = k = torch.rand(1, 2, 12, 16)
        >>> [t.shape for t in rope.transform_qk(q, k, (3, 4), 0)]
        [torch.Size([1, 2, 12, 16]), torch.Size([1, 2, 12, 16])]
    """

    def __init__(self,
                 embed_dims: int,
                 num_heads: int = 1,
                 num_layers: int = 1,
                 num_extra_tokens: int = 0,
                 theta: float = 100.,
                 cache_size: int = 64,
                 init_cfg: Optional[dict] = None):
        super().__init__(embed_dims, num_heads, num_layers, num_extra_tokens, cache_size,
                         init_cfg)
        self.theta = float(theta)

    def grid_coords(self, hw_shape, valid_hw=None, device=None) -> Tensor:
        """Patch indices (x, y) from the top-left corner (a padded image's own)."""
        return position_grid(hw_shape, device=device)[None]

    def angles_of(self, coords: Tensor, layer_idx: int) -> Tensor:
        """(1, 1, H*W, d/2): :func:`axial_angles` at :func:`axial_freqs`."""
        freqs = axial_freqs(self.head_dims, self.theta, coords.device)
        return axial_angles(coords.float(), freqs)[:, None]

    def rotate(self, x: Tensor, angles: Tensor) -> Tensor:
        return apply_rotary_pairs(x, angles)

    def extra_repr(self) -> str:
        return super().extra_repr() + f', theta={self.theta}'
