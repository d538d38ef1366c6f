"""mmdet's own DETR and Deformable-DETR configs run one training step and one predict step on
CPU, on two real COCO images loaded through mmdet's CocoDataset pipeline.

The configs' transformers, heads, losses and optimizers as mmdet ships them; only the backbone
is a ResNet-18 (mmdet's ResNet at depth 18, the neck's inputs to match) instead of a ResNet-50:
what is tested is the host's transformer stack on CPU, not the backbone."""
import copy
import os.path as osp

import pytest
import torch

CONFIGS = [
    'mmdet::detr/detr_r50_8xb2-150e_coco.py',
    'mmdet::deformable_detr/deformable-detr_r50_16xb2-50e_coco.py',
]


def _small_pipeline(backend_args=None):
    # The host's pipeline stages at a CPU-friendly scale (the stock one goes up to 1333 px):
    # COCO's 640 x 480 / 640 x 426 images become 256 x 192 / 256 x 170, still two sizes.
    return [
        dict(type='LoadImageFromFile', backend_args=backend_args),
        dict(type='LoadAnnotations', with_bbox=True),
        dict(type='Resize', scale=(256, 256), keep_ratio=True),
        dict(type='PackDetInputs'),
    ]


def _two_coco_images(cfg, coco128_root):
    from mmdet.registry import DATASETS
    ds_cfg = copy.deepcopy(cfg.train_dataloader.dataset)
    ds_cfg.update(
        data_root=coco128_root,
        ann_file='annotations/instances_train2017.json',
        data_prefix=dict(img='train2017/'),
        pipeline=_small_pipeline(),
        indices=[0, 1])
    dataset = DATASETS.build(ds_cfg)
    assert len(dataset) == 2
    # differently sized images, so the batch is padded and the masks are exercised
    samples = [dataset[i] for i in range(2)]
    shapes = {tuple(s['inputs'].shape[-2:]) for s in samples}
    assert len(shapes) == 2, shapes
    from mmengine.dataset import pseudo_collate
    return pseudo_collate(samples)


@pytest.mark.slow
@pytest.mark.parametrize('config', CONFIGS)
def test_host_detr_train_and_predict_step(config, coco128_root):
    from mmengine.hub import get_config
    from mmengine.optim import build_optim_wrapper
    from mmengine.registry import init_default_scope
    from mmdet.registry import MODELS

    torch.manual_seed(0)
    init_default_scope('mmdet')
    cfg = get_config(config)  # resolves the 'mmdet::' prefix
    cfg.model.backbone.init_cfg = None  # no download; the weights do not matter here
    cfg.model.backbone.depth = 18  # ResNet-18: its stages give 64, 128, 256, 512 channels
    cfg.model.neck.in_channels = [
        (64, 128, 256, 512)[i] for i in cfg.model.backbone.out_indices]
    model = MODELS.build(cfg.model)
    model.init_weights()
    data = _two_coco_images(cfg, coco128_root)
    assert all(len(s.gt_instances) > 0 for s in data['data_samples'])

    model.train()
    optim_wrapper = build_optim_wrapper(model, cfg.optim_wrapper)
    watched = [p for n, p in model.named_parameters()
               if p.requires_grad and 'encoder' in n][0]
    before = watched.detach().clone()
    log_vars = model.train_step(copy.deepcopy(data), optim_wrapper)
    assert torch.isfinite(log_vars['loss']) and log_vars['loss'] > 0
    assert {'loss_cls', 'loss_bbox', 'loss_iou'} <= set(log_vars)
    assert not torch.equal(before, watched.detach()), 'the optimizer step changed nothing'

    model.eval()
    with torch.no_grad():
        results = model.val_step(copy.deepcopy(data))
    assert len(results) == 2
    for res in results:
        pred = res.pred_instances
        h, w = res.ori_shape
        assert len(pred) == cfg.model.test_cfg.get('max_per_img', 100)
        assert pred.bboxes.shape[1] == 4 and torch.isfinite(pred.bboxes).all()
        # boxes are rescaled to the original image and clipped to it
        assert pred.bboxes[:, 0::2].min() >= 0 and pred.bboxes[:, 0::2].max() <= w + 1
        assert pred.bboxes[:, 1::2].min() >= 0 and pred.bboxes[:, 1::2].max() <= h + 1
        assert ((pred.labels >= 0) & (pred.labels < 80)).all()
    assert osp.isdir(coco128_root)
