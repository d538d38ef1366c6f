"""The "no position encoding" baseline."""
from mmposenc.registry import MODELS
from .base import BasePositionEncoding


@MODELS.register_module()
class NoPositionEncoding(BasePositionEncoding):
    """No position information at all: every hook is the identity.

    Args:
        embed_dims (int): Token channels.
        num_heads (int): Attention heads. Defaults to 1.
        num_layers (int): Encoder layers. Defaults to 1.
        num_extra_tokens (int): Leading extra tokens. Defaults to 0.
        init_cfg (dict, optional): Initialization config. Defaults to None.

    Examples:
        >>> import torch
        >>> pe = NoPositionEncoding(8)
        >>> x = torch.rand(2, 6, 8)
        >>> torch.equal(pe.add_to_tokens(x, (2, 3)), x)
        True
    """

    hooks = ()
