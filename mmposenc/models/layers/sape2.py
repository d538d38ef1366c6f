"""SaPE2: 2D semantic-aware position encoding.

`A 2D Semantic-Aware Position Encoding for Vision Transformers
<https://arxiv.org/abs/2505.09466>`_ (Chen et al., 2025). The 2D encoding is decomposed into
two 1D encodings along ``x`` (within a row) and ``y`` (within a column). Per axis:

1. gates ``g_ij = sigmoid(q_i . k_j / sqrt(d))`` between patches ``i, j`` of the same
   row (``x``) or column (``y``);
2. position values by summing gates (Eq. 10): ``p_ij = sum_{t in (c_i, c_j]} g_it`` when
   ``j`` lies after ``i`` along the axis and ``p_ij = -sum_{t in [c_j, c_i)} g_it`` when it
   lies before, so with every gate equal to 1 ``p_ij = c_j - c_i``, the plain relative
   position;
3. learnable embeddings ``e[p]`` of the integer positions ``p in [-L, L]``, linearly
   interpolated at the fractional ``p_ij`` (Eq. 11), computed the efficient way (Eq. 13-14):
   the dot products ``z[p] = q_i . e[p]`` (Q mode) or ``k_j . e[p]`` (K mode) are taken at
   the ``2L + 1`` integer positions and only these scalars are interpolated;
4. the SaPE2 vector of patch ``i`` (Eq. 12) collects its interpolated terms
   ``s_ij = z[p_ij]`` over the patches ``j`` of its row (``x``, length ``W``) or column
   (``y``, length ``H``);
5. the bias between patches ``i`` and ``n`` is the distance of their SaPE2 vectors,
   ``b_in = ||SaPE2[i] - SaPE2[n]||_2``, per axis (Eq. 15), added to the attention logits
   (Eq. 16) with the sign ``bias_sign`` (-1 by default: patches whose semantic position
   profiles are close attend to each other more, as with any distance penalty).

Where the paper text leaves a choice (signed positions, embeddings shared by the heads and
kept per layer and axis, the sign of the bias) the choice is documented on the class.
"""
from typing import Optional, Sequence, Tuple

import torch
import torch.nn as nn

from mmposenc.registry import MODELS
from .cope import interpolate_integer_positions
from .pe_base import BasePositionEncoding

MODES = ('q', 'k')


def sape2_axis_positions(gates: torch.Tensor) -> torch.Tensor:
    """Signed position values from the gates of one axis (Eq. 10).

    Args:
        gates (Tensor): ``(..., L, L)``; ``gates[..., c, t]`` is the gate of the query at
            position ``c`` of a line (row or column) for the key at position ``t``.

    Returns:
        Tensor: ``(..., L, L)`` with ``p[c, c'] = sum_{t in (c, c']} g[c, t]`` for
        ``c' > c``, ``-sum_{t in [c', c)} g[c, t]`` for ``c' < c`` and 0 on the diagonal.
    """
    csum = gates.cumsum(-1)  # S[c, t] = sum_{u <= t} g[c, u]
    diag = torch.diagonal(csum, dim1=-2, dim2=-1).unsqueeze(-1)  # S[c, c]
    gdiag = torch.diagonal(gates, dim1=-2, dim2=-1).unsqueeze(-1)  # g[c, c]
    n = gates.shape[-1]
    before = torch.ones(n, n, dtype=torch.bool, device=gates.device).tril(-1)  # c' < c
    # c' > c: S[c'] - S[c];  c' < c: -(S[c-1] - S[c'-1]) = S[c'] - g[c'] - S[c] + g[c]
    return csum - diag - before * (gates - gdiag)


def sape2_axis_vectors(q: torch.Tensor, k: torch.Tensor, pos_embed: torch.Tensor,
                       max_pos: int, mode: str = 'q', scale: float = 1.0) -> torch.Tensor:
    """SaPE2 vectors of one axis (Eq. 10-14).

    Args:
        q (Tensor): Queries ``(B, heads, lines, L, d)``, one line per row (x) or column (y).
        k (Tensor): Keys of the same shape.
        pos_embed (Tensor): ``e``, ``(2 * max_pos + 1, d)``.
        max_pos (int): Largest ``|p|`` with its own embedding.
        mode (str): ``'q'`` (``z = q_i . e``) or ``'k'`` (``z = k_j . e``).
        scale (float): Multiplies ``q . k`` inside the gate sigmoid.

    Returns:
        Tensor: ``s`` of shape ``(B, heads, lines, L, L)``; ``s[..., c, :]`` is the SaPE2
        vector of the patch at position ``c`` of the line.
    """
    gates = torch.sigmoid(q @ k.transpose(-2, -1) * scale)
    pos = sape2_axis_positions(gates) + max_pos  # table index of p_ij
    if mode == 'q':  # z[c, p] = q_c . e[p], looked up at p_{c c'} in row c
        return interpolate_integer_positions(q @ pos_embed.t(), pos)
    # K mode: z[c', p] = k_c' . e[p], looked up at p_{c c'} in row c'
    z = k @ pos_embed.t()
    return interpolate_integer_positions(z, pos.transpose(-2, -1)).transpose(-2, -1)


