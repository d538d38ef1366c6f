"""Position-encoding generators: modules that compute a position signal from the tokens themselves
(PEG, MaskedPEG) or from pairwise distances (PerViT's peripheral encoding Phi_p)."""
from .peg import PEG  # noqa: F401
from .masked_peg import MaskedPEG, MultiLevelMaskedPEG  # noqa: F401
from .peripheral import (PeripheralDistanceEmbedding, PeripheralLearnableEmbedding,  # noqa: F401
                         PeripheralPositionEncoding, build_peripheral_embedding,
                         normalized_grid, pairwise_distances, peripheral_init_schedule,
                         ppe_init_schedule)
