"""configs/pervit: load, build under mmpretrain's ImageClassifier, train/eval steps, and the
paramwise keys name real parameters."""
import glob
import os.path as osp

import pytest
import torch

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
# the ImageNet configs (detection / segmentation: test_pervit_dense_configs.py)
CONFIGS = sorted(glob.glob(osp.join(REPO, 'configs', 'pervit', '*_in1k.py')))
IDS = [osp.basename(c) for c in CONFIGS]
SMALL = dict(embed_dims=[16, 24, 32, 40], depths=[1, 1, 1, 1], num_heads=2,
             stem_channels=[8, 16])


def load(path):
    pytest.importorskip('mmpretrain')
    from mmengine.config import Config
    return Config.fromfile(path)


def build(cfg, small=True):
    from mmengine.registry import init_default_scope
    from mmpretrain.registry import MODELS
    init_default_scope('mmpretrain')
    model_cfg = cfg.model.copy()
    if small and model_cfg.backbone.type == 'mmposenc.PerViT':
        model_cfg.backbone.arch = SMALL
        model_cfg.head.in_channels = 40
    elif small:
        model_cfg.backbone.arch = dict(embed_dims=48, num_layers=2, num_heads=3,
                                       feedforward_channels=96)
        model_cfg.head.in_channels = 48
    return MODELS.build(model_cfg)


def test_folder_has_configs_and_readme():
    assert len(CONFIGS) == 4
    assert osp.exists(osp.join(REPO, 'configs', 'pervit', 'README.md'))


@pytest.mark.parametrize('path', CONFIGS, ids=IDS)
def test_config_builds_trains_and_predicts(path):
    from mmpretrain.structures import DataSample
    cfg = load(path)
    model = build(cfg)
    x = torch.randn(2, 3, 64, 64)
    samples = [DataSample().set_gt_label(1) for _ in range(2)]
    losses = model(x, samples, mode='loss')
    assert losses['loss'] > 0
    losses['loss'].backward()
    model.eval()
    with torch.no_grad():
        preds = model(torch.randn(1, 3, 64, 96), mode='predict')
    assert preds[0].pred_score.shape == (1000, )


@pytest.mark.parametrize('path', CONFIGS, ids=IDS)
def test_paramwise_keys_match_parameters(path):
    cfg = load(path)
    model = build(cfg)
    names = [n for n, _ in model.named_parameters()]
    keys = cfg.optim_wrapper.get('paramwise_cfg', {}).get('custom_keys', {})
    for key in keys:
        assert any(key in n for n in names), f'{key} matches no parameter'


def test_full_size_tiny_config_builds_with_peripheral_init():
    cfg = load(osp.join(REPO, 'configs', 'pervit', 'pervit-tiny_8xb128_in1k.py'))
    model = build(cfg, small=False)
    model.init_weights()  # the classifier-level TruncNormal must not undo Eq. 9
    ppe = model.backbone.blocks[0].attn.ppe
    assert torch.all(ppe.proj1.weight == 0.02)
    assert torch.all(model.backbone.distance_embed.weight == -0.02)
    n = sum(p.numel() for p in model.parameters())
    assert abs(n / 1e6 - 7.6) / 7.6 < 0.02
