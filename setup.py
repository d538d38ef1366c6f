"""mmposenc: position encodings for vision transformers, an OpenMMLab plugin.

Like the OpenMMLab codebases, the package carries its configs, tools and model index in
``mmposenc/.mim/`` so that ``_base_ = 'mmposenc::<folder>/<file>.py'``, ``mim search mmposenc``
and ``mim train mmposenc CONFIG`` find them in an installed package. ``add_mim_extension``
makes ``mmposenc/.mim/{configs,tools,model-index.yml}`` relative symlinks to the repository's
folders (copies where the file system has no symlinks); ``package_data`` then puts the files
behind them into wheels and sdists as regular files.

Requirements: numpy only. The hosts (torch, mmengine, mmcv, mmdet, mmsegmentation, mmpretrain)
come in two families with the same module names and other distribution names (upstream
OpenMMLab, the maintained onedl-* fork): a requirement on either name would make pip install it
over the other, so none is declared; ``import mmposenc`` checks the modules and their versions
instead (``mmposenc/utils/hosts.py``). For a new environment the extras ``upstream`` and ``onedl``
name one family each. Versions tested together are pinned in requirements/<stack>.txt
(``tools/setup_env.sh`` installs them).
"""
import os
import os.path as osp
import shutil
import warnings

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py
from setuptools.command.editable_wheel import editable_wheel

ROOT = osp.dirname(osp.abspath(__file__))
MIM_FILES = ('configs', 'tools', 'model-index.yml')

# Nothing that a host family provides: see the module docstring (tests/test_packaging check that
# installing the wheel into either family changes nothing).
INSTALL_REQUIRES = ['numpy']
# One family each, for a new environment; the ranges are mmposenc/utils/hosts.py's SUPPORTED
# (tests/test_packaging/test_host_families.py checks that they agree). Both take mmcv without
# compiled ops (mmcv-lite; onedl-mmcv's sdist, built without torch, has none): mmposenc's
# PyTorch kernels run mmcv.ops.
EXTRAS_REQUIRE = {
    'upstream': [
        'mmengine>=0.10.0,<0.11', 'mmcv-lite>=2.0.0,<2.2.0', 'mmdet>=3.3.0,<3.4',
        'mmsegmentation>=1.2.0,<1.3', 'mmpretrain>=1.2.0,<1.3', 'ftfy', 'regex',
        'setuptools<81',  # mmengine 0.10.7 resolves `pkg::` config bases with pkg_resources
    ],
    'onedl': [
        'onedl-mmengine>=0.10.8,<0.11', 'onedl-mmcv>=2.3.0,<2.4', 'onedl-mmdetection>=3.4.0,<3.6',
        'onedl-mmsegmentation>=1.3.0,<1.5', 'onedl-mmpretrain>=1.3.0,<1.4', 'ftfy', 'regex',
    ],
}

# Files of .mim/ that go into the wheel (relative to mmposenc/).
MIM_PACKAGE_DATA = [
    '.mim/model-index.yml',
    '.mim/configs/**/*.py',
    '.mim/configs/**/*.yml',
    '.mim/configs/**/*.md',
    '.mim/tools/**/*.py',
    '.mim/tools/**/*.sh',
]

# The startup hook (see _mmposenc_startup.py): a top-level module, and a .pth file in
# site-packages whose line Python's `site` runs at interpreter start. build_py puts the .pth at
# the root of a regular wheel (beside the packages). An editable wheel (`pip install -e .`,
# PEP 660) holds only a finder and its own .pth for a flat layout like ours: setuptools ignores
# what build commands write and does not install data_files there, so editable_wheel adds the
# file itself (tests/test_packaging/test_startup_hook.py checks both wheels).
STARTUP_MODULE = '_mmposenc_startup'
STARTUP_PTH = 'mmposenc-startup.pth'


