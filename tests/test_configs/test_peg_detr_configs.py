"""configs/peg_detr and configs/peg_deformable_detr: the recipes of CPVT [E] Table 4 (DETR: the
50-epoch setting of [E] §4.3; Deformable-DETR: the Deformable-DETR paper's own, i.e. mmdet's
config), the encoder PE each file name promises (sine, none, PEG, CAPE), paramwise keys that
match real parameters, a README row per config."""
import glob
import os.path as osp

import pytest
from peg_config_utils import as_host

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
COCO_CONFIGS = sorted(glob.glob(osp.join(REPO, 'configs', 'peg_detr', '*_coco.py')) +
                      glob.glob(osp.join(REPO, 'configs', 'peg_deformable_detr', '*_coco.py')))
EXPECTED_POS = {'sine': 'sine', 'nope': 'none', 'peg': 'peg', 'cape': 'cape',
                'rope-mixed': 'rope_mixed'}


def _load(path):
    from mmengine.config import Config
    return Config.fromfile(path)


def test_all_variants_exist():
    names = {osp.basename(p) for p in COCO_CONFIGS}
    assert len(names) == 7 + 11
    assert 'detr-sine_r50-dc5_16xb2-50e_coco.py' in names  # [E] Table 4 "DETR-DC5 50"
    # the PEG masked as the paper's Algorithm 2 does (ablation of the exact masking)
    assert {'detr-algo2-peg_r50_16xb2-50e_coco.py',
            'deformable-detr-algo2-peg_r50-ss_16xb2-50e_coco.py'} <= names
    for pe in EXPECTED_POS:
        assert f'detr-{pe}_r50_16xb2-50e_coco.py' in names
        if pe == 'rope-mixed':  # RoPE-Mixed: dot-product encoders only (no deformable)
            continue
        assert f'deformable-detr-{pe}_r50_16xb2-50e_coco.py' in names
        if pe != 'cape':  # CPVT's single-scale ablations: sine / none / PEG only
            for variant in ('r50-ss', 'r50-dc5-ss'):
                assert f'deformable-detr-{pe}_{variant}_16xb2-50e_coco.py' in names


DETR_CONFIGS = [p for p in COCO_CONFIGS if osp.basename(p).startswith('detr-')]
DD_CONFIGS = [p for p in COCO_CONFIGS if osp.basename(p).startswith('deformable-detr-')]


def _check_encoder_pos(cfg, name):
    from mmposenc.models.detectors.encoder_pos import encoder_pos_mode
    algo = name.split('_')[0]
    (pe, ) = [k for k in EXPECTED_POS if algo.endswith('-' + k)]
    assert encoder_pos_mode(cfg.model.encoder_pos) == EXPECTED_POS[pe]
    assert cfg.model.type.startswith('mmposenc.')
    assert cfg.custom_imports.imports == ['mmposenc.models.detectors']


@pytest.mark.parametrize('path', DD_CONFIGS, ids=osp.basename)
def test_deformable_detr_recipe_is_the_deformable_detr_papers(path):
    """[E] Table 4 quotes its DD rows from the Deformable-DETR paper: the configs keep mmdet's
    Deformable-DETR recipe (that paper's) unchanged, not CPVT's DETR setting."""
    cfg = _load(path)
    name = osp.basename(path)
    _check_encoder_pos(cfg, name)
    import mmdet
    ref = _load(osp.join(osp.dirname(mmdet.__file__), '.mim', 'configs', 'deformable_detr',
                         'deformable-detr_r50_16xb2-50e_coco.py'))
    for key in ('optim_wrapper', 'param_scheduler', 'train_cfg', 'auto_scale_lr',
                'train_dataloader', 'test_dataloader'):
        assert as_host(cfg[key]) == as_host(ref[key]), key
    for key in ('num_queries', 'bbox_head', 'train_cfg', 'test_cfg', 'data_preprocessor',
                'positional_encoding', 'with_box_refine', 'as_two_stage'):
        assert as_host(cfg.model[key]) == as_host(ref.model[key]), key
    # the numbers, for the reader: lr 2e-4, x0.1 at 40 of 50 epochs, 300 queries, focal loss 2
    opt = cfg.optim_wrapper
    assert (opt.optimizer.type, opt.optimizer.lr, opt.optimizer.weight_decay) == \
        ('AdamW', 2e-4, 1e-4)
    assert opt.clip_grad.max_norm == 0.1
    assert {k: v.lr_mult for k, v in opt.paramwise_cfg.custom_keys.items()} == {
        'backbone': 0.1, 'sampling_offsets': 0.1, 'reference_points': 0.1}
    (sched, ) = cfg.param_scheduler
    assert cfg.train_cfg.max_epochs == 50 and sched.milestones == [40] and sched.gamma == 0.1
    assert cfg.model.num_queries == 300 and cfg.model.bbox_head.loss_cls.loss_weight == 2.0
    assert cfg.train_dataloader.batch_size * 16 == 32 == cfg.auto_scale_lr.base_batch_size
    if '-ss_' in name:
        assert cfg.model.num_feature_levels == 1
        assert cfg.model.encoder.layer_cfg.self_attn_cfg.num_levels == 1
        assert cfg.model.decoder.layer_cfg.cross_attn_cfg.num_levels == 1
        assert cfg.model.backbone.out_indices == (3, )
    if 'dc5' in name:
        assert cfg.model.backbone.dilations[-1] == 2 and cfg.model.backbone.strides[-1] == 1


