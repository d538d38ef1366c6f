"""Layers, in three kinds:

- ``generators/``: modules that generate a position signal, from the tokens (``PEG``,
  ``MaskedPEG``, ``MultiLevelMaskedPEG``) or from distances (PerViT's ``PeripheralPositionEncoding``);
- ``encodings/``: the zoo of :class:`BasePositionEncoding` subclasses that plug into attention
  (none, learnable absolute, sin-cos, RoPE, relative bias, CoPE, CAPE, SaPE2, PEG / PPE wrappers);
- ``attention/``: attention layers that use them (``PEMultiheadAttention``, PerViT's ``MPA``).

Every public name is re-exported here; registered type names do not depend on the layout.
"""
from .generators import (PEG, MaskedPEG, MultiLevelMaskedPEG, PeripheralDistanceEmbedding,  # noqa: F401
                         PeripheralLearnableEmbedding, PeripheralPositionEncoding,
                         build_peripheral_embedding, normalized_grid, pairwise_distances,
                         peripheral_init_schedule, ppe_init_schedule)
from .encodings import (BasePositionEncoding, CAPE1d, CAPE2d, CoPE, DINOv3RoPE,  # noqa: F401
                        LearnableAbsolutePE, NoPositionEncoding, PEGPositionEncoding,
                        PeripheralPE, RelativePositionBias2d, RoPE2d, RoPEMixed,
                        RotaryPositionEncoding, SaPE2, SinCos2dPE)
from .attention import MPA, PEMultiheadAttention  # noqa: F401
