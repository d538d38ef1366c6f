from .peg import PEG  # noqa: F401
from .masked_peg import MaskedPEG, MultiLevelMaskedPEG, masked_batch_norm  # noqa: F401
from .pe_base import BasePositionEncoding  # noqa: F401
from .pe_attention import PEMultiheadAttention  # noqa: F401
from .no_pe import NoPositionEncoding  # noqa: F401
from .learnable_abs_pe import LearnableAbsolutePE  # noqa: F401
from .sincos_pe import SinCos2dPE  # noqa: F401
from .rope2d import RoPE2d  # noqa: F401
from .rel_pos_bias import RelativePositionBias2d  # noqa: F401
from .cope import CoPE  # noqa: F401
from .cape import CAPE1d, CAPE2d  # noqa: F401
from .sape2 import SaPE2  # noqa: F401
from .peg_pe import PEGPositionEncoding  # noqa: F401
from .peripheral import (PeripheralDistanceEmbedding, PeripheralPositionEncoding,  # noqa: F401
                         normalized_grid, pairwise_distances, peripheral_init_schedule)
from .mpa import MPA  # noqa: F401
from .peripheral_pe import PeripheralPE  # noqa: F401
