"""Let mmengine's config loader resolve ``_base_ = 'mmposenc::<folder>/<file>.py'``.

How mmengine 0.10.7 resolves ``pkg::folder/file.py`` (``Config._get_cfg_path``):

1. ``mmengine.config.utils._get_package_and_cfg_path`` asserts that ``pkg`` is a key of
   ``mmengine.config.utils.MODULE2PACKAGE`` (``PKG2PROJECT`` is the same dict), a module-level
   table from import name to pip distribution name. It lists OpenMMLab's own codebases and
   offers no registration function: any other package fails with
   ``AssertionError: mmengine does not support to load <pkg> config.``
2. ``mmengine.utils.is_installed(<distribution>)`` must be true (pkg_resources, then importlib).
3. ``mmengine.utils.get_installed_path(<distribution>)`` gives the package folder as
   ``<location of the distribution's metadata>/<module name>``.
4. ``_get_cfg_metainfo`` reads ``<folder>/.mim/model-index.yml`` and every ``metafile.yml`` it
   imports (a missing or malformed one breaks every ``mmposenc::`` base); the file is then
   ``<folder>/.mim/configs/<folder>/<file>.py`` (``setup.py`` fills ``mmposenc/.mim``).

:func:`register_config_package` adds ``'mmposenc'`` to that table (step 1) and answers step 3
for ``mmposenc`` only: ``get_installed_path`` as seen by ``mmengine.config.config`` (the name
``Config._get_cfg_path`` calls) is wrapped so that ``'mmposenc'`` maps to the folder of this
package. For an installed wheel that is the folder mmengine computes itself
(``site-packages/mmposenc``, tested in a fresh environment). For an editable install
(``pip install -e .``, PEP 660) mmengine's answer is wrong: the distribution metadata sits in
site-packages while the code stays in the source tree, so ``site-packages/mmposenc`` does not
exist. Every other package goes to mmengine's function unchanged. It also makes an
``mmposenc::`` base load exactly as the same file named by path: mmengine would stamp
``_scope_='mmposenc'`` on the base's dicts, and the host types they name would then be looked up
in mmposenc's registries (:func:`register_base_scope`, and the comment above it).

When it runs. The table must be filled before a config with an ``mmposenc::`` base is parsed,
and ``custom_imports`` in that config cannot do it (mmengine resolves ``_base_`` before it
imports ``custom_imports``); the hosts' entry points (mmdet's / mmseg's / mmpretrain's
``tools/train.py`` and ``tools/test.py``, ``mim train``, the inferencers) never import mmposenc
first. So it runs twice, idempotently: on ``import mmposenc``, and from the startup hook that
mmposenc installs: ``mmposenc-startup.pth`` in site-packages imports the top-level module
``_mmposenc_startup`` when the interpreter starts, which waits until ``mmengine.config`` is
imported and then runs :func:`register_config_package` of this file, loaded from its path
without importing the ``mmposenc`` package (which is why this module imports nothing but the
standard library). ``MMPOSENC_NO_STARTUP_HOOK=1`` turns the hook off; then ``mmposenc`` must be
imported before parsing, as our ``tools/train.py`` and ``tools/test.py`` do.

mim (``mim search`` / ``mim train``, separate processes that never import mmposenc) locates the
package the same way as step 3 and needs, with an editable install, the repository first on
``PYTHONPATH`` (its ``mmposenc.egg-info`` then comes first); see the README.
"""
import os.path as osp

PACKAGE = 'mmposenc'
#: The folder of the ``mmposenc`` package this file belongs to (it holds ``.mim/`` after
#: ``setup.py``), also when the startup hook loads this file without importing the package.
PACKAGE_DIR = osp.dirname(osp.dirname(osp.abspath(__file__)))


