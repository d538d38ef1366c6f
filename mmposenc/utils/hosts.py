"""The host packages mmposenc runs on, checked by module name and version when imported.

No host is in ``install_requires``: upstream and onedl-* share module names, not distributions.

Examples:
    >>> from mmposenc.utils.hosts import check_host
    >>> check_host('mmengine')  # doctest: +SKIP
    '0.10.7'
"""
import importlib
import re

#: ``{module: (lowest version, first version not supported or None, {family: distribution})}``
SUPPORTED = {
    'torch': ('2.6', None, {'PyPI': 'torch'}),
    'mmengine': ('0.10.0', '0.11', {'upstream': 'mmengine', 'onedl': 'onedl-mmengine'}),
    'mmcv': ('2.0.0', '2.4', {'upstream': 'mmcv or mmcv-lite', 'onedl': 'onedl-mmcv'}),
    'mmdet': ('3.3.0', '3.6', {'upstream': 'mmdet', 'onedl': 'onedl-mmdetection'}),
    'mmseg': ('1.2.0', '1.5', {'upstream': 'mmsegmentation', 'onedl': 'onedl-mmsegmentation'}),
    'mmpretrain': ('1.2.0', '1.4', {'upstream': 'mmpretrain', 'onedl': 'onedl-mmpretrain'}),
}


class HostVersionError(ImportError):
    """A host package that is missing or outside the range mmposenc supports."""


def version_tuple(version):
    """``'3.5.1'`` -> ``(3, 5, 1)``; local and pre-release tags are dropped."""
    match = re.match(r'\d+(\.\d+)*', str(version))
    if match is None:
        raise ValueError(f'not a version: {version!r}')
    return tuple(int(p) for p in match.group(0).split('.'))


def supported_range(module):
    """The range of ``module`` as a requirement string, e.g. ``'mmdet>=3.3.0,<3.6'``."""
    low, high, _ = SUPPORTED[module]
    return f'{module}>={low}' + (f',<{high}' if high else '')


def _distributions(module):
    return ' or '.join(f'{dist} ({family})' for family, dist in SUPPORTED[module][2].items())


def check_host(module, needed_by='mmposenc'):
    """Import ``module`` and check its ``__version__`` against :data:`SUPPORTED`.

    Args:
        module (str): A key of :data:`SUPPORTED`.
        needed_by (str): What needs it, for the message. Defaults to ``'mmposenc'``.

    Returns:
        str: The version found.

    Raises:
        HostVersionError: The module is missing or its version is outside the range.
    """
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name is None or exc.name.split('.')[0] != module:
            raise
        raise HostVersionError(
            f'{needed_by} needs {supported_range(module)}, which is not installed: install '
            f'{_distributions(module)}') from None
    version = str(getattr(mod, '__version__', '0'))
    low, high, _ = SUPPORTED[module]
    if version_tuple(version) < version_tuple(low) or (
            high is not None and version_tuple(version) >= version_tuple(high)):
        raise HostVersionError(
            f'{needed_by} needs {supported_range(module)}; found {module} {version} '
            f'({getattr(mod, "__file__", "?")}): install {_distributions(module)} in that '
            'range')
    return version


#: The versions of the hosts every part of mmposenc needs, checked when it is imported.
HOST_VERSIONS = {module: check_host(module) for module in ('torch', 'mmengine', 'mmcv')}
