"""Child registries of mmposenc (scope ``mmposenc``), reached from host configs as
``type='mmposenc.X'``; nothing registers into mmengine's root registries."""
import copy
import difflib
import sys

from mmengine.registry import DATA_SAMPLERS as MMENGINE_DATA_SAMPLERS
from mmengine.registry import DATASETS as MMENGINE_DATASETS
from mmengine.registry import MODELS as MMENGINE_MODELS
from mmengine.registry import OPTIM_WRAPPER_CONSTRUCTORS as MMENGINE_OPTIM_WRAPPER_CONSTRUCTORS
from mmengine.registry import OPTIM_WRAPPERS as MMENGINE_OPTIM_WRAPPERS
from mmengine.registry import TRANSFORMS as MMENGINE_TRANSFORMS
from mmengine.registry import Registry as _Registry
from mmengine.utils import get_object_from_string


class UnknownTypeError(KeyError):
    """A ``type`` that no registry knows, with the closest names this registry has."""

    def __str__(self):
        return self.args[0]


class Registry(_Registry):
    """A child registry whose ``build`` finds its own types whatever the default scope.

    An unscoped type of this registry gets its scope prefix (mmengine would look in the
    default scope's registry). An unknown type is an :class:`UnknownTypeError` listing the
    closest registered names.

    Examples:
        >>> from mmposenc.registry import MODELS, UnknownTypeError
        >>> try:
        ...     MODELS.build(dict(type='mmposenc.PGE', in_channels=8))
        ... except UnknownTypeError as err:
        ...     print(err.args[0].split('; ')[1])
        closest registered names: 'mmposenc.PEG'
    """

    def build(self, cfg, *args, **kwargs):
        obj_type = cfg.get('type') if isinstance(cfg, dict) else None
        if isinstance(obj_type, str) and '.' not in obj_type:
            self.import_from_location()
            if obj_type in self._module_dict:
                cfg = copy.copy(cfg)
                cfg['type'] = f'{self.scope}.{obj_type}'
        try:
            return super().build(cfg, *args, **kwargs)
        except UnknownTypeError:
            raise
        except KeyError as err:
            # only mmengine's "<type> is not in the ..." about this cfg's own type
            msg = err.args[0] if err.args else ''
            if not (isinstance(obj_type, str) and isinstance(msg, str)
                    and msg.startswith(f'{obj_type} is not in the')):
                raise
            hint = self._suggest(obj_type)
            if hint is None:  # not one of ours misspelt: mmengine's message says it all
                raise
            raise UnknownTypeError(f'{msg.split(". ")[0]}; {hint}') from None

    def get(self, key):
        """mmengine's ``get``; a miss reached through another registry is an error.

        Only a host registry's unanswered lookup of ``'mmposenc.X'`` raises
        :class:`UnknownTypeError`; direct lookups return ``None`` as before.
        """
        obj = super().get(key)
        if obj is not None or not isinstance(key, str):
            return obj
        caller = sys._getframe(1)
        if caller.f_code is not _Registry.get.__code__ or caller.f_locals.get('self') is self:
            return obj
        while caller is not None and caller.f_code is _Registry.get.__code__:
            caller = caller.f_back
        if caller is not None and caller.f_code is _Registry.__contains__.__code__:
            return obj  # `'mmposenc.X' in REGISTRY` stays a question
        scoped = f'{self.scope}.{key}'
        try:
            obj = get_object_from_string(scoped)
        except Exception:
            obj = None
        if obj is not None:
            return obj
        hint = self._suggest(key) or (
            'no registered name is close (the registries of mmposenc.registry list theirs '
            'in module_dict)')
        raise UnknownTypeError(f'{scoped} is not in the {self.scope}::{self.name} registry; {hint}')

    def _suggest(self, obj_type):
        """'closest registered names: ...' for a misspelt ``obj_type``, or None if none is close."""
        self.import_from_location()
        key = obj_type.split('.', 1)[1] if obj_type.startswith(f'{self.scope}.') else obj_type
        names = sorted(self._module_dict)
        by_lower = {n.lower(): n for n in names}
        close = difflib.get_close_matches(key, names, n=5, cutoff=0.6)
        close += [by_lower[n] for n in difflib.get_close_matches(key.lower(), list(by_lower),
                                                                 n=5, cutoff=0.6)
                  if by_lower[n] not in close]
        if not close:
            return None
        return 'closest registered names: ' + ', '.join(
            repr(f'{self.scope}.{n}') for n in close[:5])


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

#: Optimizer wrapper constructors (parameter groups with a summary log).
OPTIM_WRAPPER_CONSTRUCTORS = Registry(
    'optimizer wrapper constructor', parent=MMENGINE_OPTIM_WRAPPER_CONSTRUCTORS,
    scope='mmposenc', locations=['mmposenc.engine'])

#: Dataset wrappers (UniViT's random resolution).
DATASETS = Registry(
    'dataset', parent=MMENGINE_DATASETS, scope='mmposenc', locations=['mmposenc.datasets'])

#: Batch samplers (UniViT's random resolution per batch).
DATA_SAMPLERS = Registry(
    'data sampler', parent=MMENGINE_DATA_SAMPLERS, scope='mmposenc',
    locations=['mmposenc.datasets'])