def _fork_module(package):
    """The host module whose upstream distribution is ``package`` where a fork provides the
    module under another distribution, else None.

    ``MODULE2PACKAGE`` maps a host's module to upstream's distribution (``'mmseg'`` ->
    ``'mmsegmentation'``). Under the onedl-* fork that distribution is
    ``onedl-mmsegmentation``: onedl-mmengine 0.10.12 looks ``mmsegmentation`` up as a
    distribution, then as a module, finds neither and refuses every ``mmseg::`` base as "not
    installed" (``mmdet::`` works only because its module and distribution share the name).
    """
    import importlib.util

    from mmengine.config.utils import MODULE2PACKAGE
    for module, dist in MODULE2PACKAGE.items():
        if dist == package and module != package:
            spec = importlib.util.find_spec(module)
            if spec is not None and spec.origin is not None:
                return module
    return None


def _fork_aware(is_installed):
    """Wrap mmengine's ``is_installed``: a host distribution that only a fork provides
    (:func:`_fork_module`) counts as installed."""

    def is_installed_or_forked(package: str) -> bool:
        return is_installed(package) or _fork_module(package) is not None

    is_installed_or_forked.__wrapped__ = is_installed
    is_installed_or_forked.answers_forks = True
    return is_installed_or_forked


def _mmposenc_aware(get_installed_path):
    """Wrap mmengine's ``get_installed_path`` so that ``'mmposenc'`` maps to
    :data:`PACKAGE_DIR` and a host that only a fork provides to its module's folder
    (:func:`_fork_module`); other packages go to ``get_installed_path`` unchanged."""

    def get_installed_path_with_mmposenc(package: str) -> str:
        if package == PACKAGE:
            return PACKAGE_DIR
        try:
            return get_installed_path(package)
        except Exception:
            module = _fork_module(package)
            if module is None:
                raise
            import importlib.util
            return osp.dirname(importlib.util.find_spec(module).origin)

    get_installed_path_with_mmposenc.__wrapped__ = get_installed_path
    get_installed_path_with_mmposenc.answers_mmposenc = True
    get_installed_path_with_mmposenc.package_dir = PACKAGE_DIR
    return get_installed_path_with_mmposenc


def register_config_package() -> None:
    """Make ``_base_ = 'mmposenc::<folder>/<file>.py'`` loadable by mmengine's ``Config``.

    Idempotent. See the module docstring for the mechanism and its limits.

    Examples:
        >>> import mmposenc  # calls register_config_package()
        >>> from mmengine.config.utils import MODULE2PACKAGE
        >>> MODULE2PACKAGE['mmposenc']
        'mmposenc'
    """
    from mmengine.config import config as config_module
    from mmengine.config import utils as config_utils

    config_utils.MODULE2PACKAGE.setdefault(PACKAGE, PACKAGE)
    current = config_module.get_installed_path
    if getattr(current, 'answers_mmposenc', False) and current.package_dir != PACKAGE_DIR:
        # registered for another copy (the startup hook found one before this package was
        # imported from a checkout put first on sys.path): the imported package wins
        current = current.__wrapped__
    if not getattr(current, 'answers_mmposenc', False):
        config_module.get_installed_path = _mmposenc_aware(current)
    # under the onedl-* fork, `mmseg::` bases (see _fork_module)
    if not getattr(config_module.is_installed, 'answers_forks', False):
        config_module.is_installed = _fork_aware(config_module.is_installed)
    # a source checkout that was never installed has no .mim: read its configs/ instead
    register_source_checkout()
    # an mmposenc:: base is loaded as the same file by path: no _scope_='mmposenc' stamps
    register_base_scope()


# ------------------------------------------------ a source checkout that was never installed
# mmengine reads an ``mmposenc::`` base from ``<package>/.mim/`` (steps 3-4 above), which
# ``setup.py`` makes when the package is installed. A clone imported from its own folder (its
# ``tools/`` put the checkout first on ``sys.path``, or ``PYTHONPATH=/path/to/clone``) has no
# ``.mim``, and every ``mmposenc::`` base failed with ``FileNotFoundError: .../mmposenc/.mim/
# model-index.yml``. There the repository holds what ``.mim`` would link to, so mmengine's two
# look-ups of an external base are answered from ``<repository>/model-index.yml`` and
# ``<repository>/configs/``, for this package only and only while it has no ``.mim``. Nothing
# is written into the checkout.


