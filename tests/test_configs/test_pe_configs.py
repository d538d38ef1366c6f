"""configs/cape, configs/sape2, configs/pe_zoo: they load, build, run and their
weight-decay keys name real parameters."""
import glob
import os.path as osp

import pytest
import torch

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
CONFIGS = sorted(
    glob.glob(osp.join(REPO, 'configs', 'cape', '*.py')) +
    glob.glob(osp.join(REPO, 'configs', 'sape2', '*.py')) +
    glob.glob(osp.join(REPO, 'configs', 'pe_zoo', '*.py')))
IDS = [osp.relpath(c, osp.join(REPO, 'configs')) for c in CONFIGS]


def load(path):
    pytest.importorskip('mmpretrain')
    from mmengine.config import Config
    return Config.fromfile(path)


def build_small(cfg):
    """Build the config's classifier with a 2-layer, 64-dim backbone (same encodings)."""
    from mmengine.registry import init_default_scope
    from mmpretrain.registry import MODELS
    init_default_scope('mmpretrain')
    model_cfg = cfg.model.copy()
    model_cfg.backbone.arch = dict(embed_dims=64, num_layers=2, num_heads=2,
                                   feedforward_channels=128)
    model_cfg.head.in_channels = 64
    return MODELS.build(model_cfg)


def test_all_config_folders_have_files_and_readmes():
    for folder in ('cape', 'sape2', 'pe_zoo'):
        assert glob.glob(osp.join(REPO, 'configs', folder, '*.py')), folder
        assert osp.exists(osp.join(REPO, 'configs', folder, 'README.md')), folder


@pytest.mark.parametrize('path', CONFIGS, ids=IDS)
def test_config_builds_and_runs(path):
    """The config builds and runs, and every key of paramwise_cfg.custom_keys names at least
    one parameter (mmseg's Twins configs exclude 'pos_block' from decay, but nothing is
    called that)."""
    cfg = load(path)
    assert cfg.model.backbone.type == 'mmposenc.PEViT'
    model = build_small(cfg)
    keys = cfg.optim_wrapper.get('paramwise_cfg', {}).get('custom_keys', {})
    assert keys, 'expected custom_keys'
    names = [f'.{n}' for n, _ in model.named_parameters()]
    for key in keys:
        assert any(key in n for n in names), f'custom key {key!r} matches no parameter'
    model.init_weights()
    size = cfg.model.backbone.img_size
    x = torch.randn(2, 3, size, size)
    from mmpretrain.structures import DataSample
    samples = [DataSample().set_gt_label(1) for _ in range(2)]
    assert model(x, samples, mode='loss')['loss'] > 0
    model.eval()
    with torch.no_grad():  # other resolutions run without changes
        assert model(torch.randn(1, 3, size + size // 2, size), mode='tensor').shape[0] == 1


def test_cape_config_uses_the_paper_vit_defaults():
    pe = load(osp.join(REPO, 'configs', 'cape', 'vit-base-p16_cape_16xb64_in1k.py')
              ).model.backbone.pos_encoding
    assert (pe.max_global_shift, pe.max_local_shift, pe.max_global_scaling) == (0.5, 'auto',
                                                                              1.4)


def test_univit_config_preprocessor_and_tta():
    cfg = load(osp.join(REPO, 'configs', 'cape', 'vit-base-p16_cape-univit_16xb64_in1k.py'))
    from mmengine.registry import init_default_scope
    from mmpretrain.registry import MODELS
    init_default_scope('mmpretrain')
    pre = MODELS.build(cfg.model.data_preprocessor)
    assert pre.sizes == tuple(range(128, 321, 32))
    data = dict(inputs=[torch.randint(0, 255, (3, 224, 224), dtype=torch.uint8)] * 2)
    out = pre(data, training=True)
    assert out['inputs'].shape[-2:] == (pre.last_size, pre.last_size)
    assert pre(data, training=False)['inputs'].shape[-2:] == (224, 224)
    assert cfg.tta_model.offsets == (-32, 0, 32)
