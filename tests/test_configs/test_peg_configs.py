"""Every shipped CPVT / PVT+PEG / Swin+PEG config loads, builds and runs a tiny forward, and
its weight-decay ``custom_keys`` really match parameters (OpenMMLab's Twins configs name a
key that matches nothing)."""
import glob
import os.path as osp

import pytest
import torch

from conftest import REPO_ROOT
from peg_config_utils import build, weight_decay_of

CONFIGS = sorted(
    p for method in ('cpvt', 'pvt_peg', 'swin_peg')
    for p in glob.glob(osp.join(REPO_ROOT, 'configs', method, '*.py')))


def test_configs_are_shipped():
    names = {osp.basename(p) for p in CONFIGS}
    for n in ('cpvt-tiny_4xb256_in1k.py', 'cpvt-small-0to5_4xb256_in1k.py',
              'cpvt-base-gap_16xb64_in1k.py', 'pvt-peg-medium_8xb128_in1k.py',
              'retinanet_pvt-peg-s_fpn_ms-3x_coco.py', 'fpn_pvt-peg-m_8xb4-40k_ade20k-512x512.py',
              'fpn_pvt-t_8xb4-40k_ade20k-512x512.py', 'swin-peg-tiny_16xb64_in1k.py'):
        assert n in names


@pytest.mark.parametrize('path', CONFIGS, ids=[osp.basename(p) for p in CONFIGS])
def test_config_builds_runs_and_custom_keys_match(path):
    cfg, model = build(path)
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

    # the backbone's PEGs (a PEG detector's encoder PEGs keep the detector recipe's decay)
    pegs = [n for n in names if n.startswith('backbone.') and '.pegs.' in n]
    if ('PEG' in cfg.model.backbone.type or 'CPVT' in cfg.model.backbone.type) and \
            cfg.model.backbone.get('with_peg', True):
        assert pegs, 'a PEG backbone without PEG parameters'
        # the optimizer really puts every PEG parameter in a zero-decay group
        decay_of = weight_decay_of(model, cfg.optim_wrapper)
        assert all(decay_of[n] == 0 for n in pegs)
        assert any(d > 0 for d in decay_of.values())
