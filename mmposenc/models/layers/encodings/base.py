"""The interface every position encoding of :class:`~mmposenc.models.PEViT` implements."""
from typing import Optional, Sequence, Tuple

import torch
import torch.nn as nn
from mmengine.model import BaseModule

HOOKS = ('add_to_tokens', 'layer_hook', 'transform_qk', 'attn_bias')


class BasePositionEncoding(BaseModule):
    """Base class of the position encodings pluggable into :class:`PEViT`.

    Subclasses override only the hooks they need and name them in ``hooks``. Tokens are
    ``(B, E + H*W, C)``, the ``E`` extra tokens first and the patches in row-major order.
    See docs/methods/sape2.md.

    Args:
        embed_dims (int): Token channels ``C``.
        num_heads (int): Attention heads. Defaults to 1.
        num_layers (int): Encoder layers, for per-layer parameters. Defaults to 1.
        num_extra_tokens (int): Leading tokens without a grid position (class token).
            Defaults to 0.
        init_cfg (dict, optional): Initialization config. Defaults to None.
    """

    #: names of the hooks this encoding overrides
    hooks: Tuple[str, ...] = ()
    #: names of the tables that :meth:`init_tables` draws, in this order
    trunc_normal_tables: Tuple[str, ...] = ()

    def __init__(self,
                 embed_dims: int,
                 num_heads: int = 1,
                 num_layers: int = 1,
                 num_extra_tokens: int = 0,
                 init_cfg: Optional[dict] = None):
        super().__init__(init_cfg=init_cfg)
        if not isinstance(embed_dims, int) or embed_dims < 1:
            raise ValueError(f'embed_dims must be a positive int, got {embed_dims!r}')
        if not isinstance(num_heads, int) or num_heads < 1 or embed_dims % num_heads:
            raise ValueError(f'num_heads must be a positive int dividing embed_dims='
                             f'{embed_dims}, got {num_heads!r}')
        if not isinstance(num_layers, int) or num_layers < 1:
            raise ValueError(f'num_layers must be a positive int, got {num_layers!r}')
        if not isinstance(num_extra_tokens, int) or num_extra_tokens < 0:
            raise ValueError(f'num_extra_tokens must be an int >= 0, got {num_extra_tokens!r}')
        unknown = set(self.hooks) - set(HOOKS)
        if unknown:
            raise TypeError(f'{type(self).__name__}.hooks has unknown names {unknown}')
        self.embed_dims = embed_dims
        self.num_heads = num_heads
        self.head_dims = embed_dims // num_heads
        self.num_layers = num_layers
        self.num_extra_tokens = num_extra_tokens

    def add_to_tokens(self, x: torch.Tensor, hw_shape: Sequence[int]) -> torch.Tensor:
        """Tokens ``(B, E + H*W, C)`` after the patch embedding -> same shape."""
        return x

    def layer_hook(self, x: torch.Tensor, hw_shape: Sequence[int],
                   layer_idx: int) -> torch.Tensor:
        """Tokens ``(B, E + H*W, C)`` after encoder layer ``layer_idx`` -> same shape."""
        return x

    def transform_qk(self, q: torch.Tensor, k: torch.Tensor, hw_shape: Sequence[int],
                     layer_idx: int) -> Tuple[torch.Tensor, torch.Tensor]:
        """Queries and keys ``(B, heads, E + H*W, head_dims)`` -> the same shapes."""
        return q, k

    def attn_bias(self, q: torch.Tensor, k: torch.Tensor, hw_shape: Sequence[int],
                  layer_idx: int) -> Optional[torch.Tensor]:
        """Bias added to the scaled logits, ``(B or 1, heads, E + H*W, E + H*W)``.

        ``q`` and ``k`` are the per-head queries and keys, before the scaling.
        """
        return None

    def init_tables(self):
        """Draw the ``trunc_normal_tables`` from a truncated normal with std 0.02."""
        for name in self.trunc_normal_tables:
            nn.init.trunc_normal_(getattr(self, name), std=0.02)

    def init_weights(self):
        """:meth:`init_tables` without an ``init_cfg``, else ``BaseModule.init_weights``."""
        if self.init_cfg is None and self.trunc_normal_tables:
            self.init_tables()
        else:
            super().init_weights()

    def split_tokens(self, x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """Split ``(..., E + H*W, C)`` into the extra tokens and the patch tokens."""
        e = self.num_extra_tokens
        return x[..., :e, :], x[..., e:, :]

    def check_grid(self, x: torch.Tensor, hw_shape: Sequence[int]):
        """Raise a ValueError unless ``x.shape[-2] == num_extra_tokens + H * W``."""
        if len(hw_shape) != 2 or min(hw_shape) < 1:
            raise ValueError(f'hw_shape must be (H, W) with H, W >= 1, got {tuple(hw_shape)}')
        expected = self.num_extra_tokens + hw_shape[0] * hw_shape[1]
        if x.shape[-2] != expected:
            raise ValueError(
                f'{type(self).__name__} expects num_extra_tokens + H * W = '
                f'{self.num_extra_tokens} + {hw_shape[0]} * {hw_shape[1]} = {expected} '
                f'tokens, got {x.shape[-2]}')

    def pad_extra_bias(self, bias: torch.Tensor) -> torch.Tensor:
        """Zero-pad a patch-to-patch bias ``(..., HW, HW)`` for the extra tokens."""
        e = self.num_extra_tokens
        if e == 0:
            return bias
        return torch.nn.functional.pad(bias, (e, 0, e, 0))

    def extra_repr(self) -> str:
        return (f'embed_dims={self.embed_dims}, num_heads={self.num_heads}, '
                f'num_layers={self.num_layers}, num_extra_tokens={self.num_extra_tokens}')
