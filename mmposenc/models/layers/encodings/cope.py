"""CoPE: contextual position encoding, made bidirectional for image tokens."""
from typing import Optional, Sequence

import torch
import torch.nn as nn

from mmposenc.registry import MODELS
from .base import BasePositionEncoding


def interpolate_integer_positions(z: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    """Linear interpolation of values known at the integer positions ``0 .. P-1``.

    Args:
        z (Tensor): ``(..., M, P)``; ``z[..., m, p]`` is row ``m``'s value at position ``p``.
        pos (Tensor): Fractional positions ``(..., M, K)``, clamped to ``[0, P - 1]``;
            the leading dimensions must broadcast to ``z``'s.

    Returns:
        Tensor: ``(..., M, K)``: ``(p - floor p) z[ceil p] + (1 - p + floor p) z[floor p]``
        with ``p = pos[..., m, k]`` looked up in row ``m``. Only gathers, so the backward
        pass never materialises a ``(..., M, K, P)`` tensor.
    """
    P = z.shape[-1]
    pos = pos.clamp(0, P - 1)
    lo = pos.floor()
    w = pos - lo
    lo = lo.long()
    hi = (lo + 1).clamp(max=P - 1)
    lead = torch.broadcast_shapes(z.shape[:-1], pos.shape[:-1])
    z = z.expand(lead + (P, ))
    lo, hi, w = (t.expand(lead + pos.shape[-1:]) for t in (lo, hi, w))
    return w * z.gather(-1, hi) + (1 - w) * z.gather(-1, lo)


def cope_positions(gates: torch.Tensor):
    """Contextual positions of every query-key pair from the gates ``(..., N, N)``.

    Returns:
        tuple[Tensor, Tensor]: ``p_past[i, j] = sum_{t=j}^{i} g[i, t]`` (meaningful for
        ``j <= i``) and ``p_future[i, j] = sum_{t=i}^{j} g[i, t]`` (for ``j >= i``).
    """
    n = gates.shape[-1]
    ones = torch.ones(n, n, dtype=torch.bool, device=gates.device)
    past = gates * ones.tril()
    future = gates * ones.triu()
    p_past = past.flip(-1).cumsum(-1).flip(-1)
    p_future = future.cumsum(-1)
    return p_past, p_future


@MODELS.register_module()
class CoPE(BasePositionEncoding):
    """Contextual position encoding (`CoPE <https://arxiv.org/abs/2405.18719>`_,
    Golovneva et al., 2024) as an attention-logit bias over the row-major patch sequence.

    Gates ``g_ij = sigmoid(q_i . k_j / sqrt(d))`` count the tokens between query and key;
    the position ``p_ij`` is their sum and the logit gets ``q_i . e[p_ij]`` with ``e``
    linearly interpolated between learnable integer-position embeddings (computed as
    ``z_i[p] = q_i . e[p]`` at the integers, then interpolated). CoPE was published for
    causal language models; here every query also looks forward: keys before (``j <= i``)
    and after (``j > i``) the query use ``sum_{t=j}^{i}`` and ``sum_{t=i}^{j}`` and their own
    embedding tables. Embeddings are shared by the heads and kept per layer. Extra tokens
    get a zero bias.

    Args:
        embed_dims (int): Token channels.
        num_heads (int): Attention heads. Defaults to 1.
        num_layers (int): Encoder layers (one pair of tables each). Defaults to 1.
        num_extra_tokens (int): Leading extra tokens. Defaults to 0.
        npos_max (int): Integer positions ``0 .. npos_max - 1``; larger ones are clamped.
            Defaults to 64.
        init_cfg (dict, optional): Initialization config. Defaults to None (truncated
            normal, std 0.02).

    Examples:
        >>> import torch
        >>> cope = CoPE(32, num_heads=2, npos_max=16)
        >>> q = k = torch.rand(2, 2, 12, 16)
        >>> cope.attn_bias(q, k, (3, 4), 0).shape
        torch.Size([2, 2, 12, 12])
    """

    hooks = ('attn_bias', )
    trunc_normal_tables = ('pos_embed_past', 'pos_embed_future')

    def __init__(self,
                 embed_dims: int,
                 num_heads: int = 1,
                 num_layers: int = 1,
                 num_extra_tokens: int = 0,
                 npos_max: int = 64,
                 init_cfg: Optional[dict] = None):
        super().__init__(embed_dims, num_heads, num_layers, num_extra_tokens, init_cfg)
        if not isinstance(npos_max, int) or npos_max < 2:
            raise ValueError(f'npos_max must be an int >= 2, got {npos_max!r}')
        self.npos_max = npos_max
        shape = (num_layers, npos_max, self.head_dims)
        self.pos_embed_past = nn.Parameter(torch.zeros(shape))
        self.pos_embed_future = nn.Parameter(torch.zeros(shape))
        self.init_tables()

    def attn_bias(self, q: torch.Tensor, k: torch.Tensor, hw_shape: Sequence[int],
                  layer_idx: int) -> torch.Tensor:
        self.check_grid(q, hw_shape)
        e = self.num_extra_tokens
        qp, kp = q[..., e:, :], k[..., e:, :]
        gates = torch.sigmoid(qp @ kp.transpose(-2, -1) * self.head_dims**-0.5)
        p_past, p_future = cope_positions(gates)
        z_past = qp @ self.pos_embed_past[layer_idx].t()  # (B, h, N, P)
        z_future = qp @ self.pos_embed_future[layer_idx].t()
        n = gates.shape[-1]
        is_past = torch.ones(n, n, dtype=torch.bool, device=q.device).tril()
        bias = torch.where(is_past, interpolate_integer_positions(z_past, p_past),
                           interpolate_integer_positions(z_future, p_future))
        return self.pad_extra_bias(bias)

    def extra_repr(self) -> str:
        return super().extra_repr() + f', npos_max={self.npos_max}'