def source_checkout_root(package_dir=PACKAGE_DIR):
    """The repository around ``package_dir`` when it is a source checkout without ``.mim``.

    Returns:
        str | None: the repository root (it holds ``model-index.yml`` and ``configs/``), or
        None when ``package_dir/.mim/model-index.yml`` exists (an installed package, or an
        editable install) or the folder above is not a checkout.
    """
    if osp.isfile(osp.join(package_dir, '.mim', 'model-index.yml')):
        return None
    root = osp.dirname(package_dir)
    if osp.isfile(osp.join(root, 'model-index.yml')) and osp.isdir(osp.join(root, 'configs')):
        return root
    return None


def _mmposenc_checkout(package_path):
    """:func:`source_checkout_root` of ``package_path`` if it is an ``mmposenc`` package."""
    if osp.basename(osp.normpath(package_path)) != PACKAGE:
        return None
    return source_checkout_root(package_path)


def _cfg_metainfo(root, cfg_name):
    """mmengine's ``_get_cfg_metainfo`` with ``root`` in place of ``<package>/.mim``."""
    from mmengine.fileio import load
    cfg_dict = {}
    for meta_path in load(osp.join(root, 'model-index.yml'))['Import']:
        for model_cfg in load(osp.join(root, meta_path)).get('Models', []):
            if 'Config' in model_cfg:
                cfg_dict.setdefault(model_cfg['Config'].partition('/')[-1], model_cfg)
    if cfg_name not in cfg_dict:
        raise ValueError(f'Expected configs: {cfg_dict.keys()}, but got {cfg_name}')
    return cfg_dict[cfg_name]


def _checkout_aware_cfg_path(original):
    """Wrap mmengine's ``_get_external_cfg_path(package_path, cfg_file)``."""

    def get_external_cfg_path(package_path, cfg_file):
        root = _mmposenc_checkout(package_path)
        if root is None:
            return original(package_path, cfg_file)
        from mmengine.utils import check_file_exist
        model_cfg = _cfg_metainfo(root, cfg_file.split('.')[0])
        cfg_path = osp.join(root, model_cfg['Config'])
        check_file_exist(cfg_path)
        return cfg_path

    get_external_cfg_path.__wrapped__ = original
    get_external_cfg_path.answers_source_checkout = True
    return get_external_cfg_path


def _checkout_aware_base_path(original):
    """Wrap mmengine's ``_get_external_cfg_base_path(package_path, cfg_name)``."""

    def get_external_cfg_base_path(package_path, cfg_name):
        root = _mmposenc_checkout(package_path)
        if root is None:
            return original(package_path, cfg_name)
        from mmengine.utils import check_file_exist
        cfg_path = osp.join(root, 'configs', cfg_name)
        check_file_exist(cfg_path)
        return cfg_path

    get_external_cfg_base_path.__wrapped__ = original
    get_external_cfg_base_path.answers_source_checkout = True
    return get_external_cfg_base_path


def register_source_checkout() -> None:
    """Let ``mmposenc::`` bases resolve from the checkout when the package has no ``.mim``.

    Wraps the two functions ``mmengine.config.config`` calls for an external base; every other
    package, and an mmposenc package folder that has ``.mim``, goes to mmengine's functions
    unchanged.
    Idempotent.
    """
    from mmengine.config import config as config_module
    for name, wrap in (('_get_external_cfg_path', _checkout_aware_cfg_path),
                       ('_get_external_cfg_base_path', _checkout_aware_base_path)):
        current = getattr(config_module, name)
        if not getattr(current, 'answers_source_checkout', False):
            setattr(config_module, name, wrap(current))