@MODELS.register_module()
class SaPE2(BasePositionEncoding):
    """2D semantic-aware position encoding (`SaPE2
    <https://arxiv.org/abs/2505.09466>`_) as an attention-logit bias.

    Every encoder layer has its own integer-position embeddings ``e_x, e_y`` of shape
    ``(2 * max_rel_pos + 1, head_dims)``, shared by the heads (as CoPE shares them); the
    gates and the Q/K interaction are per head. Combine it with a learnable absolute PE
    by listing both in :class:`PEViT`'s ``pos_encoding``.

    Args:
        embed_dims (int): Token channels.
        num_heads (int): Attention heads. Defaults to 1.
        num_layers (int): Encoder layers (one embedding pair each). Defaults to 1.
        num_extra_tokens (int): Leading tokens; their bias rows/columns are 0.
            Defaults to 0.
        mode (str): Which vector meets the position embeddings:

            - ``'q'``: the query, ``z_i[p] = q_i . e[p]`` (default);
            - ``'k'``: the key, ``z_j[p] = k_j . e[p]``.

        max_rel_pos (int): ``L``; position values are clamped to ``[-L, L]``.
            Defaults to 16.
        bias_sign (float): Multiplies the distances before they are added to the logits.
            Defaults to -1.
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

    def __init__(self,
                 embed_dims: int,
                 num_heads: int = 1,
                 num_layers: int = 1,
                 num_extra_tokens: int = 0,
                 mode: str = 'q',
                 max_rel_pos: int = 16,
                 bias_sign: float = -1.,
                 init_cfg: Optional[dict] = None):
        super().__init__(embed_dims, num_heads, num_layers, num_extra_tokens, init_cfg)
        if mode not in MODES:
            raise ValueError(f'mode must be one of {MODES}, got {mode!r}')
        if not isinstance(max_rel_pos, int) or max_rel_pos < 1:
            raise ValueError(f'max_rel_pos must be a positive int, got {max_rel_pos!r}')
        self.mode = mode
        self.max_rel_pos = max_rel_pos
        self.bias_sign = float(bias_sign)
        shape = (num_layers, 2 * max_rel_pos + 1, self.head_dims)
        self.pos_embed_x = nn.Parameter(torch.zeros(shape))
        self.pos_embed_y = nn.Parameter(torch.zeros(shape))
        self._init_embeddings()

    def _init_embeddings(self):
        nn.init.trunc_normal_(self.pos_embed_x, std=0.02)
        nn.init.trunc_normal_(self.pos_embed_y, std=0.02)

    def init_weights(self):
        if self.init_cfg is not None:
            super().init_weights()
        else:
            self._init_embeddings()

    def sape2_vectors(self, q: torch.Tensor, k: torch.Tensor, hw_shape: Sequence[int],
                      layer_idx: int) -> Tuple[torch.Tensor, torch.Tensor]:
        """SaPE2 vectors of the patch tokens, ``(B, heads, H*W, W)`` and ``(..., H)``."""
        self.check_grid(q, hw_shape)
        H, W = int(hw_shape[0]), int(hw_shape[1])
        B, h, _, d = q.shape
        qp = q[:, :, self.num_extra_tokens:].reshape(B, h, H, W, d)
        kp = k[:, :, self.num_extra_tokens:].reshape(B, h, H, W, d)
        scale = self.head_dims**-0.5
        s_x = sape2_axis_vectors(qp, kp, self.pos_embed_x[layer_idx], self.max_rel_pos,
                                 self.mode, scale)  # (B, h, H, W, W)
        s_y = sape2_axis_vectors(qp.transpose(2, 3), kp.transpose(2, 3),
                                 self.pos_embed_y[layer_idx], self.max_rel_pos, self.mode,
                                 scale)  # (B, h, W, H, H): lines are columns
        return s_x.reshape(B, h, H * W, W), s_y.transpose(2, 3).reshape(B, h, H * W, H)

    def attn_bias(self, q: torch.Tensor, k: torch.Tensor, hw_shape: Sequence[int],
                  layer_idx: int) -> torch.Tensor:
        s_x, s_y = self.sape2_vectors(q, k, hw_shape, layer_idx)
        # Eq. 15, both axes; exact differences (the matmul shortcut of cdist is off by
        # ~1e-3 on the diagonal, where the distance must be 0)
        exact = 'donot_use_mm_for_euclid_dist'
        bias = (torch.cdist(s_x, s_x, compute_mode=exact) +
                torch.cdist(s_y, s_y, compute_mode=exact))
        return self.pad_extra_bias(self.bias_sign * bias)

    def extra_repr(self) -> str:
        return (super().extra_repr() + f', mode={self.mode!r}, '
                f'max_rel_pos={self.max_rel_pos}, bias_sign={self.bias_sign}')
