"""mmengine's default optimizer wrapper constructor, logging a summary per rule."""
import logging
from collections import OrderedDict
from typing import List, Optional, Union

import torch
import torch.nn as nn
from mmengine.logging import print_log
from mmengine.optim import DefaultOptimWrapperConstructor, OptimWrapper
from mmengine.utils.dl_utils import mmcv_full_available
from mmengine.utils.dl_utils.parrots_wrapper import _BatchNorm, _InstanceNorm
from torch.nn import GroupNorm, LayerNorm

from mmposenc.registry import OPTIM_WRAPPER_CONSTRUCTORS


def _module_group(name: str, depth: int = 2) -> str:
    """The first ``depth`` module names of a parameter name (``backbone.layer1``)."""
    parts = name.split('.')[:-1] or name.split('.')
    return '.'.join(parts[:depth])


@OPTIM_WRAPPER_CONSTRUCTORS.register_module()
class SummaryOptimWrapperConstructor(DefaultOptimWrapperConstructor):
    """``DefaultOptimWrapperConstructor`` that logs one line per rule, not per parameter.

    Same parameter groups as mmengine's; frozen parameters are counted by module, and a
    ``custom_keys`` entry matching no trainable parameter is one WARNING.

    Args:
        optim_wrapper_cfg (dict): The optimizer wrapper config, with ``optimizer``.
        paramwise_cfg (dict, optional): Parameter-wise options, as for mmengine's
            ``DefaultOptimWrapperConstructor``. Defaults to None.

    Examples:
        >>> import torch.nn as nn
        >>> model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8))
        >>> _ = model[0].requires_grad_(False)
        >>> constructor = SummaryOptimWrapperConstructor(
        ...     dict(optimizer=dict(type='SGD', lr=0.1, weight_decay=1e-4)),
        ...     dict(norm_decay_mult=0.0))
        >>> from mmengine.logging import MMLogger
        >>> _ = MMLogger.get_instance('example', log_level='WARNING')  # hides the INFO lines:
        >>> wrapper = constructor(model)  # "2 of 2 ... norm_decay_mult", "2 ... left out"
        >>> [g['weight_decay'] for g in wrapper.optimizer.param_groups]
        [0.0, 0.0]
    """

    def __init__(self, optim_wrapper_cfg: dict, paramwise_cfg: Optional[dict] = None):
        super().__init__(optim_wrapper_cfg, paramwise_cfg)
        self._reset_summary()

    def _reset_summary(self):
        self._rules = OrderedDict()  # (rule, options) -> [count, first parameter name]
        self._frozen = OrderedDict()  # module group -> count
        self._duplicates = []
        self._num_params = 0
        self._key_hits = {key: [0, 0] for key in self.paramwise_cfg.get('custom_keys', {})}

    def __call__(self, model: nn.Module) -> OptimWrapper:
        self._reset_summary()
        optim_wrapper = super().__call__(model)
        if self.paramwise_cfg:
            self._log_summary(type(getattr(model, 'module', model)).__name__)
        return optim_wrapper

    def add_params(self,
                   params: List[dict],
                   module: nn.Module,
                   prefix: str = '',
                   is_dcn_module: Optional[Union[int, float]] = None) -> None:
        """Add the parameters of ``module`` and its children to ``params`` (mmengine's rules).

        Args:
            params (list[dict]): The parameter groups, extended in place.
            module (nn.Module): The module whose parameters are added.
            prefix (str): The module's name in the model. Defaults to ''.
            is_dcn_module (int | float, optional): Whether ``module`` is in a deformable
                convolution (its offsets follow ``dcn_offset_lr_mult``). Defaults to None.
        """
        cfg = self.paramwise_cfg
        custom_keys = cfg.get('custom_keys', {})
        # as mmengine: alphabetical, then the longest key first
        sorted_keys = sorted(sorted(custom_keys.keys()), key=len, reverse=True)
        bias_lr_mult = cfg.get('bias_lr_mult', None)
        bias_decay_mult = cfg.get('bias_decay_mult', None)
        norm_decay_mult = cfg.get('norm_decay_mult', None)
        dwconv_decay_mult = cfg.get('dwconv_decay_mult', None)
        flat_decay_mult = cfg.get('flat_decay_mult', None)
        bypass_duplicate = cfg.get('bypass_duplicate', False)
        dcn_offset_lr_mult = cfg.get('dcn_offset_lr_mult', None)

        is_norm = isinstance(module, (_BatchNorm, _InstanceNorm, GroupNorm, LayerNorm))
        is_dwconv = isinstance(module, torch.nn.Conv2d) and module.in_channels == module.groups

        for name, param in module.named_parameters(recurse=False):
            full_name = f'{prefix}.{name}' if prefix else name
            param_group = {'params': [param]}
            if bypass_duplicate and self._is_in(param_group, params):
                self._duplicates.append(full_name)
                continue
            key = next((k for k in sorted_keys if k in f'{prefix}.{name}'), None)
            if key is not None:
                self._key_hits[key][int(param.requires_grad)] += 1
            if not param.requires_grad:
                group = _module_group(full_name)
                self._frozen[group] = self._frozen.get(group, 0) + 1
                continue

            rules = []
            if key is not None:  # a custom key overrides every other rule
                rules.append(f'custom_keys[{key!r}]')
                lr_mult = custom_keys[key].get('lr_mult', 1.)
                param_group['lr'] = self.base_lr * lr_mult
                if self.base_wd is not None:
                    decay_mult = custom_keys[key].get('decay_mult', 1.)
                    param_group['weight_decay'] = self.base_wd * decay_mult
                for k, v in custom_keys[key].items():
                    param_group[k] = v
            else:
                # bias_lr_mult: every bias but those of norms and deformable convolutions
                if name == 'bias' and not (is_norm or is_dcn_module) and \
                        bias_lr_mult is not None:
                    rules.append('bias_lr_mult')
                    param_group['lr'] = self.base_lr * bias_lr_mult
                if (prefix.find('conv_offset') != -1 and is_dcn_module
                        and dcn_offset_lr_mult is not None
                        and isinstance(module, torch.nn.Conv2d)):
                    rules.append('dcn_offset_lr_mult')
                    param_group['lr'] = self.base_lr * dcn_offset_lr_mult
                if self.base_wd is not None:
                    if is_norm and norm_decay_mult is not None:
                        rules.append('norm_decay_mult')
                        param_group['weight_decay'] = self.base_wd * norm_decay_mult
                    elif (name == 'bias' and not is_dcn_module
                          and bias_decay_mult is not None):
                        rules.append('bias_decay_mult')
                        param_group['weight_decay'] = self.base_wd * bias_decay_mult
                    elif is_dwconv and dwconv_decay_mult is not None:
                        rules.append('dwconv_decay_mult')
                        param_group['weight_decay'] = self.base_wd * dwconv_decay_mult
                    elif (param.ndim == 1 and not is_dcn_module
                          and flat_decay_mult is not None):
                        rules.append('flat_decay_mult')
                        param_group['weight_decay'] = self.base_wd * flat_decay_mult
            params.append(param_group)
            self._num_params += 1
            options = tuple((k, v) for k, v in param_group.items() if k != 'params')
            if options:
                entry = self._rules.setdefault((' + '.join(rules), repr(options)),
                                               [0, full_name, options])
                entry[0] += 1

        if mmcv_full_available():
            from mmcv.ops import DeformConv2d, ModulatedDeformConv2d
            is_dcn_module = isinstance(module, (DeformConv2d, ModulatedDeformConv2d))
        else:
            is_dcn_module = False
        for child_name, child_mod in module.named_children():
            child_prefix = f'{prefix}.{child_name}' if prefix else child_name
            self.add_params(params, child_mod, prefix=child_prefix, is_dcn_module=is_dcn_module)

    def _log_summary(self, model_name: str) -> None:
        for (rule, _), (count, example, options) in self._rules.items():
            values = ', '.join(f'{k}={v}' for k, v in options)
            print_log(f'paramwise_cfg: {count} of {self._num_params} optimized parameters get '
                      f'{values} from {rule} (e.g. {example})', logger='current')
        if self._frozen:
            groups = ', '.join(f'{g} ({n})' for g, n in self._frozen.items())
            print_log(f'paramwise_cfg: {sum(self._frozen.values())} parameters with '
                      f'requires_grad=False are left out of the optimizer: {groups}',
                      logger='current')
        if self._duplicates:
            print_log(f'paramwise_cfg: {len(self._duplicates)} shared parameters are added '
                      f'once (bypass_duplicate=True): {", ".join(self._duplicates[:5])}'
                      + (', ...' if len(self._duplicates) > 5 else ''), logger='current')
        for key, (frozen, trainable) in self._key_hits.items():
            if trainable:
                continue
            what = ('only parameters with requires_grad=False' if frozen else
                    'no parameter')
            print_log(f'paramwise_cfg.custom_keys[{key!r}] matches {what} of {model_name}: '
                      'it has no effect; fix or remove the key (a key matches the parameters '
                      'whose name in model.named_parameters() contains it)',
                      logger='current', level=logging.WARNING)
