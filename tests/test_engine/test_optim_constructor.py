"""mmposenc.SummaryOptimWrapperConstructor: mmengine's parameter groups, logged as one line per
rule; building the optimizer of a shipped config logs no warning and no repeated line.

mmengine's ``DefaultOptimWrapperConstructor`` logs one ``paramwise_options`` line per option and
parameter and one WARNING per parameter with ``requires_grad=False``: 117 warnings and 168
lines for DETR-R50 (frozen stem, stage 1 and batch norms), 109 lines for CPVT-Ti.
"""
import collections
import contextlib
import logging
import os
import os.path as osp
import uuid
import warnings

import pytest
import torch
import torch.nn as nn

from conftest import REPO_ROOT

CONSTRUCTOR = 'mmposenc.SummaryOptimWrapperConstructor'
CONFIGS = osp.join(REPO_ROOT, 'configs')
# one shipped config per family, built at its real size
FAMILY_CONFIGS = [
    'peg_detr/detr-peg_r50_16xb2-50e_coco.py',
    'peg_conditional_detr/conditional-detr-peg_r50_8xb2-50e_coco.py',
    'peg_dab_detr/dab-detr-peg_r50_8xb2-50e_coco.py',
    'peg_deformable_detr/deformable-detr-peg_r50_16xb2-50e_coco.py',
    'peg_dino/dino-4scale-peg_r50_8xb2-12e_coco.py',
    'peg_mask2former/mask2former-peg_r50_8xb2-lsj-50e_coco.py',
    'peg_mask2former/mask2former-peg_r50_8xb2-160k_ade20k-512x512.py',
    'pvt_peg/retinanet_pvt-peg-t_fpn_1x_coco.py',
    'swin_peg/mask-rcnn_swin-peg-t-p4-w7_fpn_1x_coco.py',
    'cpvt/fpn_cpvt-s_8xb4-40k_ade20k-512x512.py',
    'pervit/retinanet_pervit-t_fpn_1x_coco.py',
    'cpvt/cpvt-tiny_4xb256_in1k.py',
    'pervit/pervit-tiny_8xb128_in1k.py',
    'pvt_peg/pvt-peg-tiny_8xb128_in1k.py',
    'swin_peg/swin-peg-tiny_16xb64_in1k.py',
    'cape/vit-base-p16_cape_16xb64_in1k.py',
    'pe_zoo/vit-small-p4_peg_1xb128-400e_cifar10.py',
    'sape2/vit-small-p4_sape2-k_1xb128-400e_cifar10.py',
    'peg_deformable_detr/deformable-detr-peg_r18-half_1xb4-400i_shapes.py',
    'smoke/detr_r18_1xb2-8it_coco128.py',
]
MULT_KEYS = ('bias_lr_mult', 'bias_decay_mult', 'norm_decay_mult', 'dwconv_decay_mult',
             'flat_decay_mult', 'dcn_offset_lr_mult')


class _Records(logging.Handler):

    def __init__(self):
        super().__init__(logging.INFO)  # what a Runner (log_level INFO) prints
        self.records = []

    def emit(self, record):
        self.records.append(record)

    @property
    def messages(self):
        return [r.getMessage() for r in self.records]

    @property
    def warnings(self):
        return [r.getMessage() for r in self.records if r.levelno >= logging.WARNING]


_Caught = collections.namedtuple('_Caught', 'message category ours')


@contextlib.contextmanager
def _captured():
    """The records of a fresh current MMLogger, and every Python warning a run would print
    (Python hides DeprecationWarnings outside ``__main__``; import-time warnings of the
    environment, e.g. pkg_resources, are left out); ``ours`` marks a warning raised while
    mmposenc code was on the stack (directly or through a host function it calls), unless a
    registry build lies between our innermost frame and the warning: then a host module that
    the config names warned in its own construction (mmseg's decode heads warn about
    ``build_loss`` and ``avg_non_ignore`` whichever segmentor builds them, ours included)."""
    import traceback

    import mmengine
    from mmengine.logging import MMLogger

    import mmposenc
    package = osp.dirname(mmposenc.__file__) + os.sep
    registry = osp.join(osp.dirname(mmengine.__file__), 'registry') + os.sep
    logger = MMLogger.get_instance(f'test-optim-{uuid.uuid4().hex}', log_level='INFO')
    handler = _Records()
    logger.addHandler(handler)
    caught = []

    def record(message, category, filename, lineno, file=None, line=None):
        stack = traceback.extract_stack()
        if issubclass(category, (DeprecationWarning, PendingDeprecationWarning)) or any(
                f.filename.startswith('<frozen importlib') for f in stack):
            return  # hidden by Python's default filters, or raised by an import
        mine = [i for i, f in enumerate(stack) if f.filename.startswith(package)]
        ours = bool(mine) and not any(
            f.filename.startswith(registry) for f in stack[mine[-1] + 1:])
        caught.append(_Caught(str(message), category, ours))

    try:
        with warnings.catch_warnings():
            warnings.simplefilter('always')
            warnings.showwarning = record
            yield handler, caught
    finally:
        logger.removeHandler(handler)


