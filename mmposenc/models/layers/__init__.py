"""Position generators, position encodings and the attention layers that use them."""
from .generators import (PEG, MaskedPEG, MultiLevelMaskedPEG, PeripheralDistanceEmbedding,  # noqa: F401
                         PeripheralLearnableEmbedding, PeripheralPositionEncoding,
                         build_peripheral_embedding, normalized_grid, pairwise_distances,
                         peripheral_init_schedule, ppe_init_schedule)
from .encodings import (BasePositionEncoding, CAPE1d, CAPE2d, CoPE, DINOv3RoPE,  # noqa: F401
                        LearnableAbsolutePE, NoPositionEncoding, PEGPositionEncoding,
                        PeripheralPE, RelativePositionBias2d, RoPE2d, RoPEMixed,
                        RotaryPositionEncoding, SaPE2, SinCos2dPE)
from .attention import MPA, PEMultiheadAttention  # noqa: F401
