"""Attention layers that consume a position encoding."""
from .pe_attention import PEMultiheadAttention  # noqa: F401
from .mpa import MPA  # noqa: F401
