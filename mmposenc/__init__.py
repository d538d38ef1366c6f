"""mmposenc: position encodings for vision transformers, as an OpenMMLab plugin."""
from .version import __version__

__all__ = ['__version__']