class build_py_with_startup_pth(build_py):
    """``build_py`` that also puts :data:`STARTUP_PTH` into the wheel's root."""

    def run(self):
        super().run()
        if not self.editable_mode:  # an editable wheel gets it from editable_wheel
            self.copy_file(osp.join(ROOT, STARTUP_PTH), osp.join(self.build_lib, STARTUP_PTH))

    def get_outputs(self, include_bytecode=True):
        return super().get_outputs(include_bytecode) + [osp.join(self.build_lib, STARTUP_PTH)]

    def get_output_mapping(self):
        return {**super().get_output_mapping(), osp.join(self.build_lib, STARTUP_PTH): STARTUP_PTH}

    def get_source_files(self):  # the sdist holds it
        return super().get_source_files() + [STARTUP_PTH]


class _StrategyWithStartupPth:
    """An editable-wheel strategy of setuptools that also writes :data:`STARTUP_PTH`."""

    def __init__(self, strategy):
        self.strategy = strategy

    def __call__(self, wheel, files, mapping):
        self.strategy(wheel, files, mapping)
        with open(osp.join(ROOT, STARTUP_PTH), 'rb') as f:
            wheel.writestr(STARTUP_PTH, f.read())

    def __enter__(self):
        self.strategy.__enter__()
        return self

    def __exit__(self, *exc_info):
        return self.strategy.__exit__(*exc_info)


class editable_wheel_with_startup_pth(editable_wheel):
    """setuptools' PEP 660 ``editable_wheel`` whose wheel also holds :data:`STARTUP_PTH`."""

    def _select_strategy(self, *args, **kwargs):
        return _StrategyWithStartupPth(super()._select_strategy(*args, **kwargs))


def get_version():
    ns = {}
    with open(osp.join(ROOT, 'mmposenc', 'version.py')) as f:
        exec(f.read(), ns)
    return ns['__version__']


def add_mim_extension():
    """Link ``configs``, ``tools`` and ``model-index.yml`` into ``mmposenc/.mim``.

    OpenMMLab's ``setup.py`` files decide between symlinks and copies from ``sys.argv``
    (``develop`` vs ``bdist_wheel``); pip's PEP 517 / PEP 660 builds (``editable_wheel``,
    ``build_wheel``) never pass those words, so this runs on every build instead: a relative
    symlink serves the editable install, and the wheel build copies the files behind it. Where
    the source is absent (building from an unpacked sdist, which holds ``mmposenc/.mim`` as
    regular files) the existing ``.mim`` entry is kept. Idempotent.
    """
    mim_dir = osp.join(ROOT, 'mmposenc', '.mim')
    os.makedirs(mim_dir, exist_ok=True)
    for name in MIM_FILES:
        src = osp.join(ROOT, name)
        dst = osp.join(mim_dir, name)
        if not osp.exists(src):
            continue
        rel = osp.relpath(src, mim_dir)
        if osp.islink(dst) and os.readlink(dst) == rel:
            continue
        if osp.islink(dst) or osp.isfile(dst):
            os.remove(dst)
        elif osp.isdir(dst):
            shutil.rmtree(dst)
        try:
            os.symlink(rel, dst)
        except OSError:  # no symlinks on this file system: copy (refreshed on every build)
            warnings.warn(f'cannot symlink {dst} -> {rel}; copying {src} instead')
            if osp.isdir(src):
                shutil.copytree(src, dst, ignore=shutil.ignore_patterns('__pycache__'))
            else:
                shutil.copyfile(src, dst)


if __name__ == '__main__':
    add_mim_extension()
    setup(
        name='mmposenc',
        version=get_version(),
        description='Position encodings for vision transformers (PEG/CPVT, PerViT, CAPE, '
        'SaPE2) as an OpenMMLab plugin',
        # projects/ (the studies: drivers, results, write-ups) stays out of the wheel
        packages=find_packages(exclude=('configs', 'configs.*', 'tools', 'tools.*', 'tests',
                                        'tests.*', 'projects', 'projects.*')),
        package_data={'mmposenc': MIM_PACKAGE_DATA},
        py_modules=[STARTUP_MODULE],
        cmdclass={'build_py': build_py_with_startup_pth,
                  'editable_wheel': editable_wheel_with_startup_pth},
        python_requires='>=3.9',
        license='Apache-2.0',
        install_requires=INSTALL_REQUIRES,
        extras_require=EXTRAS_REQUIRE,
        zip_safe=False,
    )
