"""Resampling a learnable position embedding to another token grid (the one implementation)."""
from typing import Sequence

import torch
import torch.nn.functional as F


def resize_pos_embed(pos_embed: torch.Tensor, src_shape: Sequence[int],
                     dst_shape: Sequence[int], mode: str = 'bicubic',
                     num_extra_tokens: int = 1) -> torch.Tensor:
    """Resize a ``(1, extra + h*w, C)`` position embedding from ``src_shape`` to ``dst_shape``.

    Extra tokens are kept; the grid is interpolated in float32 as DeiT and mmpretrain do.

    Args:
        pos_embed (Tensor): ``(1, extra + h*w, C)``.
        src_shape (Sequence[int]): ``(h, w)`` of the embedding's grid.
        dst_shape (Sequence[int]): ``(h', w')`` of the grid to resize to.
        mode (str): Mode of :func:`torch.nn.functional.interpolate`. Defaults to 'bicubic'.
        num_extra_tokens (int): Leading embeddings not on the grid (a class token).
            Defaults to 1.

    Returns:
        Tensor: ``(1, extra + h'*w', C)``; ``pos_embed`` itself when the grids agree.

    Examples:
        >>> resize_pos_embed(torch.rand(1, 1 + 4 * 4, 8), (4, 4), (6, 3), num_extra_tokens=1).shape
        torch.Size([1, 19, 8])
    """
    if not torch.jit.is_tracing():
        src_shape = tuple(int(s) for s in src_shape)
        dst_shape = tuple(int(s) for s in dst_shape)
    if tuple(src_shape) == tuple(dst_shape):
        return pos_embed
    _, length, channels = pos_embed.shape
    if length != num_extra_tokens + src_shape[0] * src_shape[1]:
        raise ValueError(f'pos_embed has {length} tokens, expected {num_extra_tokens} + '
                         f'{src_shape[0]} * {src_shape[1]} for its {tuple(src_shape)} grid')
    extra = pos_embed[:, :num_extra_tokens]
    grid = pos_embed[:, num_extra_tokens:].reshape(1, src_shape[0], src_shape[1], channels)
    align = False if mode in ('bilinear', 'bicubic') else None
    grid = F.interpolate(grid.permute(0, 3, 1, 2).float(), size=tuple(dst_shape), mode=mode,
                         align_corners=align)
    grid = grid.flatten(2).transpose(1, 2).to(pos_embed.dtype)
    return torch.cat((extra, grid), dim=1)
