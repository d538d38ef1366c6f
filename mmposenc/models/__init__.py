"""Models of mmposenc. Importing this package never imports mmdet or mmseg: the detectors in
:mod:`mmposenc.models.detectors` are loaded by configs through ``custom_imports``."""
from . import backbones, layers, necks, padding_exact, utils  # noqa: F401
from . import tta  # noqa: F401
