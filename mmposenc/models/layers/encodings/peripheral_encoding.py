"""PerViT's peripheral position encoding as a pluggable attention bias ("+ PPE", Table 2)."""
from typing import Optional, Sequence

import torch
from mmengine.model import ModuleList

from mmposenc.registry import MODELS
from ..generators.peripheral import (PPE_INITS, PeripheralPositionEncoding,
                                     build_peripheral_embedding, ppe_init_schedule)
from .base import BasePositionEncoding


@MODELS.register_module()
class PeripheralPE(BasePositionEncoding):
    """Phi_p of `PerViT <https://arxiv.org/abs/2206.06801>`_ added to a plain ViT/DeiT.

    Every attention layer of :class:`~mmposenc.models.PEViT` becomes multi-head peripheral
    attention: its logits get the bias ``log Phi_p`` of that layer, so
    ``softmax(QK^T tau + log Phi_p) = Normalize[exp(QK^T tau) * Phi_p]`` (seed Eq. 3-5).
    One shared ``w_r`` (``distance_embed``) and one
    :class:`PeripheralPositionEncoding` per layer with the initialisation of its depth
    (:func:`~mmposenc.models.layers.ppe_init_schedule`). Extra (class) tokens are not gated
    (bias 0).

    Args:
        embed_dims (int): Token channels (filled in by PEViT).
        num_heads (int): Heads (filled in by PEViT).
        num_layers (int): Encoder layers (filled in by PEViT).
        num_extra_tokens (int): Leading class tokens (filled in by PEViT).
        init (str): ``'peripheral'``, ``'conv'`` or ``'rand'`` (Table 5, as in
            :class:`~mmposenc.models.backbones.PerViT`). Defaults to 'peripheral'.
        ppe_cfg (dict, optional): Extra arguments of each PeripheralPositionEncoding (the
            designs ``multi_layer``, ``kernel_size``, ``with_norms``, ``embedding`` included).
        init_cfg (dict, optional): Defaults to None.

    Examples:
        >>> pe = PeripheralPE(embed_dims=192, num_heads=3, num_layers=2, num_extra_tokens=1)
        >>> q = torch.rand(2, 3, 1 + 4 * 5, 64)
        >>> pe.attn_bias(q, q, (4, 5), layer_idx=1).shape
        torch.Size([1, 3, 21, 21])
    """

    hooks = ('attn_bias', )

    def __init__(self,
                 embed_dims: int,
                 num_heads: int = 1,
                 num_layers: int = 1,
                 num_extra_tokens: int = 0,
                 init: str = 'peripheral',
                 ppe_cfg: Optional[dict] = None,
                 init_cfg=None):
        super().__init__(embed_dims, num_heads, num_layers, num_extra_tokens, init_cfg=init_cfg)
        if init not in PPE_INITS:
            raise ValueError(f'init must be one of {PPE_INITS}, got {init!r}')
        self.init = init
        ppe_cfg = dict(ppe_cfg or {})
        self.distance_embed = build_peripheral_embedding(
            ppe_cfg.get('embedding', 'euc'), 4 * num_heads, init=init,
            kernel_size=ppe_cfg.get('kernel_size', 3),
            multi_layer=ppe_cfg.get('multi_layer', True))
        self.ppes = ModuleList()
        for s, v in ppe_init_schedule(init, num_layers):
            cfg = dict(init=init, init_norm_bias=s, init_norm_weight=v)
            cfg.update(ppe_cfg)
            self.ppes.append(
                PeripheralPositionEncoding(num_heads, distance_embed=self.distance_embed, **cfg))

    def attn_bias(self, q: torch.Tensor, k: torch.Tensor, hw_shape: Sequence[int],
                  layer_idx: int) -> torch.Tensor:
        """``log Phi_p`` of layer ``layer_idx``, ``(1, heads, E + H*W, E + H*W)``."""
        self.check_grid(q, hw_shape)
        bias = self.ppes[layer_idx].log_gate(hw_shape)
        return self.pad_extra_bias(bias)[None]

    def extra_repr(self) -> str:
        return super().extra_repr() + f', init={self.init!r}'
