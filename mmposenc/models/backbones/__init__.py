from .cpvt import CPVT  # noqa: F401
from .pvt_peg import PVTPEG  # noqa: F401
from .swin_peg import SwinPEG  # noqa: F401
from .vit_pe import PEViT  # noqa: F401
from .pervit import PerViT  # noqa: F401
