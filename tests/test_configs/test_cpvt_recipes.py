"""The resolved recipes of the CPVT-family configs are the papers': CPVT's ImageNet setting ([E]
Table 13, [L] Table 10: no gradient clipping, LAMB for CPVT-B), PVT's ImageNet setting for the
PVT + PEG classifiers ([L] §4.6), PVT's Semantic FPN schedule, an
ImageNet-initialised backbone in every dense config, and the ablation configs do what their
names say."""
import glob
import os.path as osp
import re

import pytest
import torch
from mmengine.config import Config

from conftest import REPO_ROOT
from peg_config_utils import host_models

CFG = osp.join(REPO_ROOT, 'configs')
CPVT_IN1K = sorted(glob.glob(osp.join(CFG, 'cpvt', 'cpvt-*_in1k.py')))
SEMFPN = sorted(p for folder in ('cpvt', 'pvt_peg', 'swin_peg')
                for p in glob.glob(osp.join(CFG, folder, 'fpn_*.py')))
DENSE = sorted(p for folder in ('cpvt', 'pvt_peg', 'swin_peg')
               for pattern in ('fpn_*.py', 'retinanet_*.py', 'mask-rcnn_*.py')
               for p in glob.glob(osp.join(CFG, folder, pattern)))


def _load(path):
    return Config.fromfile(path)


@pytest.mark.parametrize('path', CPVT_IN1K, ids=osp.basename)
def test_cpvt_imagenet_recipe_is_deits_without_clipping(path):
    """[E] Table 13 / [L] Table 10: 300 epochs, weight decay 0.05, 5 warm-up epochs + cosine,
    label smoothing 0.1, stochastic depth 0.1, repeated augmentation, RandAugment 9/0.5,
    Mixup 0.8, CutMix 1.0, random erasing 0.25, no gradient clipping."""
    import mmpretrain.engine  # noqa: F401  (registers Lamb)
    from mmengine.optim import build_optim_wrapper
    from mmengine.registry import init_default_scope
    init_default_scope('mmpretrain')
    cfg = _load(path)
    assert cfg.optim_wrapper.get('clip_grad') is None
    wrapper = build_optim_wrapper(torch.nn.Linear(2, 2), cfg.optim_wrapper)
    assert not wrapper.clip_grad_kwargs  # mmengine's OptimWrapper does not clip
    opt = cfg.optim_wrapper.optimizer
    batch = cfg.train_dataloader.batch_size * int(re.search(r'_(\d+)xb', path).group(1))
    assert batch == 1024 == cfg.auto_scale_lr.base_batch_size
    assert opt.lr == pytest.approx(5e-4 * batch / 512) and opt.weight_decay == 0.05
    assert opt.type == ('Lamb' if 'cpvt-base' in path else 'AdamW')
    assert cfg.train_cfg.max_epochs == 300
    warmup, cosine = cfg.param_scheduler
    assert warmup.type == 'LinearLR' and warmup.end == 5 and warmup.by_epoch
    assert cosine.type == 'CosineAnnealingLR' and cosine.begin == 5
    assert cfg.model.backbone.drop_path_rate == 0.1
    assert cfg.model.head.loss.label_smooth_val == 0.1
    assert [(a.type, a.alpha) for a in cfg.model.train_cfg.augments] == [('Mixup', 0.8),
                                                                         ('CutMix', 1.0)]
    assert cfg.train_dataloader.sampler.type == 'RepeatAugSampler'
    pipeline = {t.type: t for t in cfg.train_dataloader.dataset.pipeline}
    assert (pipeline['RandAugment'].magnitude_level, pipeline['RandAugment'].magnitude_std) == \
        (9, 0.5)
    assert pipeline['RandomErasing'].erase_prob == 0.25


PVT_IN1K = sorted(glob.glob(osp.join(CFG, 'pvt_peg', 'pvt-*_in1k.py')))
# PVT v1's own recipe per size (whai362/PVT classification/configs/pvt/pvt_{tiny,small,medium}.py:
# drop_path, clip_grad), which CPVT [L] §4.6 keeps for Table 13 ("the same training settings")
PVT_SIZE_RECIPE = dict(tiny=(0.1, None), small=(0.1, None), medium=(0.3, 1.0))


