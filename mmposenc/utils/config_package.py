"""Let mmengine's config loader resolve ``_base_ = 'mmposenc::<folder>/<file>.py'``.

Runs on ``import mmposenc`` and from the startup hook; see docs/user_guides/own_project.md.
"""
import os.path as osp

PACKAGE = 'mmposenc'
#: The folder of the ``mmposenc`` package this file belongs to (it holds ``.mim/``).
PACKAGE_DIR = osp.dirname(osp.dirname(osp.abspath(__file__)))

# mmengine 0.10.7 resolves ``pkg::folder/file.py`` in four steps: ``pkg`` must be a key of
# ``MODULE2PACKAGE`` (added here); ``is_installed(<distribution>)``; ``get_installed_path``
# gives the package folder (wrong for an editable install: answered here); the file is then
# found through ``<folder>/.mim/model-index.yml`` and ``.mim/configs/`` (made by ``setup.py``).


def _fork_module(package):
    """The host module of upstream distribution ``package`` when only a fork provides it.

    Without it onedl-mmengine refuses every ``mmseg::`` base as "not installed".
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
    """Wrap mmengine's ``is_installed``: a host only a fork provides counts as installed."""

    def is_installed_or_forked(package: str) -> bool:
        return is_installed(package) or _fork_module(package) is not None

    is_installed_or_forked.__wrapped__ = is_installed
    is_installed_or_forked.answers_forks = True
    return is_installed_or_forked


def _mmposenc_aware(get_installed_path):
    """Wrap mmengine's ``get_installed_path``: ``'mmposenc'`` -> :data:`PACKAGE_DIR`.

    A host only a fork provides maps to its module's folder; others are unchanged.
    """

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

    Idempotent; adds ``'mmposenc'`` to mmengine's ``MODULE2PACKAGE`` and wraps its look-ups.

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
        # registered for another copy of the package: the imported one wins
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
# Without ``.mim`` (made by ``setup.py``) mmengine's two look-ups of an external base are
# answered from ``<repository>/model-index.yml`` and ``<repository>/configs/``.


def source_checkout_root(package_dir=PACKAGE_DIR):
    """The repository around ``package_dir`` when it is a source checkout without ``.mim``.

    Returns:
        str | None: The repository root, or None when ``.mim`` exists or there is no checkout.
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

    Wraps the two functions ``mmengine.config.config`` calls for an external base. Idempotent.
    """
    from mmengine.config import config as config_module
    for name, wrap in (('_get_external_cfg_path', _checkout_aware_cfg_path),
                       ('_get_external_cfg_base_path', _checkout_aware_base_path)):
        current = getattr(config_module, name)
        if not getattr(current, 'answers_source_checkout', False):
            setattr(config_module, name, wrap(current))


# ------------------------------------------------ the scope of an mmposenc:: base
# mmengine stamps ``_scope_='pkg'`` on the dicts of a ``pkg::`` base. Our configs are host
# configs (``default_scope`` mmdet / mmseg / mmpretrain; our types spelt ``'mmposenc.X'``), so
# under that stamp host types are not found, or mmengine's root class of the same name is
# built instead (``Resize``). An ``mmposenc::`` base therefore gets scope None, as by path.


def _unscoped_mmposenc_base(original):
    """Wrap mmengine's ``Config._get_cfg_path``: an ``mmposenc::`` base gets scope ``None``."""

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

    Idempotent, also across the two copies of this module (package and startup hook).

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
