"""mmposenc: position encodings for vision transformers, as an OpenMMLab plugin."""
from .engine.checkpoint import register_trusted_local_loader
from .version import __version__

# mmengine 0.10.7 cannot read its own Runner checkpoints under torch>=2.6 defaults (see
# mmposenc.engine.checkpoint); every config that uses an mmposenc type imports this package.
register_trusted_local_loader()

__all__ = ['__version__']