@pytest.mark.parametrize('path', PVT_IN1K, ids=osp.basename)
def test_pvt_imagenet_recipe_is_pvts(path):
    """[L] §4.6 / Table 13 train the PVT rows with PVT's settings (whai362/PVT main.py and its
    configs/pvt/*.py, DeiT's recipe): 300 epochs, batch 8 x 128, AdamW lr 5e-4 * 1024 / 512,
    weight decay 0.05, 5 warm-up epochs + cosine, label smoothing 0.1, repeated augmentation,
    Mixup 0.8, CutMix 1.0, RandAugment 9/0.5, random erasing 0.25; stochastic depth 0.1 / 0.1
    / 0.3 and gradient clipping none / none / max norm 1.0 for T / S / M (mmpretrain's Twins
    config, the base, clips at 5 and has no repeated augmentation)."""
    from mmengine.optim import build_optim_wrapper
    from mmengine.registry import init_default_scope
    init_default_scope('mmpretrain')
    cfg = _load(path)
    size = cfg.model.backbone.arch
    drop_path, clip = PVT_SIZE_RECIPE[size]
    assert cfg.model.backbone.drop_path_rate == drop_path
    wrapper = build_optim_wrapper(torch.nn.Linear(2, 2), cfg.optim_wrapper)
    if clip is None:
        assert cfg.optim_wrapper.get('clip_grad') is None and not wrapper.clip_grad_kwargs
    else:
        assert wrapper.clip_grad_kwargs == dict(max_norm=clip)
    opt = cfg.optim_wrapper.optimizer
    batch = cfg.train_dataloader.batch_size * int(re.search(r'_(\d+)xb', path).group(1))
    assert batch == 1024 == cfg.auto_scale_lr.base_batch_size
    assert opt.type == 'AdamW' and opt.weight_decay == 0.05
    assert opt.lr == pytest.approx(5e-4 * batch / 512)
    assert cfg.train_cfg.max_epochs == 300
    warmup, cosine = cfg.param_scheduler
    assert warmup.type == 'LinearLR' and warmup.end == 5 and warmup.start_factor == 1e-3
    assert cosine.type == 'CosineAnnealingLR' and cosine.begin == 5 and cosine.eta_min == 1e-5
    assert cosine.get('end', 300) == 300
    assert cfg.train_dataloader.sampler.type == 'RepeatAugSampler'
    assert cfg.model.head.loss.label_smooth_val == 0.1
    assert [(a.type, a.alpha) for a in cfg.model.train_cfg.augments] == [('Mixup', 0.8),
                                                                         ('CutMix', 1.0)]
    pipeline = {t.type: t for t in cfg.train_dataloader.dataset.pipeline}
    assert (pipeline['RandAugment'].magnitude_level, pipeline['RandAugment'].magnitude_std) == \
        (9, 0.5)
    assert pipeline['RandomErasing'].erase_prob == 0.25
    assert not any(h.type == 'EMAHook' for h in cfg.get('custom_hooks', []))


def test_cpvt_base_lamb_step_does_not_clip():
    """mmpretrain's Lamb clips the global gradient norm at 1 by default; the CPVT-B config sets
    it out of reach: after one step the first moment is (1 - beta1) * g for a gradient of norm
    1e4 (it would be (1 - beta1) * g / 1e4 with the default)."""
    import mmpretrain.engine  # noqa: F401  (registers Lamb)
    from mmengine.optim import build_optim_wrapper
    from mmengine.registry import init_default_scope
    init_default_scope('mmpretrain')
    cfg = _load(osp.join(CFG, 'cpvt', 'cpvt-base_16xb64_in1k.py'))
    model = torch.nn.Linear(8, 8, bias=False)
    wrapper = build_optim_wrapper(model, cfg.optim_wrapper)
    assert type(wrapper.optimizer).__name__ == 'Lamb'
    grad = torch.randn(8, 8)
    grad *= 1e4 / grad.norm()
    model.weight.grad = grad.clone()
    wrapper.step()
    exp_avg = wrapper.optimizer.state[model.weight]['exp_avg']
    beta1 = wrapper.optimizer.defaults['betas'][0]
    torch.testing.assert_close(exp_avg, (1 - beta1) * grad)


def _cpvt_tiny(cfg):
    import mmpretrain.models  # noqa: F401
    from mmengine.registry import init_default_scope
    init_default_scope('mmpretrain')
    return host_models('mmpretrain').build(cfg.model).eval()


@pytest.mark.parametrize('name,params', [
    ('cpvt-tiny_4xb256_in1k.py', 5.68),  # [E] Tables 9, 11 / [L] Table 5: 3, learnable
    ('cpvt-tiny-k1_4xb256_in1k.py', 5.68),  # [E] Table 9: kernel 1
    ('cpvt-tiny-12xfc_4xb256_in1k.py', 6.13),  # [E] Table 11 / [L] Table 5: 1 (12x)
])
def test_kernel_ablations_have_the_papers_parameter_counts(name, params):
    cfg = _load(osp.join(CFG, 'cpvt', name))
    model = _cpvt_tiny(cfg)
    assert round(sum(p.numel() for p in model.parameters()) / 1e6, 2) == params
    kernels = {m.kernel_size for m in model.backbone.pegs.modules()
               if isinstance(m, torch.nn.Conv2d)}
    assert kernels == ({(3, 3)} if name == 'cpvt-tiny_4xb256_in1k.py' else {(1, 1)})


def test_cpvt_ti_parameter_count_of_table_16():
    """[L] Table 16: CPVT-Ti has 5,681,320 parameters = DeiT-Ti - its PE + the 1,728 PEG
    weights of §4.4; the bias of the paper's Algorithm 1 convolution adds 192 (our default)."""
    cfg = _load(osp.join(CFG, 'cpvt', 'cpvt-tiny_4xb256_in1k.py'))
    assert sum(p.numel() for p in _cpvt_tiny(cfg).parameters()) == 5_681_320 + 192
    cfg.model.backbone.peg_cfg = dict(bias=False)
    assert sum(p.numel() for p in _cpvt_tiny(cfg).parameters()) == 5_681_320


