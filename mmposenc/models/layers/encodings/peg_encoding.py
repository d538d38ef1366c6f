"""Adapter that plugs the PEG of CPVT into :class:`PEViT`'s position-encoding interface."""
from typing import Optional, Sequence

import torch
import torch.nn as nn

from mmposenc.registry import MODELS
from .base import BasePositionEncoding


@MODELS.register_module()
class PEGPositionEncoding(BasePositionEncoding):
    """Conditional position encoding: a :class:`~mmposenc.models.layers.PEG` after some
    encoder layers (`CPVT <https://arxiv.org/abs/2102.10882>`_ uses the first one).

    Args:
        embed_dims (int): Token channels.
        num_heads (int): Unused (interface). Defaults to 1.
        num_layers (int): Encoder layers, to check ``layer_indices``. Defaults to 1.
        num_extra_tokens (int): Leading extra tokens, passed to the PEG. Defaults to 0.
        layer_indices (Sequence[int]): Layers after which a PEG is applied (negative
            indices count from the end). Defaults to (0, ).
        peg_cfg (dict, optional): Further arguments of ``PEG`` (e.g. ``kernel_size``).
        init_cfg (dict, optional): Initialization config. Defaults to None.

    Examples:
        >>> import torch
        >>> pe = PEGPositionEncoding(16, num_layers=4, num_extra_tokens=1)
        >>> pe.layer_hook(torch.rand(2, 1 + 12, 16), (3, 4), layer_idx=0).shape
        torch.Size([2, 13, 16])
    """

    hooks = ('layer_hook', )

    def __init__(self,
                 embed_dims: int,
                 num_heads: int = 1,
                 num_layers: int = 1,
                 num_extra_tokens: int = 0,
                 layer_indices: Sequence[int] = (0, ),
                 peg_cfg: Optional[dict] = None,
                 init_cfg: Optional[dict] = None):
        super().__init__(embed_dims, num_heads, num_layers, num_extra_tokens, init_cfg)
        indices = []
        for i in layer_indices:
            if not -num_layers <= i < num_layers:
                raise ValueError(f'layer index {i} out of range for {num_layers} layers')
            indices.append(i % num_layers)
        if len(set(indices)) != len(indices):
            raise ValueError(f'layer_indices must be distinct, got {tuple(layer_indices)}')
        self.layer_indices = tuple(sorted(indices))
        cfg = dict(type='mmposenc.PEG', in_channels=embed_dims, num_extra_tokens=num_extra_tokens)
        cfg.update(peg_cfg or {})
        #: one PEG per layer index, keyed by the index
        self.pegs = nn.ModuleDict({str(i): MODELS.build(cfg) for i in self.layer_indices})
        if any(peg.out_shape((16, 16)) != (16, 16) for peg in self.pegs.values()):
            raise ValueError('PEGPositionEncoding needs PEGs that keep the token grid; the '
                             "shrinking no-padding PEG (padding='none') and the strided one "
                             'run in mmposenc.CPVT')

    def layer_hook(self, x: torch.Tensor, hw_shape: Sequence[int],
                   layer_idx: int) -> torch.Tensor:
        key = str(layer_idx)
        return self.pegs[key](x, hw_shape) if key in self.pegs else x

    def extra_repr(self) -> str:
        return super().extra_repr() + f', layer_indices={self.layer_indices}'
