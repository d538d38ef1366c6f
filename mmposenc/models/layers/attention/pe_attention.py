"""Multi-head self-attention that consults pluggable position encodings."""
from typing import Optional, Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F
from mmengine.model import BaseModule

from ..encodings.base import BasePositionEncoding


class PEMultiheadAttention(BaseModule):
    """Multi-head self-attention with the position-encoding hooks of
    :class:`BasePositionEncoding`.

    For every encoding that declares them, ``transform_qk`` rewrites the per-head queries
    and keys and ``attn_bias`` adds a term to the scaled logits; the result goes through
    ``F.scaled_dot_product_attention`` (the fused kernel when no bias is added).

    Args:
        embed_dims (int): Token channels.
        num_heads (int): Attention heads.
        qkv_bias (bool): Bias of the qkv projection. Defaults to True.
        attn_drop (float): Dropout on the attention weights. Defaults to 0.
        proj_drop (float): Dropout after the output projection. Defaults to 0.
        init_cfg (dict, optional): Initialization config. Defaults to None.

    Examples:
        >>> import torch
        >>> from mmposenc.models.layers import RoPE2d
        >>> attn = PEMultiheadAttention(32, 2)
        >>> attn(torch.rand(2, 12, 32), (3, 4), [RoPE2d(32, 2)], layer_idx=0).shape
        torch.Size([2, 12, 32])
    """

    def __init__(self,
                 embed_dims: int,
                 num_heads: int,
                 qkv_bias: bool = True,
                 attn_drop: float = 0.,
                 proj_drop: float = 0.,
                 init_cfg: Optional[dict] = None):
        super().__init__(init_cfg=init_cfg)
        if embed_dims % num_heads:
            raise ValueError(f'embed_dims {embed_dims} not divisible by num_heads {num_heads}')
        self.embed_dims = embed_dims
        self.num_heads = num_heads
        self.head_dims = embed_dims // num_heads
        self.attn_drop = attn_drop
        self.qkv = nn.Linear(embed_dims, embed_dims * 3, bias=qkv_bias)
        self.proj = nn.Linear(embed_dims, embed_dims)
        self.proj_drop = nn.Dropout(proj_drop)

    def forward(self,
                x: torch.Tensor,
                hw_shape: Sequence[int],
                pos_encodings: Sequence[BasePositionEncoding] = (),
                layer_idx: int = 0) -> torch.Tensor:
        """Tokens (B, N, C) -> (B, N, C); ``pos_encodings`` are consulted in order."""
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, self.head_dims)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # (B, heads, N, d) each
        for pe in pos_encodings:
            if 'transform_qk' in pe.hooks:
                q, k = pe.transform_qk(q, k, hw_shape, layer_idx)
        bias = None
        for pe in pos_encodings:
            if 'attn_bias' in pe.hooks:
                b = pe.attn_bias(q, k, hw_shape, layer_idx)
                if b is not None:
                    bias = b if bias is None else bias + b
        if bias is not None:
            bias = bias.to(q.dtype)
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=bias, dropout_p=self.attn_drop if self.training else 0.)
        out = out.transpose(1, 2).reshape(B, N, C)
        return self.proj_drop(self.proj(out))

    def extra_repr(self) -> str:
        return f'embed_dims={self.embed_dims}, num_heads={self.num_heads}'
