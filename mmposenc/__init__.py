"""mmposenc: position encodings for vision transformers, as an OpenMMLab plugin."""
# First: torch, mmengine and mmcv by module and version (upstream or onedl-*), one line if not;
# then mmcv.ops on PyTorch kernels where mmcv has no compiled ops (the startup hook did this
# already where mmposenc is installed; this covers PYTHONPATH use).
from .utils.hosts import HOST_VERSIONS  # noqa: F401
from .ops import ext_finder  # noqa: I001
from .engine.checkpoint import register_safe_loaders
from .utils.config_package import register_config_package
from .version import __version__

ext_finder.install()

# Local and downloaded checkpoints load with weights_only=True plus the few globals mmengine's
# Runner checkpoints need (see mmposenc.engine.checkpoint); every config that uses an mmposenc
# type imports this package.
register_safe_loaders()
# `_base_ = 'mmposenc::<folder>/<file>.py'` in any config parsed after this import (see
# mmposenc.utils.config_package for what mmengine needs and why).
register_config_package()

__all__ = ['__version__']
