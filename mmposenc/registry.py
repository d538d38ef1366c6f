"""Child registries of mmposenc (scope ``mmposenc``).

Configs whose ``default_scope`` is ``mmdet``, ``mmseg`` or ``mmpretrain`` reach our modules as
``type='mmposenc.PEG'``: mmengine resolves the ``mmposenc.`` prefix through the root registry's
children, imports ``locations`` on first use and builds the module. Nothing here registers into
mmengine's root registries.
"""
import copy

from mmengine.registry import MODELS as MMENGINE_MODELS
from mmengine.registry import OPTIM_WRAPPERS as MMENGINE_OPTIM_WRAPPERS
from mmengine.registry import TRANSFORMS as MMENGINE_TRANSFORMS
from mmengine.registry import Registry as _Registry


class Registry(_Registry):
    """A child registry whose ``build`` finds its own types whatever the default scope.

    mmengine resolves an unscoped ``type`` in the registry of the *current default scope*, not
    in the registry ``build`` was called on: inside a runner whose default scope is ``mmdet``,
    ``MODELS.build(dict(type='PEG'))`` would look in mmdet's registry and fail. Here an
    unscoped type registered in this registry gets this registry's scope prefix first; other
    types (host modules such as ``ResNet`` or ``GELU``) resolve as mmengine resolves them.
    """

    def build(self, cfg, *args, **kwargs):
        obj_type = cfg.get('type') if isinstance(cfg, dict) else None
        if isinstance(obj_type, str) and '.' not in obj_type:
            self.import_from_location()
            if obj_type in self._module_dict:
                cfg = copy.copy(cfg)
                cfg['type'] = f'{self.scope}.{obj_type}'
        return super().build(cfg, *args, **kwargs)


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
