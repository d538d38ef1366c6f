"""Rotary position encodings in the DETR-like encoders (``encoder_pos='rope_mixed'`` /
``'rope_dinov3'``, alone or ``+peg``).

mmdet's DETR, Conditional-DETR and DAB-DETR encoders run mmcv's ``MultiheadAttention``, which
adds the position embeddings to its inputs and calls ``torch.nn.MultiheadAttention``: the
per-head queries and keys, which a rotary encoding rotates, exist only inside the latter. So
each encoder layer's ``nn.MultiheadAttention`` is turned in place into a
:class:`RotaryMultiheadAttention` (same parameters and state-dict keys: stock checkpoints load):
the same projections, the queries and keys of every head rotated by the angles of its layer,
then ``scaled_dot_product_attention`` with the key padding mask. The angles of the running
encoder call are bound by the detector's ``forward_encoder`` (:func:`bind_rotary_angles`),
local to the thread / asyncio task like the PEG inputs.
"""
from contextlib import contextmanager
from typing import Iterator, Optional, Sequence

import torch.nn.functional as F
from torch import Tensor, nn

from ..layers.encodings.rotary import RotaryPositionEncoding, valid_hw_from_mask
from ..utils.call_state import CallState

#: (encoding, angles per layer) of each encoder's running forward
_ROTARY_INPUTS = CallState('mmposenc_rotary_inputs')


class RotaryToken:
    """Shared by an encoder and its attention layers: the key of their rotary inputs."""


class RotaryMultiheadAttention(nn.MultiheadAttention):
    """``torch.nn.MultiheadAttention`` whose per-head queries and keys are rotated by the
    angles bound for its encoder (:func:`bind_rotary_angles`); made from a built one by
    :func:`install_rotary_attention`, never constructed directly.

    Only self-attention of an encoder is supported: no ``attn_mask``, packed ``in_proj``
    weights, no bias_k / bias_v, no attention weights returned (``None``).
    """

    _rotary_token: RotaryToken
    _rotary_layer_idx: int

    def forward(self, query: Tensor, key: Tensor, value: Tensor,
                key_padding_mask: Optional[Tensor] = None, need_weights: bool = True,
                attn_mask: Optional[Tensor] = None, **kwargs):
        """As ``nn.MultiheadAttention.forward`` (sequence-first unless ``batch_first``);
        returns ``(output, None)``."""
        state = _ROTARY_INPUTS.get(self._rotary_token)
        if state is None:
            raise RuntimeError('RotaryMultiheadAttention ran outside its encoder\'s forward: '
                               'no rotary angles are bound (call the detector\'s '
                               'forward_encoder, which binds them)')
        if attn_mask is not None:
            raise ValueError('RotaryMultiheadAttention takes no attn_mask (encoder '
                             'self-attention only)')
        encoding, angles = state
        if not self.batch_first:
            query, key, value = (t.transpose(0, 1) for t in (query, key, value))
        B, N, C = query.shape
        heads = self.num_heads
        w, b = self.in_proj_weight, self.in_proj_bias
        bq, bk, bv = (None, None, None) if b is None else b.chunk(3)
        wq, wk, wv = w.chunk(3)
        q = F.linear(query, wq, bq).view(B, N, heads, -1).transpose(1, 2)
        k = F.linear(key, wk, bk).view(B, key.shape[1], heads, -1).transpose(1, 2)
        v = F.linear(value, wv, bv).view(B, value.shape[1], heads, -1).transpose(1, 2)
        layer_angles = angles[self._rotary_layer_idx]
        q, k = encoding.rotate(q, layer_angles), encoding.rotate(k, layer_angles)
        mask = None if key_padding_mask is None else ~key_padding_mask[:, None, None, :]
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, dropout_p=self.dropout if self.training else 0.)
        out = self.out_proj(out.transpose(1, 2).reshape(B, N, C))
        if not self.batch_first:
            out = out.transpose(0, 1)
        return out, None


def install_rotary_attention(encoder: nn.Module) -> RotaryToken:
    """Turn the ``nn.MultiheadAttention`` of every layer's ``self_attn`` of a DETR-like
    encoder into a :class:`RotaryMultiheadAttention` in place.

    Returns:
        RotaryToken: The key under which :func:`bind_rotary_angles` binds the angles (also
        stored as ``encoder.rotary_token``).
    """
    token = RotaryToken()
    for idx, layer in enumerate(encoder.layers):
        attn = getattr(getattr(layer, 'self_attn', None), 'attn', None)
        if type(attn) is not nn.MultiheadAttention:
            raise TypeError(f'{type(encoder).__name__} layer {idx}: rotary encoder positions '
                            'need the self_attn of mmcv MultiheadAttention (wrapping '
                            f'torch.nn.MultiheadAttention), got {type(attn).__name__}')
        if not attn._qkv_same_embed_dim or attn.bias_k is not None or attn.add_zero_attn:
            raise ValueError(f'{type(encoder).__name__} layer {idx}: rotary encoder positions '
                             'need packed qkv projections without bias_k / bias_v / '
                             'add_zero_attn')
        attn.__class__ = RotaryMultiheadAttention
        attn._rotary_token = token
        attn._rotary_layer_idx = idx
    encoder.rotary_token = token
    return token


def encoder_angles(encoding: RotaryPositionEncoding, num_layers: int, hw_shape: Sequence,
                   key_padding_mask: Optional[Tensor], device) -> list:
    """The angles of every encoder layer for one forward: each image's own region
    (from the key padding mask), one draw of the training augmentation for all layers."""
    valid_hw = valid_hw_from_mask(key_padding_mask, hw_shape)
    encoding.start_forward()
    if encoding.per_layer:
        return [encoding.angles(hw_shape, i, valid_hw, device) for i in range(num_layers)]
    return [encoding.angles(hw_shape, 0, valid_hw, device)] * num_layers


@contextmanager
def bind_rotary_angles(encoder: nn.Module, encoding: RotaryPositionEncoding,
                       hw_shape: Sequence, key_padding_mask: Optional[Tensor],
                       device) -> Iterator[None]:
    """Bind, for the duration of the encoder's call, the angles its rotary attention layers
    read (:func:`encoder_angles`)."""
    angles = encoder_angles(encoding, len(encoder.layers), hw_shape, key_padding_mask, device)
    with _ROTARY_INPUTS.bind(encoder.rotary_token, (encoding, angles)):
        yield
