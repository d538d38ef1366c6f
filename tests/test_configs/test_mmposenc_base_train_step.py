"""One shipped config per family, reused from a user's own folder as an ``mmposenc::`` base,
built by mmengine's Runner and trained for one step.

The user config lives in a temporary folder outside the repository and says
``_base_ = 'mmposenc::<config>'`` plus tiny sizes (ResNet-18 or one block per stage, one or two
transformer layers, few queries, small images), its data (COCO128, the ADE20K sample, or for the
demo its own shapes_coco) and no downloads (``init_cfg=None``). ``Runner.from_cfg`` builds what
the shipped config names -- model, data preprocessor, datasets and pipelines, sampler,
optimizer wrapper and optimizer, schedulers, loops, hooks, evaluator, visualizer -- from that
folder, and ``runner.train()`` runs one iteration. The built training pipeline must consist of
the classes its types resolve to by path (scope_resolution.py): mmdet's ``LoadAnnotations``,
not mmcv's. The size and data overrides are those of the real-data tests
(tests/test_real_data/test_encoder_pos_real_data.py) and of peg_config_utils.shrink_depth.

For PEG-DINO and the two Mask2Formers the same Runner then runs ``runner.test()`` with the
trained weights on the first image: CocoMetric's box AP (and Mask2Former's mask AP) on COCO128, IoUMetric's mIoU
on the ADE20K sample (these were tests of their own in test_encoder_pos_real_data.py, each
building its model, data and Runner again; the tools' command lines with these configs'
families are tested there with Conditional-DETR, DAB-DETR and Mask2Former on COCO128-semseg).
"""
import importlib.util
import math
import os
import os.path as osp

import pytest

from conftest import REPO_ROOT
from peg_config_utils import shrink_depth
from scope_resolution import resolve


