"""Attention layers that consume a position encoding: generic multi-head attention with a
pluggable :class:`~mmposenc.models.layers.BasePositionEncoding`, and PerViT's MPA."""
from .pe_attention import PEMultiheadAttention  # noqa: F401
from .mpa import MPA  # noqa: F401
