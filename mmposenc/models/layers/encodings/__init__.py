"""The position encodings that plug into ``PEViT`` through ``pos_encoding=dict(type=...)``."""
from .base import BasePositionEncoding  # noqa: F401
from .none import NoPositionEncoding  # noqa: F401
from .learnable_abs import LearnableAbsolutePE  # noqa: F401
from .sincos import SinCos2dPE  # noqa: F401
from .rope2d import RoPE2d  # noqa: F401
from .rotary import RotaryPositionEncoding  # noqa: F401
from .rope_mixed import RoPEMixed  # noqa: F401
from .rope_dinov3 import DINOv3RoPE  # noqa: F401
from .rel_pos_bias import RelativePositionBias2d  # noqa: F401
from .cope import CoPE  # noqa: F401
from .cape import CAPE1d, CAPE2d  # noqa: F401
from .sape2 import SaPE2  # noqa: F401
from .peg_encoding import PEGPositionEncoding  # noqa: F401
from .peripheral_encoding import PeripheralPE  # noqa: F401
