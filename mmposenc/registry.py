"""Child registries of mmposenc (scope ``mmposenc``).

Configs whose ``default_scope`` is ``mmdet``, ``mmseg`` or ``mmpretrain`` reach our modules as
``type='mmposenc.PEG'``: mmengine resolves the ``mmposenc.`` prefix through the root registry's
children, imports ``locations`` on first use and builds the module. Nothing here registers into
mmengine's root registries.
"""
from mmengine.registry import MODELS as MMENGINE_MODELS
from mmengine.registry import OPTIM_WRAPPERS as MMENGINE_OPTIM_WRAPPERS
from mmengine.registry import TRANSFORMS as MMENGINE_TRANSFORMS
from mmengine.registry import Registry

#: Layers, backbones, detectors and data preprocessors.
MODELS = Registry(
    'model', parent=MMENGINE_MODELS, scope='mmposenc', locations=['mmposenc.models'])

#: Data transforms (dataset pipelines).
TRANSFORMS = Registry(
    'transform', parent=MMENGINE_TRANSFORMS, scope='mmposenc',
    locations=['mmposenc.datasets'])

#: Optimizer wrappers (e.g. bfloat16 autocast on CPU).
OPTIM_WRAPPERS = Registry(
    'optim_wrapper', parent=MMENGINE_OPTIM_WRAPPERS, scope='mmposenc',
    locations=['mmposenc.engine'])
