"""mmposenc: position encodings for vision transformers, an OpenMMLab plugin."""
import os.path as osp

from setuptools import find_packages, setup


def get_version():
    ns = {}
    with open(osp.join(osp.dirname(__file__), 'mmposenc', 'version.py')) as f:
        exec(f.read(), ns)
    return ns['__version__']


setup(
    name='mmposenc',
    version=get_version(),
    description='Position encodings for vision transformers (PEG/CPVT, PerViT, CAPE, SaPE2) '
    'as an OpenMMLab plugin',
    packages=find_packages(exclude=('configs', 'tools', 'tests')),
    python_requires='>=3.9',
    # versions are pinned in requirements/pins.txt and installed by tools/setup_env.sh
    install_requires=['mmengine>=0.10', 'mmcv>=2.0,<2.2', 'torch>=2.0'],
    zip_safe=False,
)
