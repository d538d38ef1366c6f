"""Helpers shared by the PEG-backbone config tests: build a shipped config in its host with
shrunken depth, and read which weight decay the optimizer gives every parameter."""
import copy

from mmengine.config import Config
from mmengine.registry import init_default_scope


def host_models(scope):
    """The MODELS registry of the host named by a config's ``default_scope``."""
    if scope == 'mmdet':
        import mmdet.models  # noqa: F401
        from mmdet.registry import MODELS
    elif scope == 'mmseg':
        import mmseg.models  # noqa: F401
        from mmseg.registry import MODELS
    else:
        import mmpretrain.models  # noqa: F401
        from mmpretrain.registry import MODELS
    return MODELS


def shrink_depth(backbone):
    """Keep the config's widths and heads but only one block per stage (CPVT: one layer per
    output, enough for its PEGs), so that building every shipped config stays fast. The named
    arch is checked to exist first."""
    from mmposenc.models.backbones import CPVT, PVTPEG, SwinPEG
    zoo = {'mmposenc.CPVT': CPVT, 'mmposenc.PVTPEG': PVTPEG, 'mmposenc.SwinPEG': SwinPEG}
    if backbone.type in zoo:
        cls = zoo[backbone.type]
        arch = backbone.get('arch', 'tiny')
        if isinstance(arch, str):
            assert arch in cls.arch_zoo, f'{arch} is not an arch of {cls.__name__}'
            arch = dict(cls.arch_zoo[arch])
        if backbone.type == 'mmposenc.CPVT':
            out = backbone.get('out_indices', -1)
            out = [out] if isinstance(out, int) else list(out)
            num_layers = max(max(backbone.get('peg_positions', (0, ))) + 1, len(out))
            if backbone.get('peg_on', 'qkv') == 'qk':
                num_layers += 1  # a layer after the PEG to receive its queries and keys
            if any(i >= 0 for i in out):  # dense configs: the last len(out) layers
                backbone.out_indices = tuple(range(num_layers - len(out), num_layers))
            arch['num_layers'] = num_layers
        else:
            arch['depths'] = [1] * len(arch['depths'])
        backbone.arch = arch
    elif backbone.type in ('mmdet.PyramidVisionTransformer', 'PyramidVisionTransformer'):
        backbone.num_layers = [1] * len(backbone.num_layers)


def build(path, shrink=True):
    """(cfg, model) of a shipped config, built in its host's scope."""
    cfg = Config.fromfile(path)
    init_default_scope(cfg.default_scope)
    if shrink:
        shrink_depth(cfg.model.backbone)
    return cfg, host_models(cfg.default_scope).build(cfg.model)


def weight_decay_of(model, optim_wrapper_cfg):
    """{parameter name: weight decay of its param group} of the config's optimizer."""
    from mmengine.optim import build_optim_wrapper
    optim_wrapper_cfg = copy.deepcopy(optim_wrapper_cfg)
    optim_wrapper_cfg.optimizer.setdefault('weight_decay', 0.05)
    wrapper = build_optim_wrapper(model, optim_wrapper_cfg)
    id_to_name = {id(p): n for n, p in model.named_parameters()}
    return {id_to_name[id(p)]: group['weight_decay']
            for group in wrapper.optimizer.param_groups for p in group['params']}


#: What mmposenc adds to a host's config without changing what is trained: the dataset check
#: (``mmposenc.Checked<HostDataset>``, the host's dataset plus a check of the data when it is
#: built) and the optimizer constructor that logs one line per rule
#: (``mmposenc.SummaryOptimWrapperConstructor``: mmengine's parameter groups exactly, tested in
#: tests/test_engine/test_optim_constructor.py).
CHECKED_PREFIX = 'mmposenc.Checked'
SUMMARY_CONSTRUCTOR = 'mmposenc.SummaryOptimWrapperConstructor'
#: mmdet's ResNet with the padding-exact mode (issue 20; same parameters and state dict, the
#: host's ResNet wherever no image of the batch is padded, and with padding_exact=False).
EXACT_RESNET = 'mmposenc.PaddingExactResNet'
#: mmposenc's detectors that only bind the image sizes for a padding-exact backbone, and the
#: host class each extends (same arguments)
EXACT_HOSTS = {'mmposenc.PaddingExactMask2Former': 'Mask2Former'}


def as_host(value):
    """A plain copy of a config value as the host would write it: no ``_scope_`` keys, the
    dataset check's types mapped back to the host's dataset, our optimizer constructor
    dropped and the padding-exact ResNet (and Mask2Former) mapped back to mmdet's, so that a
    shipped config compares equal to the host config it extends."""
    if isinstance(value, dict):
        out = {k: as_host(v) for k, v in value.items() if k != '_scope_'}
        if out.get('type') == EXACT_RESNET:
            out['type'] = 'ResNet'
            out.pop('padding_exact', None)
        if out.get('type') in EXACT_HOSTS:
            out['type'] = EXACT_HOSTS[out['type']]
        if isinstance(out.get('type'), str) and out['type'].startswith(CHECKED_PREFIX):
            out['type'] = out['type'][len(CHECKED_PREFIX):]
        if out.get('constructor') == SUMMARY_CONSTRUCTOR:
            del out['constructor']
        return out
    if isinstance(value, (list, tuple)):
        return [as_host(v) for v in value]
    return value
