"""Helpers shared across mmposenc's models (pure torch, no host imports)."""
from .call_state import CallState  # noqa: F401
from .stable_sort import StableSort  # noqa: F401
