"""RoPE-Mixed: 2D rotary position embedding with learnable, mixed-axis frequencies."""
import math
from typing import Optional

import torch
import torch.nn as nn
from torch import Tensor

from mmposenc.registry import MODELS
from ..grid import position_grid
from .rotary import RotaryPositionEncoding, apply_rotary_pairs


def init_mixed_freqs(head_dims: int, num_heads: int, num_layers: int = 1, theta: float = 10.,
                     rotate: bool = True, generator: Optional[torch.Generator] = None) -> Tensor:
    """RoPE-Mixed's initial frequencies, one random direction per layer and head.

    See docs/user_guides/rotary.md.

    Args:
        head_dims (int): Channels per head ``d`` (divisible by 4).
        num_heads (int): Heads.
        num_layers (int): Layers, each with its own frequencies. Defaults to 1.
        theta (float): Frequency base. Defaults to 10 (the paper's mixed setting).
        rotate (bool): Random direction per head. Defaults to True.
        generator (torch.Generator, optional): For the directions.

    Returns:
        Tensor: (2, num_layers, num_heads, d/2): ``[0]`` the x-frequencies, ``[1]`` the y ones.
    """
    n = head_dims // 4
    mag = 1. / theta**(torch.arange(n, dtype=torch.float32) / n)
    if rotate:
        a = torch.rand(num_layers, num_heads, 1, generator=generator) * 2 * math.pi
    else:
        a = torch.zeros(num_layers, num_heads, 1)
    fx = torch.cat((mag * torch.cos(a), mag * torch.cos(a + math.pi / 2)), dim=-1)
    fy = torch.cat((mag * torch.sin(a), mag * torch.sin(a + math.pi / 2)), dim=-1)
    return torch.stack((fx, fy))


def mixed_angles(freqs: Tensor, coords: Tensor) -> Tensor:
    """Angles ``x f_x + y f_y`` of every head and channel pair, in float32.

    Args:
        freqs (Tensor): (2, heads, d/2), one layer's frequencies.
        coords (Tensor): (B or 1, N, 2) as (x, y).

    Returns:
        Tensor: (B or 1, heads, N, d/2).
    """
    f = freqs.float()
    c = coords.float()
    return (c[:, None, :, 0:1] * f[0][None, :, None, :] +
            c[:, None, :, 1:2] * f[1][None, :, None, :])


@MODELS.register_module()
class RoPEMixed(RotaryPositionEncoding):
    """2D rotary position embedding with learnt frequencies that mix the axes (`RoPE-Mixed
    <https://arxiv.org/abs/2403.13298>`_).

    Channel pair ``t`` of head ``h`` in layer ``l`` at column ``x`` and row ``y`` rotates by
    ``x f_x[l, h, t] + y f_y[l, h, t]``. Exclude ``freqs`` from weight decay:
    ``custom_keys={'.freqs': dict(decay_mult=0.)}``. See docs/user_guides/rotary.md.

    Args:
        embed_dims (int): Token channels.
        num_heads (int): Attention heads; ``embed_dims / num_heads`` divisible by 4.
            Defaults to 1.
        num_layers (int): Layers, each with its own frequencies. Defaults to 1.
        num_extra_tokens (int): Leading tokens left unrotated (class token). Defaults to 0.
        theta (float): Frequency base. Defaults to 10.
        rotate (bool): Random initial direction per head and layer. Defaults to True.
        cache_size (int): See :class:`RotaryPositionEncoding`. Defaults to 64.
        init_cfg (dict, optional): Initialization config. Defaults to None.

    Examples:
        >>> import torch
        >>> rope = RoPEMixed(32, num_heads=2, num_layers=3, num_extra_tokens=1)
        >>> rope.freqs.shape  # (x / y, layers, heads, channel pairs)
        torch.Size([2, 3, 2, 8])
        >>> q = k = torch.rand(1, 2, 1 + 12, 16)
        >>> [t.shape for t in rope.transform_qk(q, k, (3, 4), layer_idx=2)]
        [torch.Size([1, 2, 13, 16]), torch.Size([1, 2, 13, 16])]
    """

    angle_sources = ('freqs', )
    per_layer = True

    def __init__(self,
                 embed_dims: int,
                 num_heads: int = 1,
                 num_layers: int = 1,
                 num_extra_tokens: int = 0,
                 theta: float = 10.,
                 rotate: bool = True,
                 cache_size: int = 64,
                 init_cfg: Optional[dict] = None):
        super().__init__(embed_dims, num_heads, num_layers, num_extra_tokens, cache_size,
                         init_cfg)
        self.theta = float(theta)
        self.rotate_init = bool(rotate)
        #: (2, num_layers, num_heads, head_dims/2): x- and y-frequencies
        self.freqs = nn.Parameter(
            init_mixed_freqs(self.head_dims, num_heads, num_layers, self.theta, rotate))

    def reset_parameters(self, generator: Optional[torch.Generator] = None) -> None:
        """Draw the frequencies again (:func:`init_mixed_freqs`)."""
        with torch.no_grad():
            self.freqs.copy_(init_mixed_freqs(self.head_dims, self.num_heads, self.num_layers,
                                              self.theta, self.rotate_init, generator))

    def grid_coords(self, hw_shape, valid_hw=None, device=None) -> Tensor:
        """Patch indices (x, y) from the top-left corner (a padded image's own)."""
        return position_grid(hw_shape, device=device if device is not None else
                             self.freqs.device)[None]

    def angles_of(self, coords: Tensor, layer_idx: int) -> Tensor:
        return mixed_angles(self.freqs[:, layer_idx], coords)

    def rotate(self, x: Tensor, angles: Tensor) -> Tensor:
        return apply_rotary_pairs(x, angles)

    def extra_repr(self) -> str:
        return super().extra_repr() + f', theta={self.theta}, rotate={self.rotate_init}'
