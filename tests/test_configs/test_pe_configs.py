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


def test_univit_config_lambda_one_random_resolution_and_tta():
    """UniViT (CAPE Sec. 5.1.2): CAPE without global scaling (lambda = 1), one size per batch
    from 128..320 (step 32) applied by the pipeline's RandomResizedCrop on the source image,
    resolution TTA at r - 32, r, r + 32 from the source (tests/test_models/test_univit.py
    shows the pixels)."""
    cfg = load(osp.join(REPO, 'configs', 'cape', 'vit-base-p16_cape-univit_16xb64_in1k.py'))
    pe = cfg.model.backbone.pos_encoding
    assert pe.type == 'mmposenc.CAPE2d' and pe.max_global_scaling == 1.0
    assert (pe.max_global_shift, pe.max_local_shift) == (0.5, 'auto')
    loader = cfg.train_dataloader
    assert loader.batch_sampler.type == 'mmposenc.RandomResolutionBatchSampler'
    assert list(loader.batch_sampler.sizes) == list(range(128, 321, 32))
    assert loader.dataset.type == 'mmposenc.RandomResolutionDataset'
    inner = loader.dataset.dataset
    assert inner.type == 'ImageNet' and inner.split == 'train'
    assert [t.type for t in inner.pipeline].count('RandomResizedCrop') == 1
    assert 'data_preprocessor' not in cfg.model  # no tensor-level resize left
    assert cfg.tta_model.type == 'mmposenc.ResolutionTTAClassifier'
    views = cfg.tta_pipeline[1].transforms[0]
    assert [v.transforms[1].crop_size for v in views] == [192, 224, 256]
    # the CAPE ViT config keeps the paper's ViT augmentation (lambda_max = 1.4)
    vit = load(osp.join(REPO, 'configs', 'cape', 'vit-base-p16_cape_16xb64_in1k.py'))
    assert vit.model.backbone.pos_encoding.max_global_scaling == 1.4
    for c in (cfg, vit, load(osp.join(REPO, 'configs', 'cape',
                                      'vit-base-p16_abspos_16xb64_in1k.py'))):
        assert c.train_dataloader.sampler.type == 'RepeatAugSampler'  # CAPE footnote 2
        assert c.train_cfg.max_epochs == 300


CAPE_CONFIGS = [c for c in CONFIGS if osp.basename(osp.dirname(c)) == 'cape']


@pytest.mark.parametrize('path', CAPE_CONFIGS, ids=[osp.basename(c) for c in CAPE_CONFIGS])
def test_cape_configs_train_with_the_paper_recipe(path):
    """The recipe of configs/cape/README.md: CAPE trains "carefully following Section 6" of
    DeiT (CAPE Sec. 5.1); values CAPE names come from CAPE, the rest from DeiT-B (DeiT Table 9)."""
    from mmengine.optim import build_optim_wrapper
    from mmengine.registry import PARAM_SCHEDULERS
    cfg = load(path)
    # CAPE footnote 2: AdamW, 300 epochs, truncated normal init, RandAugment, Mixup, CutMix,
    # random erasing, repeated augmentation
    optim = cfg.optim_wrapper.optimizer
    assert optim.type == 'AdamW'
    assert cfg.train_cfg.max_epochs == 300
    assert {'type': 'TruncNormal', 'layer': 'Linear', 'std': 0.02} in cfg.model.init_cfg
    pipeline = [t for t in (cfg.train_dataloader.dataset.get('pipeline') or
                            cfg.train_dataloader.dataset.dataset.pipeline)]
    types = [t.type for t in pipeline]
    assert 'RandAugment' in types and 'RandomErasing' in types
    assert [a.type for a in cfg.model.train_cfg.augments] == ['Mixup', 'CutMix']
    assert cfg.train_dataloader.sampler.type == 'RepeatAugSampler'
    assert cfg.train_dataloader.sampler.get('num_repeats', 3) == 3  # as DeiT's RASampler
    # CAPE App. B.1: 64 images per GPU (16 GPUs for UniViT: 1024)
    assert cfg.train_dataloader.batch_size == 64 and '16xb64' in osp.basename(path)
    assert cfg.auto_scale_lr.base_batch_size == 16 * 64
    # DeiT Table 9 (CAPE is silent): lr 5e-4 * bs / 512, weight decay 0.05, label smoothing
    # 0.1, stochastic depth 0.1, RandAugment 9 / 0.5, Mixup 0.8, CutMix 1.0, erasing 0.25
    assert optim.lr == pytest.approx(5e-4 * 1024 / 512) and optim.weight_decay == 0.05
    assert cfg.model.head.loss.label_smooth_val == 0.1
    assert cfg.model.backbone.drop_path_rate == 0.1
    assert cfg.model.backbone.get('drop_rate', 0.) == 0.
    ra = pipeline[types.index('RandAugment')]
    assert (ra.magnitude_level, ra.magnitude_std, ra.num_policies) == (9, 0.5, 2)
    assert pipeline[types.index('RandomErasing')].erase_prob == 0.25
    assert [a.alpha for a in cfg.model.train_cfg.augments] == [0.8, 1.0]
    # DeiT Table 9: no gradient clipping; DeiT Table 8: DeiT-B is evaluated without an EMA
    # (mmpretrain's DeiT config has clip_grad max_norm 5 and an EMAHook)
    assert cfg.optim_wrapper.get('clip_grad') is None
    assert not [h for h in cfg.get('custom_hooks', []) if 'EMA' in h.type]
    # DeiT Table 9: cosine decay after 5 warm-up epochs (mmpretrain's DeiT config: 20); the lr
    # the Runner's schedulers give, epoch by epoch (4 iterations per epoch)
    model = build_small(cfg)
    wrapper = build_optim_wrapper(model, cfg.optim_wrapper)
    assert not wrapper.clip_grad_kwargs  # {'max_norm': 5.0} with mmpretrain's DeiT config
    schedulers = []
    for s in cfg.param_scheduler:  # as the Runner builds them: end defaults to max_epochs
        s = dict(s, end=s.get('end', cfg.train_cfg.max_epochs))
        schedulers.append(PARAM_SCHEDULERS.build(
            s, default_args=dict(optimizer=wrapper, epoch_length=4)))
    lrs = []
    for epoch in range(cfg.train_cfg.max_epochs):
        for _ in range(4):
            lrs.append(max(g['lr'] for g in wrapper.param_groups))
            for s in schedulers:
                if not s.by_epoch:
                    s.step()
        for s in schedulers:
            if s.by_epoch:
                s.step()
    peak = lrs.index(max(lrs))
    # full lr from the last iteration of the 5th epoch (it would be the 20th with mmpretrain's)
    assert peak == 5 * 4 - 1 and max(lrs) == pytest.approx(optim.lr)
    assert lrs[0] == pytest.approx(optim.lr * 1e-3)
    assert all(a < b for a, b in zip(lrs[:peak], lrs[1:peak + 1]))  # linear warm-up
    assert all(a >= b for a, b in zip(lrs[peak:], lrs[peak + 1:]))  # then decay
    assert lrs[-1] == pytest.approx(1e-5, rel=0.01)


