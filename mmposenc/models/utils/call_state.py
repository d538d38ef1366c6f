"""Per-call state of a module, invisible to other threads and asyncio tasks.

For values a host's forward does not pass down; see docs/architecture.md.
"""
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Dict, Iterator

#: Every :class:`CallState` by name, with why it cannot be an argument (docs/architecture.md).
CALL_STATES: Dict[str, str] = {}


class CallState:
    """Values bound per module for the duration of a call, local to the running context.

    Args:
        name (str): Name of the underlying context variable (the key of :data:`CALL_STATES`).
        why (str): Which host call leaves no argument to pass the value through.

    Examples:
        >>> state = CallState('doc_samples', why='example')
        >>> owner = object()
        >>> with state.bind(owner, [1, 2]):
        ...     print(state.get(owner))
        [1, 2]
        >>> print(state.get(owner))
        None
    """

    def __init__(self, name: str, why: str = '') -> None:
        CALL_STATES[name] = why
        self._var: ContextVar = ContextVar(name)

    def get(self, owner: Any, default: Any = None) -> Any:
        """The value bound for ``owner`` in this context, else ``default``."""
        return self._var.get({}).get(id(owner), default)

    @contextmanager
    def bind(self, owner: Any, value: Any) -> Iterator[None]:
        """Bind ``value`` for ``owner`` within the context (nested binds restore on exit)."""
        token = self._var.set({**self._var.get({}), id(owner): value})
        try:
            yield
        finally:
            self._var.reset(token)
