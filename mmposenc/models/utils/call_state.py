"""Per-call state of a module that is invisible to other threads and asyncio tasks.

Some of our modules need, deep inside a host's forward, a value of the running call that the
host does not pass down (the data samples of ``loss`` / ``predict`` for the neck, the PEG inputs
for a forward hook on an encoder layer, the image shapes for Mask2Former's pixel decoder).
Stored on the instance, such a value is shared by every concurrent call on the same model: two
threads running ``predict`` on one model read each other's samples. :class:`CallState` keeps it
in a :class:`contextvars.ContextVar` instead, keyed by the module, so each thread (and each
asyncio task) sees only the values bound by its own calls.
"""
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Dict, Iterator

#: Every :class:`CallState` of the package, by name, with the reason the value cannot be passed
#: as an argument (the host signature that leaves no other way). ``docs/architecture.md`` lists
#: them; ``tests/test_packaging/test_floor_plan.py`` checks that list against this one.
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
        """The value bound for ``owner`` by a running :meth:`bind` of this context, else
        ``default``."""
        return self._var.get({}).get(id(owner), default)

    @contextmanager
    def bind(self, owner: Any, value: Any) -> Iterator[None]:
        """Bind ``value`` for ``owner`` within the context (nested binds restore the outer
        value on exit)."""
        token = self._var.set({**self._var.get({}), id(owner): value})
        try:
            yield
        finally:
            self._var.reset(token)
