"""Learnable absolute position embedding, resized bicubically to other grids."""
from typing import Optional, Sequence

import torch
import torch.nn as nn

from mmposenc.registry import MODELS
from ...utils.pos_embed import resize_pos_embed
from .base import BasePositionEncoding


@MODELS.register_module()
class LearnableAbsolutePE(BasePositionEncoding):
    """Learnable absolute position embedding of `ViT <https://arxiv.org/abs/2010.11929>`_.

    One embedding per patch of a ``grid_size`` grid (and per extra token) is added to the
    tokens; on another grid the patch embeddings are resized with ``interpolate_mode``
    (bicubic, as in DeiT/mmpretrain) while the extra-token embeddings are kept.

    Args:
        embed_dims (int): Token channels.
        num_heads (int): Unused (interface). Defaults to 1.
        num_layers (int): Unused (interface). Defaults to 1.
        num_extra_tokens (int): Leading extra tokens with their own embedding.
            Defaults to 0.
        grid_size (Sequence[int] | int): The trained grid ``(H, W)``. Defaults to 14.
        interpolate_mode (str): Mode of ``F.interpolate``. Defaults to 'bicubic'.
        init_cfg (dict, optional): Initialization config. Defaults to None (truncated
            normal, std 0.02).

    Examples:
        >>> import torch
        >>> pe = LearnableAbsolutePE(16, num_extra_tokens=1, grid_size=(4, 4))
        >>> pe.add_to_tokens(torch.rand(2, 1 + 6 * 5, 16), (6, 5)).shape
        torch.Size([2, 31, 16])
    """

    hooks = ('add_to_tokens', )
    trunc_normal_tables = ('pos_embed', )

    def __init__(self,
                 embed_dims: int,
                 num_heads: int = 1,
                 num_layers: int = 1,
                 num_extra_tokens: int = 0,
                 grid_size=14,
                 interpolate_mode: str = 'bicubic',
                 init_cfg: Optional[dict] = None):
        super().__init__(embed_dims, num_heads, num_layers, num_extra_tokens, init_cfg)
        if isinstance(grid_size, int):
            grid_size = (grid_size, grid_size)
        if len(grid_size) != 2 or min(grid_size) < 1:
            raise ValueError(f'grid_size must be an int or (H, W) >= 1, got {grid_size!r}')
        self.grid_size = tuple(int(g) for g in grid_size)
        self.interpolate_mode = interpolate_mode
        n = num_extra_tokens + self.grid_size[0] * self.grid_size[1]
        self.pos_embed = nn.Parameter(torch.zeros(1, n, embed_dims))
        self.init_tables()

    def add_to_tokens(self, x: torch.Tensor, hw_shape: Sequence[int]) -> torch.Tensor:
        self.check_grid(x, hw_shape)
        e = self.num_extra_tokens
        return x + resize_pos_embed(self.pos_embed, self.grid_size, hw_shape,
                                    self.interpolate_mode, num_extra_tokens=e)

    def extra_repr(self) -> str:
        return (super().extra_repr() + f', grid_size={self.grid_size}, '
                f'interpolate_mode={self.interpolate_mode!r}')
