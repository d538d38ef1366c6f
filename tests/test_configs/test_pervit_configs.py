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
        from mmposenc.models.backbones import PerViT
        model_cfg.backbone.arch = SMALL
        options = {k: v for k, v in model_cfg.backbone.items() if k != 'type'}
        model_cfg.head.in_channels = PerViT(**options).out_channels[-1]  # 40; flop_match: more
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


def _epoch_lrs(cfg, epochs):
    """Learning rate at the start of each epoch in ``epochs`` from the config's schedulers
    (stepped per epoch; the configs convert them to iterations, same values at the epoch
    boundaries)."""
    from mmengine.optim.scheduler import CosineAnnealingLR, LinearLR
    opt = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))],
                            lr=cfg.optim_wrapper.optimizer.lr)
    kinds = dict(LinearLR=LinearLR, CosineAnnealingLR=CosineAnnealingLR)
    scheds = []
    for s in cfg.param_scheduler:
        s = dict(s)
        s.pop('convert_to_iter_based', None)
        scheds.append(kinds[s.pop('type')](opt, **s))
    lrs = {}
    for epoch in range(max(epochs) + 1):
        if epoch in epochs:
            lrs[epoch] = opt.param_groups[0]['lr']
        for s in scheds:
            s.step()
    return lrs


@pytest.mark.parametrize('size,wd,warmup,drop_path', [('tiny', 0.03, 5, 0.0),
                                                      ('small', 0.05, 5, 0.1),
                                                      ('medium', 0.05, 20, 0.2)])