@pytest.mark.parametrize('path', DETR_CONFIGS, ids=osp.basename)
def test_detr_cpvt_setting(path):
    """[E] §4.3: AdamW, batch 32, weight decay 1e-4, lr 1e-4 (backbone 2e-5), x0.1 at epoch 40
    of 50, 100 queries, no focal loss, loss weights cls 1 / L1 5 / GIoU 2."""
    cfg = _load(path)
    name = osp.basename(path)
    _check_encoder_pos(cfg, name)
    opt = cfg.optim_wrapper
    assert opt.optimizer.type == 'AdamW'
    assert opt.optimizer.lr == pytest.approx(1e-4)
    assert opt.optimizer.weight_decay == pytest.approx(1e-4)
    backbone_lr = opt.optimizer.lr * opt.paramwise_cfg.custom_keys['backbone'].lr_mult
    assert backbone_lr == pytest.approx(2e-5)
    assert cfg.train_cfg.max_epochs == 50
    (sched, ) = cfg.param_scheduler
    assert sched.type == 'MultiStepLR' and sched.milestones == [40] and sched.gamma == 0.1
    assert cfg.train_dataloader.batch_size * 16 == 32 == cfg.auto_scale_lr.base_batch_size
    assert cfg.model.num_queries == 100
    head = cfg.model.bbox_head
    assert (head.loss_cls.loss_weight, head.loss_bbox.loss_weight,
            head.loss_iou.loss_weight) == (1.0, 5.0, 2.0)
    costs = [c.weight for c in cfg.model.train_cfg.assigner.match_costs]
    assert costs == [1.0, 5.0, 2.0]
    assert cfg.model.bbox_head.loss_cls.type == 'CrossEntropyLoss'  # no focal loss
    if 'dc5' in name:
        assert cfg.model.backbone.dilations[-1] == 2 and cfg.model.backbone.strides[-1] == 1


@pytest.mark.parametrize('name', [
    'peg_detr/detr-algo2-peg_r50_16xb2-50e_coco.py',
    'peg_deformable_detr/deformable-detr-algo2-peg_r50-ss_16xb2-50e_coco.py'])
def test_algorithm_2_configs_build_paper_masked_pegs(name):
    """Only the PEG's masking differs from the config it ablates."""
    from mmengine.registry import init_default_scope

    import mmposenc.models.detectors  # noqa: F401
    from mmposenc.registry import MODELS
    init_default_scope('mmdet')
    cfg = _load(osp.join(REPO, 'configs', name))
    base = _load(osp.join(REPO, 'configs', name.replace('algo2-', '')))
    # the options go with the mode: --cfg-options model.encoder_pos=<mode> replaces them
    assert cfg.model.encoder_pos.peg_cfg.pop('masking') == 'paper'
    assert cfg.model.encoder_pos == dict(mode='peg', peg_cfg=MODELS.get(
        cfg.model.type).default_peg_cfg)
    assert base.model.encoder_pos == 'peg'
    cfg.model.pop('encoder_pos')
    base.model.pop('encoder_pos')
    assert as_host(cfg.model) == as_host(base.model)
    cfg = _load(osp.join(REPO, 'configs', name))
    cfg.model.backbone.init_cfg = None
    model = MODELS.build(cfg.model)
    pegs = [m for m in model.modules() if type(m).__name__ == 'MaskedPEG']
    assert pegs and all(m.masking == 'paper' for m in pegs)


@pytest.mark.parametrize('name,num_pegs,has_cape', [
    ('peg_detr/detr-peg_r50_16xb2-50e_coco.py', 1, False),
    ('peg_detr/detr-cape_r50_16xb2-50e_coco.py', 0, True),
    ('peg_detr/detr-rope-mixed_r50_16xb2-50e_coco.py', 0, False),
    ('peg_deformable_detr/deformable-detr-peg_r50-dc5-ss_16xb2-50e_coco.py', 1, False),
    ('peg_deformable_detr/deformable-detr-cape_r50_16xb2-50e_coco.py', 0, True),
    ('peg_deformable_detr/deformable-detr-peg_r18-half_1xb4-400i_shapes.py', 1, False),
])
def test_builds_and_custom_keys_match_parameters(name, num_pegs, has_cape):
    from mmengine.registry import init_default_scope

    import mmposenc.models.detectors  # noqa: F401
    from mmposenc.registry import MODELS
    init_default_scope('mmdet')
    cfg = _load(osp.join(REPO, 'configs', name))
    cfg.model.backbone.init_cfg = None
    model = MODELS.build(cfg.model)
    assert len(model.encoder.pegs) == num_pegs
    assert (model.cape is not None) == has_cape
    if has_cape:  # the CAPE paper's ViT augmentation, as the config comments say
        assert (model.cape.max_global_shift, model.cape.max_local_shift,
                model.cape.max_global_scaling) == (0.5, 'auto', 1.4)
    params = [n for n, _ in model.named_parameters()]
    for key in cfg.optim_wrapper.get('paramwise_cfg', {}).get('custom_keys', {}):
        assert any(key in n for n in params), f'custom key {key!r} matches no parameter'


def test_readme_lists_every_config():
    for folder in ('peg_detr', 'peg_deformable_detr'):
        readme = open(osp.join(REPO, 'configs', folder, 'README.md')).read()
        for path in glob.glob(osp.join(REPO, 'configs', folder, '*.py')):
            assert f'({osp.basename(path)})' in readme, osp.basename(path)
