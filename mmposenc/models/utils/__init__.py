"""Helpers shared across mmposenc's models that belong to no one concept (pure torch, no host
imports); the padding-exact mode's are in :mod:`mmposenc.models.padding_exact`."""
from .call_state import CallState  # noqa: F401
from .stable_sort import StableSort  # noqa: F401