SAPE2_CONFIGS = [c for c in CONFIGS if osp.basename(osp.dirname(c)) == 'sape2']


def test_sape2_configs_cover_q_k_with_and_without_ape_on_both_cifars():
    names = {osp.basename(c) for c in SAPE2_CONFIGS}
    assert names == {f'vit-small-p4_sape2-{m}{a}_1xb128-400e_cifar{d}.py' for m in 'qk'
                     for a in ('', '-abspos') for d in ('10', '100')}


@pytest.mark.parametrize('path', SAPE2_CONFIGS + [c for c in CONFIGS if 'pe_zoo' in c],
                         ids=lambda p: osp.relpath(p, osp.join(REPO, 'configs')))
def test_sape2_setting_and_recipe(path):
    """SaPE2 Sec. 5.1: ViT-S (384 dims) with patch 4 on 32 x 32, 400 epochs, Adam, batch 128
    (the SaPE2 folder and the pe_zoo baselines of SaPE2 Table 1 share it); the dataset, the
    number of classes, the SaPE2 mode and the APE match the file name."""
    cfg = load(path)
    name = osp.basename(path)
    bb = cfg.model.backbone
    assert (bb.arch, bb.patch_size, bb.img_size, cfg.model.head.in_channels) == ('small', 4,
                                                                                32, 384)
    assert cfg.optim_wrapper.optimizer.type == 'Adam'
    assert cfg.train_cfg.max_epochs == 400 and cfg.param_scheduler[-1].end == 400
    assert cfg.train_dataloader.batch_size == 128
    n = 100 if name.endswith('cifar100.py') else 10
    assert cfg.train_dataloader.dataset.type == cfg.val_dataloader.dataset.type == f'CIFAR{n}'
    assert cfg.model.head.num_classes == cfg.data_preprocessor.num_classes == n
    pes = bb.pos_encoding if isinstance(bb.pos_encoding, (list, tuple)) else [bb.pos_encoding]
    types = [p.type.split('.')[-1] for p in pes]
    assert ('LearnableAbsolutePE' in types) == ('abspos' in name)
    sape = [p for p in pes if p.type.endswith('SaPE2')]
    if 'sape2' in name:
        assert len(sape) == 1 and sape[0].mode == name.split('sape2-')[1][0]
        # the README: a position sums at most one line of gates, so M >= the 8-patch line
        # length means nothing is clamped on the CIFAR grid
        assert sape[0].max_pos >= bb.img_size // bb.patch_size == 8
    else:
        assert not sape