def test_no_padding_config_shortens_the_sequence_to_144():
    model = _cpvt_tiny(_load(osp.join(CFG, 'cpvt', 'cpvt-tiny-nopad_4xb256_in1k.py')))
    seen = []
    for layer in model.backbone.layers[:2]:
        layer.register_forward_pre_hook(lambda m, args: seen.append(args[0].shape[1]))
    with torch.no_grad():
        out = model(torch.rand(1, 3, 224, 224), mode='tensor')
    assert seen == [1 + 196, 1 + 144] and out.shape == (1, 1000)


def test_qk_config_feeds_the_peg_to_queries_and_keys_only():
    cfg = _load(osp.join(CFG, 'cpvt', 'cpvt-tiny-qk_4xb256_in1k.py'))
    model = _cpvt_tiny(cfg)
    assert model.backbone.peg_on == 'qk' and model.backbone.peg_positions == (0, )
    with torch.no_grad():
        assert model(torch.rand(1, 3, 64, 64), mode='tensor').shape == (1, 1000)


def _lr_curve(cfg, iters):
    """The learning rate the resolved param_scheduler gives at each of ``iters``."""
    from mmengine.registry import PARAM_SCHEDULERS
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=cfg.optim_wrapper.optimizer.lr)
    scheds = [PARAM_SCHEDULERS.build(dict(s, optimizer=opt)) for s in cfg.param_scheduler]
    lrs, wanted = {}, set(iters)
    for it in range(max(iters) + 1):
        if it in wanted:
            lrs[it] = opt.param_groups[0]['lr']
        opt.step()
        for s in scheds:
            s.step()
    return lrs


def test_semantic_fpn_schedule_is_pvts_and_decays():
    """PVT's Semantic FPN recipe (whai362/PVT fpn_pvt_*_ade20k_40k.py): AdamW lr 2e-4, weight
    decay 1e-4, 40k iterations of 8 x 4 images, poly power 0.9 down to 0. The mmseg base it
    inherits decays to eta_min 1e-4 = its lr, i.e. a constant lr: checked to be gone."""
    resolved = set()
    for path in SEMFPN:
        cfg = _load(path)
        opt = cfg.optim_wrapper.optimizer
        assert (opt.type, opt.lr, opt.weight_decay) == ('AdamW', 2e-4, 1e-4), path
        assert cfg.train_dataloader.batch_size == 4 and '8xb4-40k' in path
        assert cfg.train_cfg.max_iters == 40000, path
        resolved.add(repr(cfg.param_scheduler))
    assert len(resolved) == 1  # one schedule for every Semantic FPN config
    cfg = _load(SEMFPN[0])
    iters = [0, 10000, 20000, 30000, 39999]
    lrs = _lr_curve(cfg, iters)
    for it in iters:
        # mmengine's PolyLR reaches eta_min at the last iteration (39999) and is recursive (a
        # factor per step, float-level drift only)
        assert lrs[it] == pytest.approx(2e-4 * (1 - it / 39999) ** 0.9, rel=1e-4, abs=1e-12), it
    assert lrs[20000] < 0.6 * lrs[0] and lrs[39999] == 0


@pytest.mark.parametrize('path', DENSE, ids=osp.basename)
def test_dense_backbones_start_from_imagenet(path):
    """Every dense config, baseline or PEG, initialises its backbone from ImageNet weights: the
    mmdet PVT baselines from PVT's release of the same size, ours from the checkpoint that our
    classifier config of the same backbone writes (work_dirs/<config>/epoch_300.pth)."""
    cfg = _load(path)
    backbone = cfg.model.backbone
    init = backbone.init_cfg
    assert init is not None and init.get('checkpoint'), path
    if not backbone.type.startswith('mmposenc.'):  # mmdet's PVT v1
        size = {(2, 2, 2, 2): 'tiny', (3, 4, 6, 3): 'small', (3, 4, 18, 3): 'medium',
                (3, 8, 27, 3): 'large'}[tuple(backbone.num_layers)]
        assert init.checkpoint.endswith(f'/pvt_{size}.pth'), (path, init.checkpoint)
        return
    assert init.type == 'Pretrained' and init.prefix == 'backbone.'
    stem = re.fullmatch(r'work_dirs/(.+)/epoch_300\.pth', init.checkpoint).group(1)
    clf_path = osp.join(osp.dirname(path), stem + '.py')
    assert osp.isfile(clf_path), clf_path
    clf = _load(clf_path)
    assert clf.train_cfg.max_epochs == 300
    defaults = dict(with_peg=True, with_pos_embed=False, peg_positions=(0, ), peg_cfg={})
    for key in ('type', 'arch', 'with_peg', 'with_pos_embed', 'peg_positions', 'peg_cfg'):
        assert clf.model.backbone.get(key, defaults.get(key)) == \
            backbone.get(key, defaults.get(key)), (path, key)
