"""SaPE2: 2D semantic-aware position encoding. See docs/methods/sape2.md."""
from typing import Optional, Sequence, Tuple

import torch
import torch.nn as nn

from mmposenc.registry import MODELS
from .base import BasePositionEncoding
from .cope import interpolate_integer_positions

MODES = ('q', 'k')


def sape2_axis_positions(gates: torch.Tensor) -> torch.Tensor:
    """Positions from the gates of one axis (Eq. 10): suffix sums over the line.

    Args:
        gates (Tensor): ``(..., L, L)``; ``gates[..., i, j]`` gates patch ``j`` for ``i``.

    Returns:
        Tensor: ``(..., L, L)``, ``p[..., i, m] = sum_{j >= m} gates[..., i, j]``, unclamped.
    """
    return gates.flip(-1).cumsum(-1).flip(-1)


def sape2_axis_vectors(q: torch.Tensor, k: torch.Tensor, pos_embed: torch.Tensor,
                       mode: str = 'k', scale: float = 1.0) -> torch.Tensor:
    """SaPE2 vectors of one axis (Eq. 9-14).

    Args:
        q (Tensor): Queries ``(..., L, d)``, one line (row or column) per leading index.
        k (Tensor): Keys of the same shape.
        pos_embed (Tensor): ``e``, ``(M + 1, d)``; positions are clamped to ``M``.
        mode (str): ``'q'`` for ``z_i = q_i . e``, ``'k'`` for ``z_i = k_i . e``. Defaults to 'k'.
        scale (float): Multiplies ``q . k`` inside the gate sigmoid. Defaults to 1.

    Returns:
        Tensor: ``(..., L, L)``; row ``i`` is the SaPE2 vector ``z_i[p_im]`` of patch ``i``.
    """
    if mode not in MODES:
        raise ValueError(f'mode must be one of {MODES}, got {mode!r}')
    gates = torch.sigmoid((q * scale) @ k.transpose(-2, -1))
    pos = sape2_axis_positions(gates)  # clamped to [0, M] by the interpolation
    z = (q if mode == 'q' else k) @ pos_embed.t()  # (..., L, M + 1): z[i, p] = v_i . e[p]
    return interpolate_integer_positions(z, pos)


@MODELS.register_module()
class SaPE2(BasePositionEncoding):
    """2D semantic-aware position encoding (`SaPE2 <https://arxiv.org/abs/2505.09466>`_).

    It adds a bias to the attention logits. Each encoder layer has its own position embeddings
    ``e_x, e_y``; gates and products are per head. See docs/methods/sape2.md.

    Args:
        embed_dims (int): Token channels.
        num_heads (int): Attention heads. Defaults to 1.
        num_layers (int): Encoder layers (one embedding pair each). Defaults to 1.
        num_extra_tokens (int): Leading tokens; their bias rows and columns are 0.
            Defaults to 0.
        mode (str): ``'k'`` uses the patch's key, ``z_i[p] = k_i . e[p]``; ``'q'`` its query
            (Eq. 12). Defaults to 'k'.
        max_pos (int): ``M``: embeddings of the integer positions ``0 .. M``. Larger
            positions are clamped; ``M >= max(H, W)`` never clamps. Defaults to 16.
        scale_bias (bool): False adds the bias to the scaled logits, ``q.k / sqrt(d) + b``.
            True gives Eq. 16, ``(q.k + b) / sqrt(d)``. Defaults to False.
        init_cfg (dict, optional): Initialization config. Defaults to None (truncated
            normal, std 0.02).

    Examples:
        >>> import torch
        >>> pe = SaPE2(64, num_heads=4, num_layers=2, num_extra_tokens=1)
        >>> q = k = torch.rand(2, 4, 1 + 6 * 5, 16)
        >>> pe.attn_bias(q, k, (6, 5), layer_idx=1).shape
        torch.Size([2, 4, 31, 31])
    """

    hooks = ('attn_bias', )
    trunc_normal_tables = ('pos_embed_x', 'pos_embed_y')

    def __init__(self,
                 embed_dims: int,
                 num_heads: int = 1,
                 num_layers: int = 1,
                 num_extra_tokens: int = 0,
                 mode: str = 'k',
                 max_pos: int = 16,
                 scale_bias: bool = False,
                 init_cfg: Optional[dict] = None):
        super().__init__(embed_dims, num_heads, num_layers, num_extra_tokens, init_cfg)
        if mode not in MODES:
            raise ValueError(f'mode must be one of {MODES}, got {mode!r}')
        if not isinstance(max_pos, int) or isinstance(max_pos, bool) or max_pos < 1:
            raise ValueError(f'max_pos must be a positive int, got {max_pos!r}')
        self.mode = mode
        self.max_pos = max_pos
        self.scale_bias = bool(scale_bias)
        shape = (num_layers, max_pos + 1, self.head_dims)
        self.pos_embed_x = nn.Parameter(torch.zeros(shape))
        self.pos_embed_y = nn.Parameter(torch.zeros(shape))
        self.init_tables()

    def sape2_vectors(self, q: torch.Tensor, k: torch.Tensor, hw_shape: Sequence[int],
                      layer_idx: int) -> Tuple[torch.Tensor, torch.Tensor]:
        """The SaPE2 vectors ``x`` ``(B, heads, H*W, W)`` and ``y`` ``(B, heads, H*W, H)``."""
        self.check_grid(q, hw_shape)
        H, W = int(hw_shape[0]), int(hw_shape[1])
        B, h, _, d = q.shape
        qp = q[:, :, self.num_extra_tokens:].reshape(B, h, H, W, d)
        kp = k[:, :, self.num_extra_tokens:].reshape(B, h, H, W, d)
        scale = self.head_dims**-0.5
        s_x = sape2_axis_vectors(qp, kp, self.pos_embed_x[layer_idx], self.mode,
                                 scale)  # (B, h, H, W, W): lines are rows
        s_y = sape2_axis_vectors(qp.transpose(2, 3), kp.transpose(2, 3),
                                 self.pos_embed_y[layer_idx], self.mode,
                                 scale)  # (B, h, W, H, H): lines are columns
        return s_x.reshape(B, h, H * W, W), s_y.transpose(2, 3).reshape(B, h, H * W, H)

    def attn_bias(self, q: torch.Tensor, k: torch.Tensor, hw_shape: Sequence[int],
                  layer_idx: int) -> torch.Tensor:
        s_x, s_y = self.sape2_vectors(q, k, hw_shape, layer_idx)
        # Eq. 15, both axes, with exact distances (docs/methods/sape2.md)
        exact = 'donot_use_mm_for_euclid_dist'
        bias = (torch.cdist(s_x, s_x, compute_mode=exact) +
                torch.cdist(s_y, s_y, compute_mode=exact))
        if self.scale_bias:  # Eq. 16: (q.k + b) / sqrt(d)
            bias = bias * self.head_dims**-0.5
        return self.pad_extra_bias(bias)

    def extra_repr(self) -> str:
        return (super().extra_repr() + f', mode={self.mode!r}, max_pos={self.max_pos}, '
                f'scale_bias={self.scale_bias}')