# ------------------------------------------------ the scope of an mmposenc:: base
# For a base ``pkg::folder/file.py`` mmengine 0.10.7 (``Config._file2dict``) takes ``pkg`` as the
# base's scope: ``Config._get_cfg_path`` returns it and ``Config._dict_to_config_dict(base,
# scope)`` writes ``_scope_='pkg'`` into every outermost dict of the base that has a ``type``
# and no ``_scope_`` yet (a model, each transform of a top-level pipeline list, an optimizer
# wrapper, each scheduler, hook, loop, evaluator, the visualizer, a TTA model ...; dicts nested
# in them are not stamped, dicts that came from a host base such as ``mmdet::`` already carry
# ``_scope_='mmdet'`` and keep it). At build time ``build_from_cfg`` pops ``_scope_`` and makes
# it the default scope while that dict and everything nested in it is built, so an unscoped
# type is looked up in that scope's registries and their parents only.
#
# That is right for a host's own configs (mmdet's types live in the scope ``mmdet``) and wrong
# for ours: an mmposenc config is a host config (its ``default_scope`` is ``mmdet``, ``mmseg``
# or ``mmpretrain``; our own types are always spelt ``'mmposenc.X'``), and the registries of
# the scope ``mmposenc`` hold only mmposenc's modules with mmengine's root as parent. With the
# stamp, a host type that our file names (``ImageClassifier``, ``LinearClsHead``, ``Lamb``,
# ``DetDataPreprocessor``, ``ResNet``, ``DeformableDETRHead``, ``ResizeEdge``, ``PackDetInputs``
# ...) is not found, and a name that mmengine's / mmcv's root registry has too
# (``LoadAnnotations``, ``Resize``, ``RandomFlip``) silently builds the root's class instead of
# the host's. Scope prefixes in our files (``type='mmdet.PackDetInputs'``) would not do: a
# prefixed type does not switch the default scope for what is nested in it, and the hosts'
# inferencers find pipeline steps by their bare type (``DetInferencer`` looks for
# ``'LoadImageFromFile'``, ``MMSegInferencer`` deletes ``'LoadAnnotations'``).
#
# So an ``mmposenc::`` base gets no scope (``None``, what mmengine gives a base named by path):
# it is loaded exactly as the same file inherited by path, every type is built in the scope the
# user's config builds it in (the ``default_scope`` it inherits from our file, or the
# ``_scope_`` of a host base). Other packages' bases keep mmengine's behaviour.
# (``Config._parse_scope``, which would turn the ``scope`` attribute of a base's dicts into
# ``_scope_`` when the user's config accesses ``_base_.x``, is called on the config's plain
# top-level dict in mmengine 0.10.7 and changes nothing; with no scope there is none to set.)


def _unscoped_mmposenc_base(original):
    """Wrap mmengine's ``Config._get_cfg_path(cfg_path, filename) -> (path, scope)`` so that an
    ``mmposenc::`` base has scope ``None``; every other base is answered unchanged."""

    def get_cfg_path(cfg_path, filename):
        path, scope = original(cfg_path, filename)
        if scope == PACKAGE:
            scope = None
        return path, scope

    get_cfg_path.__wrapped__ = original
    get_cfg_path.unscoped_mmposenc = True
    return get_cfg_path


def register_base_scope() -> None:
    """Load ``_base_ = 'mmposenc::<folder>/<file>.py'`` without mmengine's ``_scope_`` stamps.

    Wraps ``mmengine.config.Config._get_cfg_path`` (see the comment above for why). Idempotent,
    also across the two copies of this module (``import mmposenc`` and the startup hook).

    Examples:
        >>> import mmposenc  # calls register_config_package(), which calls this
        >>> from mmengine.config import Config
        >>> Config._get_cfg_path('mmposenc::smoke/detr_r18_1xb2-8it_coco128.py', '')[1] is None
        True
    """
    from mmengine.config import Config
    current = Config.__dict__['_get_cfg_path']
    func = current.__func__ if isinstance(current, staticmethod) else current
    if not getattr(func, 'unscoped_mmposenc', False):
        Config._get_cfg_path = staticmethod(_unscoped_mmposenc_base(func))
