"""mmposenc's startup hook: ``_base_ = 'mmposenc::...'`` without a prior ``import mmposenc``.

mmengine parses a config's ``_base_`` before it imports the config's ``custom_imports``, and
refuses ``mmposenc::<folder>/<file>.py`` unless ``mmposenc`` was registered with it first (see
``mmposenc/utils/config_package.py``). The hosts' own entry points (mmdet's / mmseg's /
mmpretrain's ``tools/train.py`` and ``tools/test.py``, ``mim train``, ``DetInferencer``, ...)
never import mmposenc before parsing. So mmposenc installs ``mmposenc-startup.pth`` into
site-packages (a regular and an editable install alike); Python's :mod:`site` runs its one line
when the interpreter starts, which imports this module and calls :func:`install` unless both
``MMPOSENC_NO_STARTUP_HOOK`` and ``MMPOSENC_NO_TORCH_OPS`` are set (to any non-empty value).

:func:`install` only puts a finder in front of :data:`sys.meta_path`: nothing is imported at
startup (no mmengine, torch or mmposenc). The finder answers one module name, ``mmengine.config``,
and lets the regular finders load it; once it has loaded, the finder runs
:func:`register_config_package` and takes itself out of :data:`sys.meta_path`. That applies
``mmposenc.utils.config_package.register_config_package`` -- the very function
``import mmposenc`` calls -- loaded from its file, so the ``mmposenc`` package (and torch) is
still not imported. Model types (``type='mmposenc.X'``) are imported later, as before, by the
config's ``custom_imports`` and the mmposenc registries' ``locations``.

:func:`install` also puts the two finders of ``mmposenc/ops/ext_finder.py`` (loaded from its
file, standard library only) on :data:`sys.meta_path`: where mmcv has no compiled ops
(``mmcv-lite``, ``onedl-mmcv`` built without them), ``import mmcv.ops`` then runs on mmposenc's
PyTorch kernels, in the hosts' own tools too. ``MMPOSENC_NO_TORCH_OPS=1`` turns this part off,
``MMPOSENC_NO_STARTUP_HOOK=1`` the registration; with both set the ``.pth`` line imports
nothing.

The hook never breaks an interpreter: the ``.pth`` line swallows any error of this module, and
a registration that fails (mmposenc half uninstalled) leaves mmengine as it is; the only trace
is a warning when mmposenc's files are there but their registration raises.
"""
import os
import os.path as osp
import sys

PACKAGE = 'mmposenc'
#: The module whose import triggers the registration.
TRIGGER = 'mmengine.config'
#: Setting this environment variable (any non-empty value) turns the hook off; read by the
#: ``.pth`` line, before this module is imported.
ENV_OFF = 'MMPOSENC_NO_STARTUP_HOOK'
#: Name of the private copy of ``mmposenc/utils/config_package.py`` the hook loads.
MODULE_NAME = '_mmposenc_config_package'
#: Name of the private copy of ``mmposenc/ops/ext_finder.py`` the hook loads.
EXT_FINDER_NAME = '_mmposenc_ext_finder'


def install_ext_finder():
    """Install mmposenc's ``mmcv._ext`` finders (``mmposenc/ops/ext_finder.py``, beside this
    module in a wheel and in the source tree alike) without importing mmposenc, nor anything
    the interpreter has not loaded already (the file is loaded with the import system's own
    frozen machinery). Never raises.

    Returns:
        bool: Whether they are installed.
    """
    try:
        path = osp.join(osp.dirname(osp.abspath(__file__)), PACKAGE, 'ops', 'ext_finder.py')
        if not osp.isfile(path):
            return False  # mmposenc is gone (the .pth left behind)
        module = sys.modules.get(EXT_FINDER_NAME)
        if module is None or getattr(module, '__file__', None) != path:
            machinery = sys.modules['_frozen_importlib_external']
            spec = machinery.spec_from_file_location(EXT_FINDER_NAME, path)
            module = sys.modules['_frozen_importlib'].module_from_spec(spec)
            spec.loader.exec_module(module)
            sys.modules[EXT_FINDER_NAME] = module
        return module.install()
    except Exception:
        return False


def register_config_package():
    """Run ``mmposenc.utils.config_package.register_config_package`` without importing the
    ``mmposenc`` package. Does nothing when mmposenc is not installed; never raises.

    Returns:
        bool: Whether the registration ran.
    """
    try:
        import importlib.util
        spec = importlib.util.find_spec(PACKAGE)  # locates the package, does not import it
        if spec is None or not spec.submodule_search_locations:
            return False  # mmposenc is gone (the .pth left behind): nothing to register
        path = osp.join(list(spec.submodule_search_locations)[0], 'utils', 'config_package.py')
        if not osp.isfile(path):
            return False
        module = sys.modules.get(MODULE_NAME)
        if module is None or getattr(module, '__file__', None) != path:
            module_spec = importlib.util.spec_from_file_location(MODULE_NAME, path)
            module = importlib.util.module_from_spec(module_spec)
            module_spec.loader.exec_module(module)
            sys.modules[MODULE_NAME] = module
        module.register_config_package()
        return True
    except Exception as exc:  # a broken install must not break mmengine
        import warnings
        warnings.warn(
            f'mmposenc startup hook ({__file__}): could not register mmposenc with mmengine\'s '
            f'config loader ({type(exc).__name__}: {exc}); configs with an "mmposenc::" base '
            f'need "import mmposenc" before they are parsed. Set {ENV_OFF}=1 to turn the hook '
            'off.', RuntimeWarning, stacklevel=2)
        return False


