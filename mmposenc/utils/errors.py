"""Errors a user can cause, one line each, and the tools' one-line error printing.

Examples:
    >>> raise CheckpointDownloadError('https://x/a.pth: no network; put a.pth in /tmp')
    Traceback (most recent call last):
    mmposenc.utils.errors.CheckpointDownloadError: https://x/a.pth: no network; put a.pth in /tmp
"""
import os
import os.path as osp
import sys
import traceback

#: Command-line flag of the tools that asks for the full traceback.
TRACEBACK_FLAG = '--traceback'
#: Environment variable: ``1`` asks the tools for the full traceback.
TRACEBACK_ENV = 'MMPOSENC_TRACEBACK'


def one_line(text):
    """``text`` on one line: its non-empty lines, stripped, joined by ``' '``."""
    return ' '.join(line.strip() for line in str(text).splitlines() if line.strip())


class MMPosEncError(Exception):
    """An error a user can cause, whose one-line message says what is wrong and what to do.

    Args:
        message (str): The message.
    """

    def __init__(self, message, *args):
        super().__init__(one_line(message), *args)

    def __str__(self):
        return str(self.args[0]) if self.args else ''


class CheckpointDownloadError(MMPosEncError, OSError):
    """A checkpoint could not be downloaded (the message says where to put it offline)."""


def error_line(err):
    """The one line :func:`run_tool` prints for ``err``.

    The innermost :class:`MMPosEncError` of the chain, else ``err`` with its place and cause.

    Args:
        err (BaseException): The exception.

    Returns:
        str: One line.
    """
    chain = _chain(err)
    ours = [e for e in chain if isinstance(e, MMPosEncError)]
    if ours:
        return _type_and_message(ours[-1])
    root = chain[-1]
    cause = f'caused by {_type_and_message(root)} ' if root is not err else ''
    where = traceback.extract_tb(root.__traceback__)[-1:] if root.__traceback__ else []
    place = f'raised at {_short(where[0].filename)}:{where[0].lineno}; ' if where else ''
    return (f'{_type_and_message(err)} ({cause}{place}{TRACEBACK_FLAG} or {TRACEBACK_ENV}=1 '
            'shows the full traceback)')


def _chain(err):
    """``err`` and the exceptions it was raised from or while handling, outermost first."""
    chain = [err]
    while True:
        nxt = chain[-1].__cause__ or (None if chain[-1].__suppress_context__ else
                                      chain[-1].__context__)
        if nxt is None or nxt in chain:
            return chain
        chain.append(nxt)


def _type_and_message(err):
    if isinstance(err, KeyError) and len(err.args) == 1 and isinstance(err.args[0], str) \
            and type(err).__str__ is KeyError.__str__:
        message = err.args[0]  # not KeyError's repr of it
    else:
        message = str(err)
    return f'{type(err).__name__}: {one_line(message)}' if message else type(err).__name__


def _short(path):
    """``path`` from its package folder on (``mmdet/models/...``), or as given."""
    parts = osp.normpath(path).split(os.sep)
    for anchor in ('site-packages', 'dist-packages'):
        if anchor in parts:
            return '/'.join(parts[len(parts) - parts[::-1].index(anchor):])
    ours = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))  # beside mmposenc/
    if osp.abspath(path).startswith(ours + os.sep):
        return osp.relpath(osp.abspath(path), ours).replace(os.sep, '/')
    return path


def traceback_requested(argv=None):
    """Whether ``--traceback`` is in ``argv`` or ``MMPOSENC_TRACEBACK=1`` is set."""
    argv = sys.argv[1:] if argv is None else argv
    return TRACEBACK_FLAG in argv or os.environ.get(TRACEBACK_ENV, '0') == '1'


def run_tool(main, argv=None):
    """Run a tool's ``main(argv)``; an exception ends it with one line on stderr.

    Args:
        main (Callable): The tool's ``main``; it parses ``argv`` (``None``: ``sys.argv[1:]``).
        argv (list[str], optional): The arguments. Defaults to None.

    Returns:
        Any: What ``main`` returns.

    Raises:
        SystemExit: after an exception, with its :func:`error_line` (status 1), unless a
            traceback is requested.
    """
    if traceback_requested(argv):
        return main(argv)
    try:
        return main(argv)
    except Exception as err:  # KeyboardInterrupt and SystemExit pass
        raise SystemExit(error_line(err)) from None
