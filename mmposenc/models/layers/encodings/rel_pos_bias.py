"""2D relative position bias with clipped distances (Shaw et al. style)."""
from typing import Optional, Sequence

import torch
import torch.nn as nn

from mmposenc.registry import MODELS
from ..grid import position_grid
from .base import BasePositionEncoding


def clipped_relative_index(hw_shape: Sequence[int], max_distance: int,
                           device=None) -> torch.Tensor:
    """Index ``(clip(dy) + K) * (2K + 1) + clip(dx) + K`` of every patch pair.

    ``dy = y_j - y_i``, ``dx = x_j - x_i`` clipped to ``[-K, K]``, ``K = max_distance``.

    Returns:
        Tensor: long (H*W, H*W).
    """
    H, W = int(hw_shape[0]), int(hw_shape[1])
    grid = position_grid((H, W), device=device, dtype=torch.long)
    x, y = grid[:, 0], grid[:, 1]
    K = max_distance
    dy = (y[None, :] - y[:, None]).clamp(-K, K) + K
    dx = (x[None, :] - x[:, None]).clamp(-K, K) + K
    return dy * (2 * K + 1) + dx


@MODELS.register_module()
class RelativePositionBias2d(BasePositionEncoding):
    """2D relative position bias with clipped distances, after `Shaw et al.
    <https://arxiv.org/abs/1803.02155>`_.

    Each layer learns one scalar per head for every 2D displacement
    ``(dy, dx) in [-K, K]^2``; larger displacements share the bias of the clipped one, so
    the same table serves every grid size. Extra tokens get a zero bias.

    Args:
        embed_dims (int): Token channels.
        num_heads (int): Attention heads. Defaults to 1.
        num_layers (int): Encoder layers (one table each). Defaults to 1.
        num_extra_tokens (int): Leading extra tokens. Defaults to 0.
        max_distance (int): Clipping distance ``K`` per axis. Defaults to 7.
        init_cfg (dict, optional): Initialization config. Defaults to None (truncated
            normal, std 0.02).

    Examples:
        >>> import torch
        >>> rpb = RelativePositionBias2d(16, num_heads=2, max_distance=2)
        >>> q = k = torch.rand(1, 2, 20, 8)
        >>> rpb.attn_bias(q, k, (4, 5), 0).shape
        torch.Size([1, 2, 20, 20])
    """

    hooks = ('attn_bias', )
    trunc_normal_tables = ('bias_table', )

    def __init__(self,
                 embed_dims: int,
                 num_heads: int = 1,
                 num_layers: int = 1,
                 num_extra_tokens: int = 0,
                 max_distance: int = 7,
                 init_cfg: Optional[dict] = None):
        super().__init__(embed_dims, num_heads, num_layers, num_extra_tokens, init_cfg)
        if not isinstance(max_distance, int) or max_distance < 1:
            raise ValueError(f'max_distance must be a positive int, got {max_distance!r}')
        self.max_distance = max_distance
        self.bias_table = nn.Parameter(
            torch.zeros(num_layers, (2 * max_distance + 1)**2, num_heads))
        self.init_tables()

    def attn_bias(self, q: torch.Tensor, k: torch.Tensor, hw_shape: Sequence[int],
                  layer_idx: int) -> torch.Tensor:
        self.check_grid(q, hw_shape)
        index = clipped_relative_index(hw_shape, self.max_distance, q.device)
        bias = self.bias_table[layer_idx][index]  # (HW, HW, heads)
        return self.pad_extra_bias(bias.permute(2, 0, 1).unsqueeze(0).to(q.dtype))

    def extra_repr(self) -> str:
        return super().extra_repr() + f', max_distance={self.max_distance}'
