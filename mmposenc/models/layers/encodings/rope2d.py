"""Axial 2D rotary position embedding (RoPE) of queries and keys."""
from typing import Optional, Sequence, Tuple

import torch

from mmposenc.registry import MODELS
from .base import BasePositionEncoding


def build_rope2d_angles(hw_shape: Sequence[int], head_dims: int, theta: float = 100.,
                        device=None, dtype=torch.float32) -> torch.Tensor:
    """Rotation angles of the axial 2D RoPE.

    The first half of the channel pairs rotates with the column ``x``, the second half
    with the row ``y``, at frequencies ``theta^(-k / (d/4))``, ``k < d/4``.

    Returns:
        Tensor: (H*W, head_dims // 2), one angle per channel pair, row-major grid order.
    """
    if head_dims % 4:
        raise ValueError(f'head_dims must be divisible by 4 for 2D RoPE, got {head_dims}')
    H, W = hw_shape[0], hw_shape[1]  # not int(): traced sizes stay symbolic (ONNX)
    n = head_dims // 4
    freqs = 1. / theta**(torch.arange(n, device=device, dtype=dtype) / n)
    y, x = torch.meshgrid(torch.arange(H, device=device, dtype=dtype),
                          torch.arange(W, device=device, dtype=dtype), indexing='ij')
    return torch.cat((x.reshape(-1, 1) * freqs, y.reshape(-1, 1) * freqs), dim=1)


def apply_rotary(x: torch.Tensor, angles: torch.Tensor) -> torch.Tensor:
    """Rotate consecutive channel pairs ``(x[2i], x[2i+1])`` of ``x`` (..., N, d) by
    ``angles`` (N, d/2)."""
    x1, x2 = x[..., 0::2], x[..., 1::2]
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2)


@MODELS.register_module()
class RoPE2d(BasePositionEncoding):
    """Axial 2D rotary position embedding (`RoPE for ViT
    <https://arxiv.org/abs/2403.13298>`_, RoPE-Axial).

    Queries and keys of the patch tokens are rotated by angles linear in their column and
    row, so ``q_i . k_j`` depends on the patches only through ``(x_j - x_i, y_j - y_i)``.
    The extra tokens are not rotated. No parameters.

    Args:
        embed_dims (int): Token channels.
        num_heads (int): Attention heads; ``embed_dims / num_heads`` must be divisible by
            4. Defaults to 1.
        num_layers (int): Unused (interface). Defaults to 1.
        num_extra_tokens (int): Leading extra tokens. Defaults to 0.
        theta (float): Frequency base. Defaults to 100 (the paper's axial setting).
        init_cfg (dict, optional): Initialization config. Defaults to None.

    Examples:
        >>> import torch
        >>> rope = RoPE2d(32, num_heads=2)
        >>> q = k = torch.rand(1, 2, 12, 16)
        >>> [t.shape for t in rope.transform_qk(q, k, (3, 4), 0)]
        [torch.Size([1, 2, 12, 16]), torch.Size([1, 2, 12, 16])]
    """

    hooks = ('transform_qk', )

    def __init__(self,
                 embed_dims: int,
                 num_heads: int = 1,
                 num_layers: int = 1,
                 num_extra_tokens: int = 0,
                 theta: float = 100.,
                 init_cfg: Optional[dict] = None):
        super().__init__(embed_dims, num_heads, num_layers, num_extra_tokens, init_cfg)
        if self.head_dims % 4:
            raise ValueError('embed_dims / num_heads must be divisible by 4 for RoPE2d, '
                             f'got {embed_dims} / {num_heads}')
        self.theta = float(theta)

    def transform_qk(self, q: torch.Tensor, k: torch.Tensor, hw_shape: Sequence[int],
                     layer_idx: int) -> Tuple[torch.Tensor, torch.Tensor]:
        self.check_grid(q, hw_shape)
        angles = build_rope2d_angles(hw_shape, self.head_dims, self.theta, q.device)
        e = self.num_extra_tokens
        q = torch.cat((q[..., :e, :], apply_rotary(q[..., e:, :], angles)), dim=-2)
        k = torch.cat((k[..., :e, :], apply_rotary(k[..., e:, :], angles)), dim=-2)
        return q, k

    def extra_repr(self) -> str:
        return super().extra_repr() + f', theta={self.theta}'
