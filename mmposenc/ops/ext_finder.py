"""Import hooks of the ops-free route: ``mmcv._ext`` from :mod:`mmposenc.ops.mmcv_ext` where mmcv
has no compiled ops. Imports nothing at module level that an interpreter has not loaded at
start: the startup hook loads this file then, before torch or mmcv.

Two finders on :data:`sys.meta_path`:

- :class:`TorchExtFinder`, *last*: asked for ``mmcv._ext`` only after every regular finder
  found nothing, so a compiled ``_ext`` always wins; it loads ``mmcv_ext.py`` under that name.
- :class:`MMCVOpsWatcher`, *first*: once ``mmcv.ops`` has loaded on those kernels, it calls
  ``guard_unsupported_modules`` so that an op with missing kernels fails when it is built.

``MMPOSENC_NO_TORCH_OPS=1`` turns both off; ``MMPOSENC_MMCV_OPS=torch`` puts
:class:`TorchExtFinder` first, so that the PyTorch kernels replace a compiled ``_ext`` too (to
compare the routes in one environment).
"""
import os
import os.path as osp
import sys

EXT_NAME = 'mmcv._ext'
OPS_NAME = 'mmcv.ops'
ENV_OFF = 'MMPOSENC_NO_TORCH_OPS'
ENV_FORCE = 'MMPOSENC_MMCV_OPS'
KERNELS_FILE = osp.join(osp.dirname(osp.abspath(__file__)), 'mmcv_ext.py')


def using_torch_kernels():
    """Whether the loaded ``mmcv._ext`` is :mod:`mmposenc.ops.mmcv_ext`."""
    ext = sys.modules.get(EXT_NAME)
    return ext is not None and getattr(ext, '__file__', None) == KERNELS_FILE


def _guard():
    if using_torch_kernels():
        sys.modules[EXT_NAME].guard_unsupported_modules()


class TorchExtFinder:
    """Finds ``mmcv._ext`` in :data:`KERNELS_FILE`; placed after the regular finders."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != EXT_NAME or os.environ.get(ENV_OFF):
            return None
        import importlib.util
        return importlib.util.spec_from_file_location(EXT_NAME, KERNELS_FILE)


class _GuardingLoader:
    """The loader of ``mmcv.ops``, followed by :func:`_guard`."""

    def __init__(self, loader):
        self.loader = loader

    def create_module(self, spec):
        create = getattr(self.loader, 'create_module', None)
        return create(spec) if create is not None else None

    def exec_module(self, module):
        try:
            self.loader.exec_module(module)
        finally:
            module.__loader__ = self.loader
            if getattr(module, '__spec__', None) is not None:
                module.__spec__.loader = self.loader
        _guard()

    def __getattr__(self, name):
        if name == 'loader':
            raise AttributeError(name)
        return getattr(self.loader, name)


class MMCVOpsWatcher:
    """Wraps the loader of ``mmcv.ops`` in :class:`_GuardingLoader`; placed first."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != OPS_NAME or os.environ.get(ENV_OFF):
            return None
        for finder in list(sys.meta_path):
            if finder is self or isinstance(finder, MMCVOpsWatcher):
                continue
            find_spec = getattr(finder, 'find_spec', None)
            spec = find_spec(fullname, path, target) if find_spec else None
            if spec is not None:
                break
        else:
            return None
        if spec.loader is not None and hasattr(spec.loader, 'exec_module'):
            spec.loader = _GuardingLoader(spec.loader)
        return spec


def install():
    """Put both finders on :data:`sys.meta_path` (once each); guard now if ``mmcv.ops`` has
    loaded already. Never raises.

    Returns:
        bool: Whether the finders are installed.
    """
    try:
        if os.environ.get(ENV_OFF):
            return False
        if not any(type(f).__name__ == 'TorchExtFinder' for f in sys.meta_path):
            if os.environ.get(ENV_FORCE) == 'torch':
                sys.meta_path.insert(0, TorchExtFinder())
            else:
                sys.meta_path.append(TorchExtFinder())
        if not any(type(f).__name__ == 'MMCVOpsWatcher' for f in sys.meta_path):
            sys.meta_path.insert(0, MMCVOpsWatcher())
        if OPS_NAME in sys.modules:
            _guard()
        return True
    except Exception:
        return False
