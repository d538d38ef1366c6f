"""Rotary self-attention for the DETR-like encoders (``encoder_pos='rope_mixed'`` /
``'rope_dinov3'``, alone or ``+peg``).

mmdet's DETR, Conditional-DETR and DAB-DETR encoders run mmcv's ``MultiheadAttention``, which
adds the position embeddings to its inputs and calls ``torch.nn.MultiheadAttention``: the
per-head queries and keys, which a rotary encoding rotates, exist only inside the latter. So
each encoder layer's ``self_attn`` is turned in place into a :class:`RotaryMultiheadAttention`
(same modules, parameters and state-dict keys: stock checkpoints load), which projects the
queries, keys and values with the weights of its ``torch.nn.MultiheadAttention``, rotates the
queries and keys of every head by the angles of its layer, and runs
``scaled_dot_product_attention`` with the key padding mask.

The angles travel as an argument: the detector's ``forward_encoder`` computes those of the
running call (:func:`encoder_angles`) and passes ``rotary=(encoding, angles)`` to the encoder,
whose loop hands it to every layer and each layer to its ``self_attn``.
"""
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
        attn (nn.MultiheadAttention): Packed qkv projection (``in_proj_weight``) and
            ``out_proj``; its ``num_heads`` and ``dropout`` (in training).
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
    """mmcv's :class:`~mmcv.cnn.bricks.transformer.MultiheadAttention` whose per-head queries
    and keys are rotated by the angles its encoder passes (``rotary``); made from a built one
    by :func:`install_rotary_attention`, never constructed directly.

    Only self-attention of an encoder is supported: no ``attn_mask``, packed qkv projections,
    no bias_k / bias_v.
    """

    #: index of the encoder layer (selects the layer's angles)
    layer_idx: int

    def forward(self, query: Tensor, key: Optional[Tensor] = None,
                value: Optional[Tensor] = None, identity: Optional[Tensor] = None,
                query_pos: Optional[Tensor] = None, key_pos: Optional[Tensor] = None,
                attn_mask: Optional[Tensor] = None, key_padding_mask: Optional[Tensor] = None,
                rotary: Optional[Tuple[RotaryPositionEncoding, Sequence[Tensor]]] = None,
                **kwargs) -> Tensor:
        """As mmcv's ``forward`` (positions added to the inputs, residual, dropout), the
        attention rotary.

        Args:
            rotary (tuple): ``(encoding, angles)``, the angles of every encoder layer of the
                running call (:func:`encoder_angles`).
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
    """Turn the mmcv ``MultiheadAttention`` of every layer's ``self_attn`` of a DETR-like
    encoder into a :class:`RotaryMultiheadAttention` in place (same modules and weights)."""
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
    """The angles of every encoder layer for one forward: each image's own region (from the
    key padding mask); one draw of the training augmentation for all layers, or one per layer
    where the encoding draws per layer (its ``draw_per_layer``, e.g. DINOv3's RoPE with
    ``train_draw='per_block'`` in training)."""
    valid_hw = valid_hw_from_mask(key_padding_mask, hw_shape)
    encoding.start_forward()
    if encoding.per_layer or getattr(encoding, 'draw_per_layer', False):
        return [encoding.angles(hw_shape, i, valid_hw, device) for i in range(num_layers)]
    return [encoding.angles(hw_shape, 0, valid_hw, device)] * num_layers
