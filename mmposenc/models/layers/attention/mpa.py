"""Multi-head peripheral attention (MPA) of PerViT. See docs/methods/pervit.md."""
from typing import Optional, Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F
from mmengine.model import BaseModule

from mmposenc.registry import MODELS
from ..generators.peripheral import PeripheralDistanceEmbedding, PeripheralPositionEncoding


def gate_to_bias(gate: torch.Tensor, eps: float = 1e-30) -> torch.Tensor:
    """The ``log`` of a multiplicative attention gate in ``[0, 1]``, clamped at ``eps``."""
    return gate.clamp_min(eps).log()


def pad_bias(bias: torch.Tensor, num_extra_tokens: int) -> torch.Tensor:
    """Zero rows and columns for the extra tokens: ``(heads, N, N) -> (heads, E + N, E + N)``."""
    if num_extra_tokens == 0:
        return bias
    return F.pad(bias, (num_extra_tokens, 0, num_extra_tokens, 0))


@MODELS.register_module()
class MPA(BaseModule):
    """Multi-head peripheral attention of `PerViT <https://arxiv.org/abs/2206.06801>`_.

    It runs as fused attention with the bias ``log Phi_p``.

    Args:
        embed_dims (int): Channels ``C``.
        num_heads (int): Heads (PerViT keeps them fixed over the stages).
        qkv_bias (bool): Bias of the qkv projection (the official code has none).
            Defaults to False.
        attn_drop (float): Dropout on attention weights (training only). Defaults to 0.
        proj_drop (float): Dropout after the output projection. Defaults to 0.
        with_phi_p (bool): The position-based attention Phi_p. False (Table 1 (b)) is plain
            multi-head self-attention ``softmax(Q K^T tau) V``: no Phi_p is built and the
            output does not depend on the token positions. Defaults to True.
        with_phi_c (bool): The content-based attention Phi_c. False (Table 1 (c)) gives
            ``Normalize[Phi_p] V`` without ``Q K^T``; only a value projection ``v`` is built.
            Defaults to True.
        num_extra_tokens (int): Leading tokens (e.g. a ``cls`` token) that Phi_p does not gate;
            they attend and are attended by content only. Defaults to 0.
        distance_embed (PeripheralDistanceEmbedding, optional): Shared ``w_r`` (see
            :class:`PeripheralPositionEncoding`). Defaults to None (own).
        ppe_cfg (dict, optional): Extra arguments of :class:`PeripheralPositionEncoding`
            (``init``, ``init_norm_bias``, ``init_norm_weight``, ``chunk_elems``, ...).
        init_cfg (dict, optional): Defaults to None.

    Examples:
        >>> attn = MPA(embed_dims=192, num_heads=4)
        >>> x = torch.rand(2, 7 * 9, 192)
        >>> attn(x, hw_shape=(7, 9)).shape
        torch.Size([2, 63, 192])
    """

    def __init__(self,
                 embed_dims: int,
                 num_heads: int,
                 qkv_bias: bool = False,
                 attn_drop: float = 0.,
                 proj_drop: float = 0.,
                 with_phi_p: bool = True,
                 with_phi_c: bool = True,
                 num_extra_tokens: int = 0,
                 distance_embed: Optional[PeripheralDistanceEmbedding] = None,
                 ppe_cfg: Optional[dict] = None,
                 init_cfg=None):
        super().__init__(init_cfg=init_cfg)
        if embed_dims % num_heads != 0:
            raise ValueError(f'embed_dims ({embed_dims}) must be divisible by num_heads '
                             f'({num_heads})')
        self.embed_dims = embed_dims
        self.num_heads = num_heads
        self.head_dims = embed_dims // num_heads
        self.scale = self.head_dims**-0.5
        if not (with_phi_p or with_phi_c):
            raise ValueError('MPA needs Phi_p or Phi_c (with_phi_p and with_phi_c are False)')
        self.attn_drop = attn_drop
        self.with_phi_p = with_phi_p
        self.with_phi_c = with_phi_c
        self.content_free = not with_phi_c
        self.num_extra_tokens = num_extra_tokens
        if self.content_free:
            self.v = nn.Linear(embed_dims, embed_dims, bias=qkv_bias)
        else:
            self.qkv = nn.Linear(embed_dims, embed_dims * 3, bias=qkv_bias)
        self.proj = nn.Linear(embed_dims, embed_dims)
        self.proj_drop = nn.Dropout(proj_drop)
        self.ppe = PeripheralPositionEncoding(
            num_heads, distance_embed=distance_embed, **(ppe_cfg or {})) if with_phi_p else None

    def position_bias(self, hw_shape: Sequence[int], dtype=None) -> Optional[torch.Tensor]:
        """``log Phi_p`` padded for the extra tokens: ``(heads, E + N, E + N)``; None without
        Phi_p."""
        if self.ppe is None:
            return None
        bias = pad_bias(self.ppe.log_gate(hw_shape), self.num_extra_tokens)
        return bias if dtype is None else bias.to(dtype)

    @torch.no_grad()
    def attention_maps(self, x: torch.Tensor, hw_shape: Sequence[int]) -> dict:
        """The unnormalised attentions ``phi_c``, ``phi_p`` and ``phi_a`` of this layer's input.

        A missing ``phi_c`` or ``phi_p`` is all ones.

        Returns:
            dict: ``phi_c`` and ``phi_a`` ``(B, heads, E + N, E + N)``, ``phi_p``
            ``(heads, E + N, E + N)``.
        """
        b, n, _ = x.shape
        if self.content_free:
            phi_c = x.new_ones(b, self.num_heads, n, n)
        else:
            qkv = self.qkv(x).reshape(b, n, 3, self.num_heads, self.head_dims)
            q, k, _ = qkv.permute(2, 0, 3, 1, 4).unbind(0)
            logits = torch.matmul(q, k.transpose(-2, -1)) * self.scale
            phi_c = torch.exp(logits - logits.amax(-1, keepdim=True))
        bias = self.position_bias(hw_shape, x.dtype)
        phi_p = x.new_ones(self.num_heads, n, n) if bias is None else bias.exp()
        return dict(phi_c=phi_c, phi_p=phi_p, phi_a=phi_c * phi_p)

    def forward(self, x: torch.Tensor, hw_shape: Sequence[int]) -> torch.Tensor:
        """
        Args:
            x (Tensor): ``(B, E + H*W, C)`` tokens (``E`` extra tokens first).
            hw_shape (Sequence[int]): ``(H, W)`` of the token grid.

        Returns:
            Tensor: ``(B, E + H*W, C)``.
        """
        b, n, c = x.shape
        if n != self.num_extra_tokens + hw_shape[0] * hw_shape[1]:
            raise ValueError(f'got {n} tokens, expected {self.num_extra_tokens} extra + '
                             f'{hw_shape[0]}x{hw_shape[1]}')
        bias = self.position_bias(hw_shape, x.dtype)
        drop = self.attn_drop if self.training else 0.
        if bias is None:  # Table 1 (b): MHSA
            qkv = self.qkv(x).reshape(b, n, 3, self.num_heads, self.head_dims)
            q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
            out = F.scaled_dot_product_attention(q, k, v, dropout_p=drop, scale=self.scale)
        elif self.content_free:
            v = self.v(x).reshape(b, n, self.num_heads, self.head_dims).transpose(1, 2)
            attn = bias.softmax(dim=-1)
            attn = F.dropout(attn, drop, self.training)
            out = torch.matmul(attn, v)
        else:
            qkv = self.qkv(x).reshape(b, n, 3, self.num_heads, self.head_dims)
            q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
            if bias.requires_grad and torch.is_grad_enabled():
                # a learnable bias: SDPA's CPU math path adds -inf checks over the full
                # logits; one baddbmm + softmax is the same computation, cheaper
                h, d = self.num_heads, self.head_dims
                logits = torch.baddbmm(
                    bias.expand(b, h, n, n).reshape(b * h, n, n), q.reshape(b * h, n, d),
                    k.reshape(b * h, n, d).transpose(1, 2), alpha=self.scale)
                attn = F.dropout(logits.softmax(dim=-1), drop, self.training)
                out = torch.bmm(attn, v.reshape(b * h, n, d)).view(b, h, n, d)
            else:
                out = F.scaled_dot_product_attention(
                    q, k, v, attn_mask=bias[None], dropout_p=drop, scale=self.scale)
        out = out.transpose(1, 2).reshape(b, n, c)
        return self.proj_drop(self.proj(out))

    def extra_repr(self) -> str:
        return (f'embed_dims={self.embed_dims}, num_heads={self.num_heads}, '
                f'with_phi_p={self.with_phi_p}, with_phi_c={self.with_phi_c}, '
                f'num_extra_tokens={self.num_extra_tokens}')