def _groups(optim_wrapper, model):
    """(parameter name, options) of every parameter group, in order."""
    names = {id(p): n for n, p in model.named_parameters(remove_duplicate=False)}
    return [([names[id(p)] for p in g['params']],
             sorted((k, v) for k, v in g.items() if k != 'params'))
            for g in optim_wrapper.optimizer.param_groups]


def _build(optim_wrapper_cfg, model, constructor=None):
    """``build_optim_wrapper`` as the Runner calls it; ``constructor`` replaces the config's."""
    from mmengine.optim import build_optim_wrapper
    cfg = dict(optim_wrapper_cfg)
    if constructor is not None:
        cfg['constructor'] = constructor
    return build_optim_wrapper(model, cfg)


class _Net(nn.Module):
    """Every kind of parameter the rules tell apart: conv, depthwise conv, BN, LN, GN, linear
    with bias, a 1-d parameter, a frozen stem and a weight shared by two modules."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8))
        self.stem.requires_grad_(False)
        self.dw = nn.Conv2d(8, 8, 3, groups=8)
        self.bn = nn.BatchNorm2d(8)
        self.gn = nn.GroupNorm(2, 8)
        self.ln = nn.LayerNorm(8)
        self.pos_embed = nn.Parameter(torch.zeros(8))
        self.head = nn.Linear(8, 4)
        self.tied = nn.Linear(8, 4)
        self.tied.weight = self.head.weight


PARAMWISE = {
    'custom_keys': dict(custom_keys={'head': dict(lr_mult=0.1), 'pos_embed':
                                     dict(decay_mult=0.0), 'stem': dict(lr_mult=0.5)}),
    'mults': dict(bias_lr_mult=2.0, bias_decay_mult=0.0, norm_decay_mult=0.0,
                  dwconv_decay_mult=0.5, flat_decay_mult=0.1),
    'keys+mults': dict(custom_keys={'.ln': dict(lr_mult=0.3, decay_mult=0.0)},
                       norm_decay_mult=0.0, bias_lr_mult=2.0),
    'bypass_duplicate': dict(bias_decay_mult=0.0, bypass_duplicate=True),
}


@pytest.mark.parametrize('paramwise_cfg', list(PARAMWISE.values()), ids=list(PARAMWISE))
def test_parameter_groups_are_mmengines(paramwise_cfg):
    """Same groups, options and order as mmengine's constructor; frozen parameters left out."""
    model = _Net()
    cfg = dict(optimizer=dict(type='SGD', lr=0.1, momentum=0.9, weight_decay=1e-4),
               paramwise_cfg=paramwise_cfg)
    if not paramwise_cfg.get('bypass_duplicate'):
        model.tied = nn.Linear(8, 4)  # duplicates without bypass_duplicate are an error
    ours = _groups(_build(cfg, model, CONSTRUCTOR), model)
    with _captured():
        theirs = _groups(_build(cfg, model, 'DefaultOptimWrapperConstructor'), model)
    assert ours == theirs
    assert not any(n.startswith('stem.') for names, _ in ours for n in names)