class _RegisteringLoader:
    """Wraps the loader of ``mmengine.config``: after the module has run, it gets its own
    loader back and :func:`register_config_package` runs."""

    def __init__(self, loader, finder):
        self.loader = loader
        self.finder = finder

    def create_module(self, spec):
        create = getattr(self.loader, 'create_module', None)
        return create(spec) if create is not None else None

    def exec_module(self, module):
        self.loader.exec_module(module)
        module.__loader__ = self.loader
        spec = getattr(module, '__spec__', None)
        if spec is not None and spec.loader is self:
            spec.loader = self.loader
        self.finder.uninstall()
        register_config_package()

    def __getattr__(self, name):  # get_source, is_package, get_resource_reader, ...
        if name in ('loader', 'finder'):  # not set yet (copy, pickle): no recursion
            raise AttributeError(name)
        return getattr(self.loader, name)


class MMEngineConfigFinder:
    """A :data:`sys.meta_path` finder that answers only ``mmengine.config``: it finds the
    module with the finders after it and wraps the loader (:class:`_RegisteringLoader`)."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != TRIGGER:
            return None
        for finder in list(sys.meta_path):
            find_spec = getattr(finder, 'find_spec', None)
            if finder is self or find_spec is None:
                continue
            spec = find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.loader is not None and hasattr(spec.loader, 'exec_module'):
            spec.loader = _RegisteringLoader(spec.loader, self)
        return spec

    def uninstall(self):
        """Take this finder out of :data:`sys.meta_path`."""
        while self in sys.meta_path:
            sys.meta_path.remove(self)


#: mim's module whose ``get_installed_path`` learns where an editable mmposenc lives.
MIM_TRIGGER = 'mim.utils.utils'


def patch_mim(module):
    """Make ``module.get_installed_path('mmposenc')`` (mim's) the folder Python imports
    mmposenc from. Never raises.

    mim joins the distribution's location with ``mmposenc`` or, where that folder does not
    exist, with the first name of its ``top_level.txt``. A PEP 660 editable install
    (``pip install -e .``) keeps only its metadata in site-packages: there mim looked for
    ``site-packages/_mmposenc_startup/model-index.yml`` and ``mim search`` / ``mim train``
    failed. The package's own folder holds ``.mim/`` in either install.
    """
    try:
        original = module.get_installed_path
        if getattr(original, '_mmposenc', False):
            return

        def get_installed_path(package):
            if package == PACKAGE:
                import importlib.util
                spec = importlib.util.find_spec(PACKAGE)
                if spec is not None and spec.submodule_search_locations:
                    return list(spec.submodule_search_locations)[0]
            return original(package)

        get_installed_path.__doc__ = original.__doc__
        get_installed_path._mmposenc = True
        module.get_installed_path = get_installed_path
    except Exception:
        pass


class _PatchingLoader:
    """Wraps the loader of :data:`MIM_TRIGGER`: after the module has run, it gets its own
    loader back and :func:`patch_mim` patches it."""

    def __init__(self, loader, finder):
        self.loader = loader
        self.finder = finder

    def create_module(self, spec):
        create = getattr(self.loader, 'create_module', None)
        return create(spec) if create is not None else None

    def exec_module(self, module):
        self.loader.exec_module(module)
        module.__loader__ = self.loader
        spec = getattr(module, '__spec__', None)
        if spec is not None and spec.loader is self:
            spec.loader = self.loader
        self.finder.uninstall()
        patch_mim(module)

    def __getattr__(self, name):
        if name in ('loader', 'finder'):
            raise AttributeError(name)
        return getattr(self.loader, name)


class MimFinder:
    """A :data:`sys.meta_path` finder that answers only :data:`MIM_TRIGGER` and wraps its
    loader (:class:`_PatchingLoader`)."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != MIM_TRIGGER:
            return None
        for finder in list(sys.meta_path):
            find_spec = getattr(finder, 'find_spec', None)
            if finder is self or find_spec is None:
                continue
            spec = find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.loader is not None and hasattr(spec.loader, 'exec_module'):
            spec.loader = _PatchingLoader(spec.loader, self)
        return spec

    def uninstall(self):
        """Take this finder out of :data:`sys.meta_path`."""
        while self in sys.meta_path:
            sys.meta_path.remove(self)


def install_mim_patch():
    """Patch mim now if it is loaded, else put :class:`MimFinder` (once) at the front of
    :data:`sys.meta_path`. Never raises."""
    try:
        if MIM_TRIGGER in sys.modules:
            patch_mim(sys.modules[MIM_TRIGGER])
        elif not any(isinstance(f, MimFinder) for f in sys.meta_path):
            sys.meta_path.insert(0, MimFinder())
    except Exception:
        pass


def install():
    """Register now if ``mmengine.config`` is loaded already, else put the finder (once) at
    the front of :data:`sys.meta_path`. Called by ``mmposenc-startup.pth``; never
    raises.

    Returns:
        bool: Whether a finder was added to :data:`sys.meta_path`.
    """
    install_ext_finder()  # off with MMPOSENC_NO_TORCH_OPS (ext_finder reads it)
    try:
        if os.environ.get(ENV_OFF):
            return False
        install_mim_patch()
        if TRIGGER in sys.modules:
            register_config_package()
            return False
        if any(isinstance(f, MMEngineConfigFinder) for f in sys.meta_path):
            return False
        sys.meta_path.insert(0, MMEngineConfigFinder())  # asked before the path finders
        return True
    except Exception:
        return False
