"""Rotary self-attention for the DETR-like encoders (see ``docs/user_guides/rotary.md``)."""
from typing import Optional, Sequence, Tuple

import torch.nn.functional as F
from mmcv.cnn.bricks.transformer import MultiheadAttention
from torch import Tensor, nn

from mmposenc.models.layers.encodings.rotary import (RotaryPositionEncoding,
                                                     valid_hw_from_mask)


def rotary_attention(attn: nn.MultiheadAttention, query: Tensor, key: Tensor, value: Tensor,
                     key_padding_mask: Optional[Tensor], encoding: RotaryPositionEncoding,
                     angles: Tensor) -> Tensor:
    """Multi-head attention with ``attn``'s weights, the per-head queries and keys rotated.

    Args:
        attn (nn.MultiheadAttention): Gives the packed qkv and output projections, heads, dropout.
        query, key, value (Tensor): (bs, n, C), batch first.
        key_padding_mask (Tensor, optional): Bool (bs, n_keys), True = padded.
        encoding (RotaryPositionEncoding): Rotates per-head (bs, heads, n, C / heads) tensors.
        angles (Tensor): The angles of this layer (:meth:`RotaryPositionEncoding.angles`).

    Returns:
        Tensor: (bs, n, C).
    """
    B, N, C = query.shape
    heads = attn.num_heads
    w, b = attn.in_proj_weight, attn.in_proj_bias
    bq, bk, bv = (None, None, None) if b is None else b.chunk(3)
    wq, wk, wv = w.chunk(3)
    q = F.linear(query, wq, bq).view(B, N, heads, -1).transpose(1, 2)
    k = F.linear(key, wk, bk).view(B, key.shape[1], heads, -1).transpose(1, 2)
    v = F.linear(value, wv, bv).view(B, value.shape[1], heads, -1).transpose(1, 2)
    q, k = encoding.rotate(q, angles), encoding.rotate(k, angles)
    mask = None if key_padding_mask is None else ~key_padding_mask[:, None, None, :]
    out = F.scaled_dot_product_attention(
        q, k, v, attn_mask=mask, dropout_p=attn.dropout if attn.training else 0.)
    return attn.out_proj(out.transpose(1, 2).reshape(B, N, C))


class RotaryMultiheadAttention(MultiheadAttention):
    """mmcv's :class:`~mmcv.cnn.bricks.transformer.MultiheadAttention` with rotated per-head
    queries and keys (encoder self-attention only; made by :func:`install_rotary_attention`)."""

    #: index of the encoder layer (selects the layer's angles)
    layer_idx: int

    def forward(self, query: Tensor, key: Optional[Tensor] = None,
                value: Optional[Tensor] = None, identity: Optional[Tensor] = None,
                query_pos: Optional[Tensor] = None, key_pos: Optional[Tensor] = None,
                attn_mask: Optional[Tensor] = None, key_padding_mask: Optional[Tensor] = None,
                rotary: Optional[Tuple[RotaryPositionEncoding, Sequence[Tensor]]] = None,
                **kwargs) -> Tensor:
        """mmcv's ``forward`` with rotary attention.

        Args:
            rotary (tuple): ``(encoding, angles)``, every layer's angles (:func:`encoder_angles`).
            Others: Those of mmcv's ``MultiheadAttention.forward``.

        Returns:
            Tensor: As the input ``query`` (batch first if :attr:`batch_first`).
        """
        if rotary is None:
            raise RuntimeError('RotaryMultiheadAttention got no rotary angles: it runs inside '
                               'the encoder of a detector in a rotary encoder_pos, whose '
                               'forward_encoder passes them')
        if attn_mask is not None:
            raise ValueError('RotaryMultiheadAttention takes no attn_mask (encoder '
                             'self-attention only)')
        key = query if key is None else key
        value = key if value is None else value
        identity = query if identity is None else identity
        if key_pos is None and query_pos is not None and query_pos.shape == key.shape:
            key_pos = query_pos
        if query_pos is not None:
            query = query + query_pos
        if key_pos is not None:
            key = key + key_pos
        if not self.batch_first:
            query, key, value = (t.transpose(0, 1) for t in (query, key, value))
        encoding, angles = rotary
        out = rotary_attention(self.attn, query, key, value, key_padding_mask, encoding,
                               angles[self.layer_idx])
        if not self.batch_first:
            out = out.transpose(0, 1)
        return identity + self.dropout_layer(self.proj_drop(out))


def install_rotary_attention(encoder: nn.Module) -> None:
    """Turn each encoder layer's ``self_attn`` into a :class:`RotaryMultiheadAttention` in place."""
    for idx, layer in enumerate(encoder.layers):
        self_attn = getattr(layer, 'self_attn', None)
        attn = getattr(self_attn, 'attn', None)
        if type(self_attn) is not MultiheadAttention or type(attn) is not nn.MultiheadAttention:
            raise TypeError(f'{type(encoder).__name__} layer {idx}: rotary encoder positions '
                            'need the self_attn of mmcv MultiheadAttention (wrapping '
                            f'torch.nn.MultiheadAttention), got {type(attn).__name__}')
        if not attn._qkv_same_embed_dim or attn.bias_k is not None or attn.add_zero_attn:
            raise ValueError(f'{type(encoder).__name__} layer {idx}: rotary encoder positions '
                             'need packed qkv projections without bias_k / bias_v / '
                             'add_zero_attn')
        self_attn.__class__ = RotaryMultiheadAttention
        self_attn.layer_idx = idx


def encoder_angles(encoding: RotaryPositionEncoding, num_layers: int, hw_shape: Sequence,
                   key_padding_mask: Optional[Tensor], device) -> list:
    """The angles of every encoder layer for one forward, on each image's own region."""
    valid_hw = valid_hw_from_mask(key_padding_mask, hw_shape)
    encoding.start_forward()
    if encoding.per_layer or getattr(encoding, 'draw_per_layer', False):
        return [encoding.angles(hw_shape, i, valid_hw, device) for i in range(num_layers)]
    return [encoding.angles(hw_shape, 0, valid_hw, device)] * num_layers
