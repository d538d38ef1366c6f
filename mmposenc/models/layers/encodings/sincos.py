"""Fixed 2D sine-cosine position embedding."""
from typing import Optional, Sequence

import torch

from mmposenc.registry import MODELS
from ..grid import position_grid
from .base import BasePositionEncoding


def build_2d_sincos_embedding(hw_shape: Sequence[int], embed_dims: int,
                              temperature: float = 10000., device=None,
                              dtype=torch.float32) -> torch.Tensor:
    """``[sin(x w), cos(x w), sin(y w), cos(y w)]`` for the integer grid positions.

    ``w_k = temperature^(-k / (C/4))``, ``k < C/4``; ``x`` is the column and ``y`` the row.

    Returns:
        Tensor: (H*W, C), rows in row-major grid order.
    """
    if embed_dims % 4:
        raise ValueError(f'embed_dims must be divisible by 4, got {embed_dims}')
    H, W = int(hw_shape[0]), int(hw_shape[1])
    pos_dim = embed_dims // 4
    omega = 1. / temperature**(torch.arange(pos_dim, device=device, dtype=dtype) / pos_dim)
    grid = position_grid((H, W), device=device, dtype=dtype)
    out_x = grid[:, 0:1] * omega
    out_y = grid[:, 1:2] * omega
    return torch.cat((out_x.sin(), out_x.cos(), out_y.sin(), out_y.cos()), dim=1)


@MODELS.register_module()
class SinCos2dPE(BasePositionEncoding):
    """Fixed 2D sine-cosine embedding (`MoCo v3 <https://arxiv.org/abs/2104.02057>`_, MAE).

    A quarter of the channels each hold ``sin``/``cos`` of the column and the row index;
    on a larger grid the positions simply continue (no resizing). Extra tokens get zero.

    Args:
        embed_dims (int): Token channels, divisible by 4.
        num_heads (int): Unused (interface). Defaults to 1.
        num_layers (int): Unused (interface). Defaults to 1.
        num_extra_tokens (int): Leading extra tokens. Defaults to 0.
        temperature (float): Base of the frequencies. Defaults to 10000.
        init_cfg (dict, optional): Initialization config. Defaults to None.

    Examples:
        >>> import torch
        >>> pe = SinCos2dPE(16)
        >>> pe.add_to_tokens(torch.zeros(1, 12, 16), (3, 4)).shape
        torch.Size([1, 12, 16])
    """

    hooks = ('add_to_tokens', )

    def __init__(self,
                 embed_dims: int,
                 num_heads: int = 1,
                 num_layers: int = 1,
                 num_extra_tokens: int = 0,
                 temperature: float = 10000.,
                 init_cfg: Optional[dict] = None):
        super().__init__(embed_dims, num_heads, num_layers, num_extra_tokens, init_cfg)
        if embed_dims % 4:
            raise ValueError(f'embed_dims must be divisible by 4 for SinCos2dPE, '
                             f'got {embed_dims}')
        self.temperature = float(temperature)

    def add_to_tokens(self, x: torch.Tensor, hw_shape: Sequence[int]) -> torch.Tensor:
        self.check_grid(x, hw_shape)
        pe = build_2d_sincos_embedding(hw_shape, self.embed_dims, self.temperature,
                                       x.device, x.dtype)
        pe = torch.nn.functional.pad(pe, (0, 0, self.num_extra_tokens, 0))
        return x + pe

    def extra_repr(self) -> str:
        return super().extra_repr() + f', temperature={self.temperature}'
