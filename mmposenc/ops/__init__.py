"""mmcv's compiled ops, or PyTorch kernels in their place (the ops-free route).

:func:`mmcv_route` tells which one this interpreter runs; see :mod:`mmposenc.ops.mmcv_ext` for
what the PyTorch kernels cover.

Examples:
    >>> import mmcv.ops
    >>> from mmposenc.ops import mmcv_route
    >>> mmcv_route() in ('compiled', 'ops-free')
    True
"""
import sys

from .ext_finder import using_torch_kernels


def mmcv_route():
    """Which kernels ``mmcv.ops`` runs on.

    Returns:
        str: ``'compiled'`` (mmcv's own ``_ext``), ``'ops-free'`` (mmposenc's PyTorch kernels)
        or ``'not loaded'`` (``mmcv.ops`` has not been imported yet).
    """
    if 'mmcv._ext' not in sys.modules:
        return 'not loaded'
    return 'ops-free' if using_torch_kernels() else 'compiled'


__all__ = ['mmcv_route', 'using_torch_kernels']
