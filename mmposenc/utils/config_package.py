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
exist. Every other package goes to mmengine's function unchanged.

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


def _mmposenc_aware(get_installed_path):
    """Wrap mmengine's ``get_installed_path`` so that ``'mmposenc'`` maps to
    :data:`PACKAGE_DIR`; other packages go to ``get_installed_path`` unchanged."""

    def get_installed_path_with_mmposenc(package: str) -> str:
        if package == PACKAGE:
            return PACKAGE_DIR
        return get_installed_path(package)

    get_installed_path_with_mmposenc.__wrapped__ = get_installed_path
    get_installed_path_with_mmposenc.answers_mmposenc = True
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
    if not getattr(current, 'answers_mmposenc', False):
        config_module.get_installed_path = _mmposenc_aware(current)
