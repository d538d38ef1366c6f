"""mmposenc: position encodings for vision transformers, as an OpenMMLab plugin."""
# First: check the host versions; then mmcv.ops on PyTorch kernels where mmcv has none.
from .utils.hosts import HOST_VERSIONS  # noqa: F401
from .ops import ext_finder  # noqa: I001
from .engine.checkpoint import register_safe_loaders
from .utils.config_package import register_config_package
from .version import __version__

ext_finder.install()

# Checkpoints load with weights_only=True (see mmposenc.engine.checkpoint).
register_safe_loaders()
# `_base_ = 'mmposenc::<folder>/<file>.py'` in configs parsed after this import.
register_config_package()

__all__ = ['__version__']
