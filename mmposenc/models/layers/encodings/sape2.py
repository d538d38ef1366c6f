"""SaPE2: 2D semantic-aware position encoding.

`A 2D Semantic-Aware Position Encoding for Vision Transformers
<https://arxiv.org/abs/2505.09466>`_ (Chen et al., 2025), Sec. 3 and the code of its Appendix D.
The 2D encoding is two 1D encodings, along ``x`` (within a row) and ``y`` (within a column).
Per axis and head, for the ``L`` patches of one line:

1. gates ``g_ij = sigmoid(q_i . k_j / sqrt(d))`` between the patches ``i, j`` of the line
   (Eq. 9; the ``1 / sqrt(d)`` is that of Appendix D, which gates the scaled logits);
2. positions by a suffix sum of ``i``'s gates (Eq. 10): ``p_im = sum_{j: x_m <= x_j} g_ij``,
   the sum of ``i``'s gates from ``m`` to the end of the line (Appendix D: flip, cumsum,
   flip), clamped to ``M`` (Appendix D: ``npos_max - 1``); with every gate 1,
   ``p_im = L - x_m + 1`` (1-based ``x``) whatever ``i`` is;
3. learnable embeddings ``e[p]`` of the integer positions ``p = 0 .. M`` (Eq. 11), used the
   efficient way (Eq. 13-14): ``z_i[p] = v_i . e[p]`` at the integers, then linear
   interpolation at ``p_im``; ``v_i = q_i`` in Q mode (Eq. 12) and the patch's own key
   ``v_i = k_i`` in K mode (``z~_ir = k_i . e[p_imr]``, Sec. 3);
4. the SaPE2 vector of patch ``i`` is ``[z_i[p_im] for m in its line]`` (Eq. 12; length
   ``W`` for ``x``, ``H`` for ``y``);
5. the bias between any two patches ``i`` and ``n`` (not only of one line) is the distance of
   their vectors, ``b_in = ||SaPE2[i] - SaPE2[n]||_2`` per axis (Eq. 15), and the attention
   logit is ``q_i . k_n / sqrt(d) + b^x_in + b^y_in`` (Appendix D returns
   ``pe_res_x + pe_res_y``, to be added to the attention logits). Eq. 16 writes
   ``(q_i . k_n + b^x_in + b^y_in) / sqrt(d)``; ``scale_bias=True`` gives that placement.

Beyond Appendix D (which reshapes with ``H = W = sqrt(N)`` and has no class token), any
``H x W`` grid works and leading extra tokens get a zero bias.
"""
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
        gates (Tensor): ``(..., L, L)``; ``gates[..., i, j]`` is the gate of the patch at
            position ``i`` of a line (row or column) for the patch at position ``j``.

    Returns:
        Tensor: ``(..., L, L)`` with ``p[..., i, m] = sum_{j >= m} gates[..., i, j]``
        (not clamped).
    """
    return gates.flip(-1).cumsum(-1).flip(-1)


def sape2_axis_vectors(q: torch.Tensor, k: torch.Tensor, pos_embed: torch.Tensor,
                       mode: str = 'k', scale: float = 1.0) -> torch.Tensor:
    """SaPE2 vectors of one axis (Eq. 9-14).

    Args:
        q (Tensor): Queries ``(..., L, d)``, one line (row or column) per leading index.
        k (Tensor): Keys of the same shape.
        pos_embed (Tensor): ``e``, ``(M + 1, d)``; positions are clamped to ``M``.
        mode (str): ``'q'`` (``z_i = q_i . e``) or ``'k'`` (``z_i = k_i . e``).
            Defaults to 'k'.
        scale (float): Multiplies ``q . k`` inside the gate sigmoid. Defaults to 1.

    Returns:
        Tensor: ``s`` of shape ``(..., L, L)``; ``s[..., i, :]`` is the SaPE2 vector of
        the patch at position ``i`` of the line, ``s[..., i, m] = z_i[p_im]``.
    """
    if mode not in MODES:
        raise ValueError(f'mode must be one of {MODES}, got {mode!r}')
    gates = torch.sigmoid((q * scale) @ k.transpose(-2, -1))
    pos = sape2_axis_positions(gates)  # clamped to [0, M] by the interpolation
    z = (q if mode == 'q' else k) @ pos_embed.t()  # (..., L, M + 1): z[i, p] = v_i . e[p]
    return interpolate_integer_positions(z, pos)


@MODELS.register_module()
class SaPE2(BasePositionEncoding):
    """2D semantic-aware position encoding (`SaPE2
    <https://arxiv.org/abs/2505.09466>`_) as an attention-logit bias.

    Every encoder layer has its own integer-position embeddings ``e_x, e_y`` of shape
    ``(max_pos + 1, head_dims)`` (Appendix D: one ``SaPE_unit`` per axis with a
    ``(1, head_dim, npos_max)`` table broadcast over the heads); the gates and the Q/K
    products are per head. The paper's best setting, SaPE2 (K) + APE (SaPE2 Table 2), is
    ``pos_encoding=[dict(type='mmposenc.LearnableAbsolutePE'), dict(type='mmposenc.SaPE2')]``
    in :class:`PEViT`.

    Args:
        embed_dims (int): Token channels.
        num_heads (int): Attention heads. Defaults to 1.
        num_layers (int): Encoder layers (one embedding pair each). Defaults to 1.
        num_extra_tokens (int): Leading tokens; their bias rows/columns are 0.
            Defaults to 0.
        mode (str): Which vector of patch ``i`` meets the position embeddings:

            - ``'k'``: its key, ``z_i[p] = k_i . e[p]`` (default; SaPE2 (K), the better
              mode in SaPE2 Table 2: 93.98 vs 90.17 top-1 with APE on CIFAR-10);
            - ``'q'``: its query, ``z_i[p] = q_i . e[p]`` (SaPE2 (Q), Eq. 12).

        max_pos (int): ``M``: embeddings for the integer positions ``0 .. M`` (Appendix D's
            ``npos_max = M + 1``); positions above ``M`` are clamped. A position is a sum
            of at most ``L`` gates, ``L`` the line length, so ``M >= max(H, W)`` never
            clamps. Defaults to 16.
        scale_bias (bool): Where the bias enters the logits. False (default): added to the
            scaled logits, ``q.k / sqrt(d) + b``, as Appendix D's module output is added to
            the attention logits (the way CoPE, whose code Appendix D follows, adds its
            term after the ``1 / sqrt(d)``). True: ``(q.k + b) / sqrt(d)``, Eq. 16.
        init_cfg (dict, optional): Initialization config. Defaults to None (truncated
            normal, std 0.02, as Appendix D).

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
        """SaPE2 vectors of the patch tokens (Eq. 12), ``x``: ``(B, heads, H*W, W)`` and
        ``y``: ``(B, heads, H*W, H)``, patches in row-major order."""
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
        # Eq. 15, both axes; exact differences (the matmul shortcut of cdist is off by
        # ~1e-3 on the diagonal, where the distance must be 0)
        exact = 'donot_use_mm_for_euclid_dist'
        bias = (torch.cdist(s_x, s_x, compute_mode=exact) +
                torch.cdist(s_y, s_y, compute_mode=exact))
        if self.scale_bias:  # Eq. 16: (q.k + b) / sqrt(d)
            bias = bias * self.head_dims**-0.5
        return self.pad_extra_bias(bias)

    def extra_repr(self) -> str:
        return (super().extra_repr() + f', mode={self.mode!r}, max_pos={self.max_pos}, '
                f'scale_bias={self.scale_bias}')
