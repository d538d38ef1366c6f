"""mmposenc: position encodings for vision transformers, as an OpenMMLab plugin."""
from .engine.checkpoint import register_safe_loaders
from .utils.config_package import register_config_package
from .version import __version__

# Local and downloaded checkpoints load with weights_only=True plus the few globals mmengine's
# Runner checkpoints need (see mmposenc.engine.checkpoint); every config that uses an mmposenc
# type imports this package.
register_safe_loaders()
# `_base_ = 'mmposenc::<folder>/<file>.py'` in any config parsed after this import (see
# mmposenc.utils.config_package for what mmengine needs and why).
register_config_package()

__all__ = ['__version__']
