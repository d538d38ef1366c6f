"""Every shipped CPVT / PVT+PEG / Swin+PEG config loads, builds and runs a tiny forward, and
its weight-decay ``custom_keys`` really match parameters (OpenMMLab's Twins configs name a
key that matches nothing)."""
import glob
import os.path as osp

import pytest
import torch

from conftest import REPO_ROOT

CONFIGS = sorted(
    p for method in ('cpvt', 'pvt_peg', 'swin_peg')
    for p in glob.glob(osp.join(REPO_ROOT, 'configs', method, '*.py')))


def _host_models(scope):
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


def _shrink_depth(backbone):
    """Keep the config's widths and heads but only one block per stage, so that building
    every shipped config stays fast. The named arch is checked to exist first."""
    from mmposenc.models.backbones import CPVT, PVTPEG, SwinPEG
    zoo = {'mmposenc.CPVT': CPVT, 'mmposenc.PVTPEG': PVTPEG, 'mmposenc.SwinPEG': SwinPEG}
    if backbone.type in zoo:
        cls = zoo[backbone.type]
        arch = backbone.get('arch', 'tiny')
        if isinstance(arch, str):
            assert arch in cls.arch_zoo, f'{arch} is not an arch of {cls.__name__}'
            arch = dict(cls.arch_zoo[arch])
        if backbone.type == 'mmposenc.CPVT':
            arch['num_layers'] = max(backbone.get('peg_positions', (0, ))) + 1
        else:
            arch['depths'] = [1] * len(arch['depths'])
        backbone.arch = arch
    elif backbone.type == 'mmdet.PyramidVisionTransformer':
        backbone.num_layers = [1] * len(backbone.num_layers)


def _build(path):
    from mmengine.config import Config
    from mmengine.registry import init_default_scope
    cfg = Config.fromfile(path)
    init_default_scope(cfg.default_scope)
    _shrink_depth(cfg.model.backbone)
    return cfg, _host_models(cfg.default_scope).build(cfg.model)


def test_configs_are_shipped():
    names = {osp.basename(p) for p in CONFIGS}
    for n in ('cpvt-tiny_4xb256_in1k.py', 'cpvt-small-0to5_4xb256_in1k.py',
              'cpvt-base-gap_16xb64_in1k.py', 'pvt-peg-medium_8xb128_in1k.py',
              'retinanet_pvt-peg-s_fpn_ms-3x_coco.py', 'fpn_pvt-peg-m_8xb4-80k_ade20k-512x512.py',
              'fpn_pvt-t_8xb4-80k_ade20k-512x512.py', 'swin-peg-tiny_16xb64_in1k.py'):
        assert n in names


@pytest.mark.parametrize('path', CONFIGS, ids=[osp.basename(p) for p in CONFIGS])
def test_config_builds_runs_and_custom_keys_match(path):
    from mmengine.optim import build_optim_wrapper
    cfg, model = _build(path)
    model.eval()
    x = torch.rand(1, 3, 64, 64)
    with torch.no_grad():
        if cfg.default_scope == 'mmpretrain':
            out = model(x, mode='tensor')
            assert out.shape == (1, cfg.model.head.num_classes)
        else:
            feats = model.extract_feat(x)
            assert all(torch.isfinite(f).all() for f in feats)

    names = [n for n, _ in model.named_parameters()]
    paramwise = cfg.optim_wrapper.get('paramwise_cfg', {}) or {}
    for key in paramwise.get('custom_keys', {}):
        assert any(key in n for n in names), f'custom key {key!r} matches no parameter'

    pegs = [n for n in names if '.pegs.' in n]
    if 'PEG' in cfg.model.backbone.type or 'CPVT' in cfg.model.backbone.type:
        assert pegs, 'a PEG backbone without PEG parameters'
        # the optimizer really puts every PEG parameter in a zero-decay group
        cfg.optim_wrapper.optimizer.setdefault('weight_decay', 0.05)
        wrapper = build_optim_wrapper(model, cfg.optim_wrapper)
        decay_of = {}
        id_to_name = {id(p): n for n, p in model.named_parameters()}
        for group in wrapper.optimizer.param_groups:
            for p in group['params']:
                decay_of[id_to_name[id(p)]] = group['weight_decay']
        assert all(decay_of[n] == 0 for n in pegs)
        assert any(d > 0 for d in decay_of.values())