def test_recipe_of_table_a6(size, wd, warmup, drop_path):
    """Table A6: weight decay 0.03 / 0.05 / 0.05, warm-up 5 / 5 / 20 epochs, stochastic depth
    0 / 0.1 / 0.2, lr 5e-4 * 1024 / 512, batch 1024, 300 epochs, no gradient clipping."""
    cfg = load(osp.join(REPO, 'configs', 'pervit', f'pervit-{size}_8xb128_in1k.py'))
    opt = cfg.optim_wrapper.optimizer
    assert opt.type == 'AdamW' and opt.weight_decay == wd
    assert opt.lr == pytest.approx(1e-3)
    assert cfg.optim_wrapper.get('clip_grad') is None
    assert cfg.train_dataloader.batch_size * 8 == 1024 and cfg.train_cfg.max_epochs == 300
    assert cfg.model.backbone.arch == size and cfg.model.backbone.drop_path_rate == drop_path
    warm, cosine = cfg.param_scheduler
    assert warm.end == cosine.begin == warmup and cosine.end == 300
    lrs = _epoch_lrs(cfg, [0, warmup // 2, warmup - 2, warmup, 150, 299])
    assert lrs[0] == pytest.approx(1e-6)
    assert 0.4e-3 < lrs[warmup // 2] < 0.6e-3  # half way up the linear warm-up
    assert lrs[warmup - 2] < 1e-3 and lrs[warmup] == pytest.approx(1e-3)
    assert 1e-5 < lrs[150] < 1e-3 and lrs[299] == pytest.approx(1e-5, abs=1e-6)


@pytest.mark.parametrize('options', [
    dict(with_phi_p=False), dict(with_phi_c=False, flop_match=True), dict(conv_stem=False),
    dict(with_cpe=False), dict(ppe_init='conv'), dict(ppe_init='rand'),
    dict(freeze_phi_p=True), dict(ppe_cfg=dict(multi_layer=False)),
    dict(ppe_cfg=dict(kernel_size=1)), dict(ppe_cfg=dict(embedding='lrn')),
    dict(ppe_cfg=dict(multi_layer=False, kernel_size=1)),  # Table 5 "Euc"
    dict(ppe_cfg=dict(embedding='lrn', kernel_size=1)),  # "Lrn + ML"
    dict(ppe_cfg=dict(embedding='lrn', multi_layer=False, kernel_size=1)),  # "Lrn"
    dict(ppe_init='rand', ppe_cfg=dict(with_norms=False)),  # Eq. 6 without the norms
    dict(with_phi_p=False, conv_stem=False, with_cpe=False, flop_match=True)])  # Table 1 (i)
def test_ablation_options_build_in_the_config(options):
    """The Table 1 / 5 / A3 switches, set on the shipped config as --cfg-options would."""
    from mmpretrain.structures import DataSample
    cfg = load(osp.join(REPO, 'configs', 'pervit', 'pervit-tiny_8xb128_in1k.py'))
    cfg.model.backbone.update(options)
    model = build(cfg)
    for k, v in options.items():
        if k != 'ppe_cfg':
            assert getattr(model.backbone, k) == v
    for k, v in options.get('ppe_cfg', {}).items():  # every layer's Phi_p has the design
        assert all(getattr(b.attn.ppe, k) == v for b in model.backbone.blocks), k
    losses = model(torch.randn(2, 3, 64, 64), [DataSample().set_gt_label(1)] * 2, mode='loss')
    losses['loss'].backward()
    assert torch.isfinite(losses['loss'])


def test_deit_tiny_ppe_recipe_is_deits():
    """PerViT Table 2 adds Phi_p to the DeiT baseline and follows DeiT's recipe (Sec. 4, App. F;
    DeiT Table 9 = the DeiT column of Table A6): no gradient clipping, 5 warm-up epochs from
    1e-6, repeated augmentation, stochastic depth 0.1, lr 5e-4 * 1024 / 512, batch 1024, 300
    epochs, weight decay 0.05, no EMA. mmpretrain's DeiT-T config, the base, differs in the
    first four (clip 5, 20 warm-up epochs, DefaultSampler, no drop path)."""
    from mmengine.optim import build_optim_wrapper
    from mmengine.registry import init_default_scope
    cfg = load(osp.join(REPO, 'configs', 'pervit', 'deit-tiny-ppe_4xb256_in1k.py'))
    init_default_scope('mmpretrain')
    assert cfg.optim_wrapper.get('clip_grad') is None
    assert not build_optim_wrapper(torch.nn.Linear(2, 2), cfg.optim_wrapper).clip_grad_kwargs
    assert cfg.train_dataloader.sampler.type == 'RepeatAugSampler'
    assert cfg.model.backbone.drop_path_rate == 0.1
    opt = cfg.optim_wrapper.optimizer
    assert cfg.train_dataloader.batch_size * 4 == 1024 == cfg.auto_scale_lr.base_batch_size
    assert opt.type == 'AdamW' and opt.lr == pytest.approx(1e-3) and opt.weight_decay == 0.05
    assert cfg.train_cfg.max_epochs == 300
    assert cfg.model.head.loss.label_smooth_val == 0.1
    assert not any(h.type == 'EMAHook' for h in cfg.get('custom_hooks', []))
    warm, cosine = cfg.param_scheduler
    assert warm.end == cosine.begin == 5 and cosine.get('end') in (None, 300)
    cosine.end = cfg.train_cfg.max_epochs  # what the Runner sets for an open end
    lrs = _epoch_lrs(cfg, [0, 5, 299])
    assert lrs[0] == pytest.approx(1e-6) and lrs[5] == pytest.approx(1e-3)
    assert lrs[299] == pytest.approx(1e-5, abs=1e-6)


def test_deit_tiny_ppe_size_stated_in_the_readme():
    """configs/pervit/README.md: DeiT-T + PPE has 5.74M parameters, 0.02M of them Phi_p (Table
    2 of the paper gives no size)."""
    cfg = load(osp.join(REPO, 'configs', 'pervit', 'deit-tiny-ppe_4xb256_in1k.py'))
    model = build(cfg, small=False)
    assert round(sum(p.numel() for p in model.parameters()) / 1e6, 2) == 5.74
    ppe = model.backbone.pos_encodings[1]
    assert type(ppe).__name__ == 'PeripheralPE' and ppe.init == 'peripheral'
    assert round(sum(p.numel() for p in ppe.parameters()) / 1e6, 2) == 0.02
