"""The position grid of a token map. See docs/user_guides/rotary.md."""
from typing import Optional, Sequence

import torch
from torch import Tensor

GRID_NORMALIZE = (None, 'corners', 'centres')


def position_grid(hw_shape: Sequence, normalize: Optional[str] = None,
                  extent: Optional[Tensor] = None, device=None,
                  dtype: torch.dtype = torch.float32) -> Tensor:
    """Coordinates ``(x, y)`` of the cells of an ``H x W`` grid, in row-major order.

    Args:
        hw_shape (Sequence): ``(H, W)``.
        normalize (str, optional): ``None``, ``'corners'`` or ``'centres'``. Defaults to None.
        extent (Tensor, optional): ``(..., 2)`` extents for ``'centres'``. Defaults to (H, W).
        device: Where to build the grid.
        dtype (torch.dtype): Of the result and the arithmetic. Defaults to float32.

    Returns:
        Tensor: ``(H*W, 2)``, or ``extent.shape[:-1] + (H*W, 2)`` with ``extent``.

    Examples:
        >>> position_grid((2, 3)).tolist()
        [[0.0, 0.0], [1.0, 0.0], [2.0, 0.0], [0.0, 1.0], [1.0, 1.0], [2.0, 1.0]]
        >>> position_grid((1, 2), 'centres').tolist()
        [[-0.5, 0.0], [0.5, 0.0]]
        >>> position_grid((2, 4), 'centres', extent=torch.tensor([[2., 4.], [1., 2.]])).shape
        torch.Size([2, 8, 2])
    """
    if normalize not in GRID_NORMALIZE:
        raise ValueError(f'normalize must be one of {GRID_NORMALIZE}, got {normalize!r}')
    if extent is not None and normalize != 'centres':
        raise ValueError("extent applies to normalize='centres' only")
    H, W = hw_shape[0], hw_shape[1]  # not int(): traced sizes stay symbolic
    if normalize is None:
        ys = torch.arange(H, device=device, dtype=dtype)
        xs = torch.arange(W, device=device, dtype=dtype)
    elif normalize == 'corners':
        ys = torch.linspace(-1, 1, H, device=device, dtype=dtype)
        xs = torch.linspace(-1, 1, W, device=device, dtype=dtype)
    else:
        ys = torch.arange(0.5, H, device=device, dtype=dtype)
        xs = torch.arange(0.5, W, device=device, dtype=dtype)
        if extent is None:
            h = torch.full((1, ), 1., device=device, dtype=dtype) * H
            w = torch.full((1, ), 1., device=device, dtype=dtype) * W
        else:
            h = extent[..., 0:1].to(device=device, dtype=dtype)
            w = extent[..., 1:2].to(device=device, dtype=dtype)
        ys = 2 * ys / h - 1
        xs = 2 * xs / w - 1
        if extent is None:
            ys, xs = ys.reshape(-1), xs.reshape(-1)
    lead = ys.shape[:-1]
    grid_y = ys[..., :, None].expand(*lead, ys.shape[-1], xs.shape[-1])
    grid_x = xs[..., None, :].expand(*lead, ys.shape[-1], xs.shape[-1])
    return torch.stack((grid_x.reshape(*lead, -1), grid_y.reshape(*lead, -1)), dim=-1)