def test_one_line_per_rule_and_one_for_the_frozen_parameters():
    model = _Net()
    model.tied = nn.Linear(8, 4)
    cfg = dict(optimizer=dict(type='SGD', lr=0.1, weight_decay=1e-4),
               paramwise_cfg=dict(norm_decay_mult=0.0, bias_decay_mult=0.0,
                                  custom_keys={'pos_embed': dict(decay_mult=0.0)}))
    with _captured() as (log, caught):
        _build(cfg, model, CONSTRUCTOR)
    msgs = log.messages
    assert not log.warnings and not caught
    assert not any('paramwise_options' in m for m in msgs)
    # norms (bn, gn, ln: 6 parameters), the other biases (dw, head, tied: 3), pos_embed
    assert any(m.startswith('paramwise_cfg: 6 of 13 optimized parameters get weight_decay=0.0 '
                            'from norm_decay_mult') for m in msgs), msgs
    assert any(m.startswith('paramwise_cfg: 3 of 13 ') and 'bias_decay_mult' in m
               for m in msgs), msgs
    assert any("custom_keys['pos_embed']" in m for m in msgs), msgs
    frozen = [m for m in msgs if 'requires_grad=False' in m]
    assert frozen == ['paramwise_cfg: 4 parameters with requires_grad=False are left out of '
                      'the optimizer: stem.0 (2), stem.1 (2)']
    assert len(msgs) == 4


@pytest.mark.parametrize('key,what', [('pos_block', 'no parameter'),
                                      ('stem', 'only parameters with requires_grad=False')])
def test_a_custom_key_without_effect_is_one_warning(key, what):
    """A key matching nothing (mmseg's Twins configs name 'pos_block', which no module has)
    or only frozen parameters: one WARNING naming it, not silence."""
    model = _Net()
    model.tied = nn.Linear(8, 4)
    cfg = dict(optimizer=dict(type='SGD', lr=0.1, weight_decay=1e-4),
               paramwise_cfg=dict(custom_keys={key: dict(decay_mult=0.0)}))
    with _captured() as (log, _):
        _build(cfg, model, CONSTRUCTOR)
    assert log.warnings == [
        f"paramwise_cfg.custom_keys['{key}'] matches {what} of _Net: it has no effect; fix or "
        'remove the key (a key matches the parameters whose name in model.named_parameters() '
        'contains it)']


def _shipped(rel):
    from mmengine.config import Config
    from mmengine.registry import MODELS, init_default_scope

    import mmposenc  # noqa: F401
    cfg = Config.fromfile(osp.join(CONFIGS, rel))
    init_default_scope(cfg.default_scope)
    return cfg, MODELS.build(cfg.model)


@pytest.mark.parametrize('rel', FAMILY_CONFIGS)
def test_shipped_config_builds_its_optimizer_quietly(rel):
    """The model of a shipped config builds without a Python warning from our modules (PerViT's
    stem warned 'Unnecessary conv bias before batch/instance norm' 4 times), its optimizer
    with no WARNING, no repeated line and one line per rule (before: up to 117
    requires_grad warnings and 366 paramwise_options lines), and the same parameter groups
    as mmengine's constructor gives."""
    with _captured() as (build_log, build_warnings):
        cfg, model = _shipped(rel)
    # mmseg's own decode head warns (build_loss, avg_non_ignore): host code, not ours
    assert not [w.message for w in build_warnings if w.ours]
    with _captured() as (log, caught):
        optim_wrapper = _build(cfg.optim_wrapper, model)
    msgs = build_log.messages + log.messages
    assert not build_log.warnings + log.warnings, build_log.warnings + log.warnings
    assert not caught, [w.message for w in caught]
    repeated = {m: n for m, n in collections.Counter(msgs).items() if n > 1}
    assert not repeated, repeated
    paramwise = cfg.optim_wrapper.get('paramwise_cfg', {})
    rules = len(paramwise.get('custom_keys', {})) + sum(k in paramwise for k in MULT_KEYS)
    assert len(log.messages) <= 2 * rules + 1, log.messages
    with _captured():
        reference = _build(cfg.optim_wrapper, model, 'DefaultOptimWrapperConstructor')
    assert _groups(optim_wrapper, model) == _groups(reference, model)


# Every shipped config with a paramwise_cfg uses the summary constructor: asserted on the configs
# tests/test_configs/test_mmposenc_base_reuse.py loads anyway
# (test_every_shipped_config_with_paramwise_cfg_uses_the_summary_constructor there).

# A training run of a shipped config through tools/train.py repeats no warning and no line:
# asserted on the log of tests/test_tools/test_train_test_tools.py::test_smoke_train_then_test
# (the shipped smoke config from a folder outside the repository; one process for both).
