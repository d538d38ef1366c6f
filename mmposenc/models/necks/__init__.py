"""Necks of mmposenc (pure torch + mmengine/mmcv, no host imports)."""
from .simple_pyramid import SimplePyramid  # noqa: F401
from .masked_channel_mapper import MaskedChannelMapper  # noqa: F401