def _real_data_snippets():
    """The size and data overrides of tests/test_real_data/test_encoder_pos_real_data.py."""
    path = osp.join(REPO_ROOT, 'tests', 'test_real_data', 'test_encoder_pos_real_data.py')
    spec = importlib.util.spec_from_file_location('encoder_pos_real_data_snippets', path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


REAL = _real_data_snippets()
#: one training iteration; the validation loop and its evaluator are built (``Runner.train``
#: builds them) but do not run (the loops validate after the last iteration / epoch from
#: ``val_begin`` on), checkpoints are not written
ONE_ITER = """
train_cfg = dict(_delete_=True, type='IterBasedTrainLoop', max_iters=1, val_begin=2,
                 val_interval=1000)
log_processor = dict(by_epoch=False)
default_hooks = dict(logger=dict(interval=1),
                     checkpoint=dict(by_epoch=False, interval=1000, save_last=False))
"""
ONE_EPOCH_OF_ONE_ITER = """
train_cfg = dict(max_epochs=1, val_begin=2, val_interval=1000)
default_hooks = dict(logger=dict(interval=1), checkpoint=dict(interval=1000, save_last=False))
"""


def _dino(data):
    base = 'mmposenc::peg_dino/dino-4scale-peg_r50_8xb2-12e_coco.py'
    return (REAL.COCO_DET.format(base=base, root=data, masks=False)
            + REAL.DETECTORS['dino'][1] + ONE_ITER)


def _mask2former_det(data):
    base = 'mmposenc::peg_mask2former/mask2former-peg_r50_8xb2-lsj-50e_coco.py'
    shrink = REAL.MASK2FORMER_SMALL.format(
        head='panoptic_head', extra_head='',
        extra_model=(",\n    data_preprocessor=dict(batch_augments=None),"
                     "\n    train_cfg=dict(num_points=256), test_cfg=dict(max_per_image=10)"))
    return REAL.COCO_DET.format(base=base, root=data, masks=True) + shrink + ONE_ITER


def _mask2former_seg(data):
    root = data.rstrip('/') + '/sampleData/'
    dataset = f"""dict(type='ADE20KDataset', data_root='{root}',
        data_prefix=dict(img_path='images', seg_map_path='annotations'), pipeline=PIPE)"""
    return REAL.SEG.format(
        base='mmposenc::peg_mask2former/mask2former-peg_r50_8xb2-160k_ade20k-512x512.py',
        num_classes=150, reduce=', reduce_zero_label=True',
        train=dataset.replace('PIPE', 'train_pipeline'),
        val=dataset.replace('PIPE', 'test_pipeline')) + ONE_ITER


def _retinanet_pvt_peg(data):
    # the ms-3x configs define their own multi-scale pipelines (LoadAnnotations, RandomResize,
    # RandomFlip, PackDetInputs): kept, at CPU-sized scales
    base = 'mmposenc::pvt_peg/retinanet_pvt-peg-t_fpn_ms-3x_coco.py'
    return f"""
_base_ = '{base}'
data_root = '{data}/'
model = dict(backbone=dict(init_cfg=None))
train_pipeline = _base_.train_pipeline
train_pipeline[2].scale = [(200, 120), (200, 150)]
train_dataloader = dict(
    batch_size=2, num_workers=0, persistent_workers=False,
    dataset=dict(data_root=data_root, ann_file='annotations/instances_train2017.json',
                 data_prefix=dict(img='train2017/'), indices=2, pipeline=train_pipeline))
val_dataloader = dict(
    batch_size=1, num_workers=0, persistent_workers=False,
    dataset=dict(data_root=data_root, ann_file='annotations/instances_train2017.json',
                 data_prefix=dict(img='train2017/'), indices=2))
test_dataloader = val_dataloader
val_evaluator = dict(ann_file=data_root + 'annotations/instances_train2017.json')
test_evaluator = val_evaluator
""" + ONE_EPOCH_OF_ONE_ITER


def _cpvt_b_lamb(data, project):
    # COCO128 images as a two-class CustomDataset (the label is only something to fit)
    images = sorted(os.listdir(osp.join(data, 'train2017')))[:2]
    (project / 'cls_ann.txt').write_text(''.join(f'{im} {i}\n' for i, im in enumerate(images)))
    return f"""
_base_ = 'mmposenc::cpvt/cpvt-base_16xb64_in1k.py'
_data = dict(_delete_=True, type='CustomDataset', data_root='{data}',
             data_prefix='train2017', ann_file='{project / 'cls_ann.txt'}')
train_dataloader = dict(batch_size=2, num_workers=0, persistent_workers=False,
                        dataset=dict(pipeline=_base_.train_pipeline, **_data))
val_dataloader = dict(batch_size=2, num_workers=0, persistent_workers=False,
                      dataset=dict(pipeline=_base_.test_pipeline, **_data))
test_dataloader = val_dataloader
# the warm-up as shipped; the cosine starts at epoch 5, after this one-epoch run
param_scheduler = [_base_.param_scheduler[0]]
""" + ONE_EPOCH_OF_ONE_ITER


def _demo_shapes(data):
    return f"""
_base_ = 'mmposenc::peg_deformable_detr/deformable-detr-peg_r18-quarter_1xb4-2500i_shapes.py'
data_root = '{data}/'
train_dataloader = dict(dataset=dict(data_root=data_root))
val_dataloader = dict(dataset=dict(data_root=data_root))
test_dataloader = val_dataloader
val_evaluator = dict(ann_file=data_root + 'annotations/instances_val.json')
test_evaluator = val_evaluator
train_cfg = dict(max_iters=1, val_begin=2, val_interval=1000)
default_hooks = dict(logger=dict(interval=1), checkpoint=dict(interval=1000, save_last=False))
"""


def _shapes_root(tmp_path):
    from mmposenc.utils.tools.shapes_coco import make_shapes_coco
    return make_shapes_coco(str(tmp_path / 'shapes_coco'), num_train=4, num_val=2,
                            min_size=96, max_size=128)


#: family: (user config writer, data, expected model class, expected backbone class); a
#: class or one of its subclasses (mmposenc's padding-exact hosts subclass mmdet's, issue 20)
FAMILIES = {
    'detr-family-dino': (_dino, 'coco128', 'PEGDINO', 'PaddingExactResNet'),
    'mask2former-mmdet': (_mask2former_det, 'coco128', 'Mask2Former', 'ResNet'),
    'mask2former-mmseg': (_mask2former_seg, 'ade20k', 'EncoderDecoder', 'ResNet'),
    'dense-retinanet-pvtpeg': (_retinanet_pvt_peg, 'coco128', 'RetinaNet', 'PVTPEG'),
    'classifier-cpvt-b-lamb': (_cpvt_b_lamb, 'coco128', 'ImageClassifier', 'CPVT'),
    'demo-shapes': (_demo_shapes, 'shapes', 'PEGDeformableDETR', 'PaddingExactResNet'),
}
#: family: (metric, its range) of ``runner.test()`` after the training iteration
TESTED = {
    'detr-family-dino': [('coco/bbox_mAP', 1.0), ('coco/bbox_mAP_50', 1.0),
                         ('coco/bbox_mAP_75', 1.0)],
    'mask2former-mmdet': [('coco/bbox_mAP', 1.0), ('coco/segm_mAP', 1.0)],
    'mask2former-mmseg': [('mIoU', 100.0)],
}


def _is_a(obj, name):
    """``obj``'s class is ``name`` or a subclass of a class of that name."""
    return name in [c.__name__ for c in type(obj).__mro__]


def _unserialized(cfg):
    """Every dataloader's dataset (inside its wrappers) keeps its data list as a list:
    mmengine's ``BaseDataset`` otherwise serializes it and runs a full ``gc.collect()`` per
    dataset (about 0.3 s each with torch and the hosts imported; the train, val and test
    dataloaders are each built)."""
    for key in ('train_dataloader', 'val_dataloader', 'test_dataloader'):
        dataset = cfg.get(key, {}).get('dataset')
        while dataset is not None and 'dataset' in dataset:
            dataset = dataset['dataset']
        if dataset is not None:
            dataset['serialize_data'] = False


def _built_pipeline_is_the_resolved_one(runner, cfg):
    """Every transform of the built training pipeline is the class its type resolves to in
    the scope it was built in (its own ``_scope_`` or the config's default scope)."""
    steps = cfg.train_dataloader.dataset.pipeline
    built = runner.train_dataloader.dataset.pipeline.transforms
    assert len(built) == len(steps)
    for step, transform in zip(steps, built):
        want = resolve(step['type'], step.get('_scope_') or cfg.default_scope)['TRANSFORMS']
        assert type(transform) is want, (step['type'], type(transform), want)


@pytest.mark.slow
@pytest.mark.parametrize('family', list(FAMILIES))
def test_one_train_step_from_a_user_folder(family, tmp_path, monkeypatch, request):
    import torch
    from mmengine.config import Config
    from mmengine.runner import Runner

    import mmposenc  # noqa: F401  (the startup hook does this for the hosts' entry points)
    write, data, model_cls, backbone_cls = FAMILIES[family]
    project = tmp_path / 'my_project'
    project.mkdir()
    monkeypatch.chdir(project)
    if data == 'coco128':
        root = request.getfixturevalue('coco128_root').rstrip('/')
    elif data == 'ade20k':
        root = request.getfixturevalue('ade20k_sample_root').rstrip('/')
    else:
        root = _shapes_root(tmp_path)
    text = write(root, project) if family.startswith('classifier') else write(root)
    (project / f'{family}.py').write_text(text)

    cfg = Config.fromfile(str(project / f'{family}.py'))
    shrink_depth(cfg.model.backbone)  # CPVT-B / PVTPEG-T: one block per stage, same widths
    _unserialized(cfg)
    if family in TESTED:  # the evaluation on the first image (the metrics' ranges hold)
        cfg.test_dataloader.dataset.indices = 1
    cfg.work_dir = str(project / 'work_dir')
    cfg.launcher = 'none'
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a shared 2-core machine: OpenMP threads would spin
    try:
        runner = Runner.from_cfg(cfg)
        runner.train()
    finally:
        torch.set_num_threads(threads)
    assert runner.iter == 1
    assert _is_a(runner.model, model_cls), type(runner.model).__mro__
    assert _is_a(runner.model.backbone, backbone_cls), type(runner.model.backbone).__mro__
    loss = runner.message_hub.get_scalar('train/loss').current()
    assert math.isfinite(loss) and loss > 0
    _built_pipeline_is_the_resolved_one(runner, cfg)
    if family.startswith('classifier'):
        assert type(runner.optim_wrapper.optimizer).__name__ == 'Lamb'
    if family in TESTED:  # the trained weights, evaluated by the config's test evaluator
        torch.set_num_threads(1)
        try:
            metrics = runner.test()
        finally:
            torch.set_num_threads(threads)
        for key, top in TESTED[family]:
            assert 0.0 <= metrics[key] <= top, (key, metrics)

