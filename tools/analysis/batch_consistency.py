"""Does a detector's output on an image depend on the batch it is evaluated in?

Trains small DETR and Deformable-DETR detectors (encoder PE = PEG and sine) on the demo's
synthetic ``shapes_coco`` (images of 128-192 px, so batches are padded, and sizes are mostly not
multiples of the stride), then evaluates each on the validation set with batch 1 and batch 4
(same order) and reports COCO bbox mAP of both and the largest per-image score difference
(each image's scores sorted, compared rank by rank). Rows:

- ``PEG (ours)`` / ``sine (ours)``: ``PEGDETR`` / ``PEGDeformableDETR`` as configured here (exact
  padding masks; Deformable-DETR with ``MaskedChannelMapper``);
- ``sine, stock mmdet``: the sine checkpoint in mmdet's own ``DETR`` / ``DeformableDETR`` (with
  mmdet's ``ChannelMapper``): nearest-interpolated masks, GroupNorm over the padding;
- Deformable-DETR ``PEG (ours), ChannelMapper``: the PEG checkpoint with mmdet's neck.

A second score column runs the backbone on each image alone and pastes its maps into the batch
(zeros in the padding): it removes the one dependence that remains by design, the conv backbone's
image border (in a batch ResNet convolves the padding's activations where alone it sees its own
zero padding), and shows what the rest of the model does with equal features.

Usage (CPU: about 80 s of CPU time per model to train, the demo's 400 iterations of 4 images,
plus the evaluations; checkpoints in ``--work-dir`` are reused by a second run)::

    OMP_NUM_THREADS=1 python tools/analysis/batch_consistency.py \\
        --out work_dirs/batch_consistency/results.json
    python tools/analysis/batch_consistency.py --quick   # smoke run, seconds of CPU

``--demo-work-dir work_dirs/demo`` trains nothing: it evaluates the sine and PEG
Deformable-DETRs that ``tools/demo.py`` trained (2500 iterations; their configs as the demo's
Runner dumped them, ``<dir>/{sine,peg}/*.py``, and the checkpoints named by
``<dir>/{sine,peg}/last_checkpoint``) on the demo's validation set, with the same four rows::

    OMP_NUM_THREADS=1 python tools/analysis/batch_consistency.py --demo-work-dir work_dirs/demo \\
        --out work_dirs/batch_consistency/demo.json
"""
import argparse
import contextlib
import copy
import io
import json
import os
import os.path as osp
import sys
import time

import torch
from torch import nn

# this checkout's mmposenc first (a tool of a clone imports the clone's, installed or not)
sys.path.insert(0, osp.dirname(osp.dirname(osp.dirname(osp.realpath(__file__)))))

REPO = osp.dirname(osp.dirname(osp.dirname(osp.realpath(__file__))))
DD_DIR = osp.join(REPO, 'configs', 'peg_deformable_detr')
DD_CONFIGS = {
    'peg': osp.join(DD_DIR, 'deformable-detr-peg_r18-half_1xb4-400i_shapes.py'),
    'sine': osp.join(DD_DIR, 'deformable-detr-sine_r18-half_1xb4-400i_shapes.py'),
}
OURS_KEYS = ('encoder_pos', 'decoder_pos', 'level_embed', 'peg_after', 'peg_cfg', 'cape_cfg')


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--iters', type=int, default=400,
                        help='training iterations per model (the demo configs: 400)')
    parser.add_argument('--work-dir', default=osp.join('work_dirs', 'batch_consistency'))
    parser.add_argument('--data-root', default=osp.join('data', 'shapes_coco'),
                        help='shapes_coco is generated there if absent (as tools/demo.py does)')
    parser.add_argument('--num-val', type=int, default=100, help='validation images used')
    parser.add_argument('--batch-sizes', type=int, nargs=2, default=(1, 4))
    parser.add_argument('--detectors', nargs='+', default=['detr', 'deformable-detr'],
                        choices=['detr', 'deformable-detr'])
    parser.add_argument('--quick', action='store_true',
                        help='smoke run: tiny dataset, 4 iterations, 8 validation images')
    parser.add_argument('--demo-work-dir',
                        help="evaluate tools/demo.py's trained sine and PEG Deformable-DETRs "
                        '(<dir>/{sine,peg}) instead of training; --detectors, --iters, '
                        '--data-root and --work-dir are then unused')
    parser.add_argument('--out', help='write the rows as JSON here')
    return parser.parse_args(argv)


def deformable_cfg(pe, data_root, iters):
    from mmengine.config import Config
    cfg = Config.fromfile(DD_CONFIGS[pe])
    root = data_root.rstrip('/') + '/'
    for loader in (cfg.train_dataloader, cfg.val_dataloader, cfg.test_dataloader):
        loader.dataset.data_root = root
    cfg.val_evaluator.ann_file = root + 'annotations/instances_val.json'
    cfg.test_evaluator = copy.deepcopy(cfg.val_evaluator)
    cfg.train_cfg.max_iters = iters
    cfg.train_cfg.val_interval = iters + 1
    cfg.param_scheduler = [
        dict(type='LinearLR', start_factor=0.1, by_epoch=False, begin=0,
             end=max(1, min(50, iters // 10))),
        dict(type='MultiStepLR', by_epoch=False, begin=0, end=iters,
             milestones=[max(1, int(iters * 0.8))], gamma=0.1)
    ]
    cfg.default_hooks.checkpoint.interval = iters
    cfg.default_hooks.logger.interval = max(1, min(50, iters // 4))
    cfg.log_level = 'WARNING'
    cfg.randomness = dict(seed=0)
    cfg.launcher = 'none'
    return cfg


def detr_cfg(pe, data_root, iters):
    """The same data, backbone, width, depth, queries and schedule as the Deformable-DETR demo,
    with DETR's single C5 level, its attention and head (mmdet's DETR recipe otherwise)."""
    cfg = deformable_cfg('sine', data_root, iters)
    dims, old = cfg.embed_dims, cfg.model

    def attn():
        return dict(embed_dims=dims, num_heads=4, dropout=0.0, batch_first=True)

    ffn = dict(embed_dims=dims, feedforward_channels=2 * dims, num_fcs=2, ffn_drop=0.0,
               act_cfg=dict(type='ReLU', inplace=True))
    cfg.model = dict(
        type='mmposenc.PEGDETR',
        encoder_pos=pe,
        decoder_pos='sine',
        peg_after=(0, ),
        num_queries=old.num_queries,
        data_preprocessor=old.data_preprocessor,
        backbone=dict(old.backbone, out_indices=(3, )),
        neck=dict(type='ChannelMapper', in_channels=[old.neck.in_channels[-1]], kernel_size=1,
                  out_channels=dims, act_cfg=None, norm_cfg=None, num_outs=1),
        encoder=dict(num_layers=2, layer_cfg=dict(self_attn_cfg=attn(), ffn_cfg=ffn)),
        decoder=dict(num_layers=2, return_intermediate=True,
                     layer_cfg=dict(self_attn_cfg=attn(), cross_attn_cfg=attn(), ffn_cfg=ffn)),
        positional_encoding=dict(num_feats=dims // 2, normalize=True),
        bbox_head=dict(
            type='DETRHead', num_classes=old.bbox_head.num_classes, embed_dims=dims,
            loss_cls=dict(type='CrossEntropyLoss', bg_cls_weight=0.1, use_sigmoid=False,
                          loss_weight=1.0, class_weight=1.0),
            loss_bbox=dict(type='L1Loss', loss_weight=5.0),
            loss_iou=dict(type='GIoULoss', loss_weight=2.0)),
        train_cfg=dict(assigner=dict(type='HungarianAssigner', match_costs=[
            dict(type='ClassificationCost', weight=1.),
            dict(type='BBoxL1Cost', weight=5.0, box_format='xywh'),
            dict(type='IoUCost', iou_mode='giou', weight=2.0)
        ])),
        test_cfg=dict(max_per_img=old.test_cfg.max_per_img))
    cfg.optim_wrapper.paramwise_cfg = None
    return cfg


def train(cfg, work_dir):
    """Train ``cfg`` into ``work_dir`` (reused when its checkpoint exists); the checkpoint."""
    ckpt = osp.join(work_dir, f'iter_{cfg.train_cfg.max_iters}.pth')
    if osp.isfile(ckpt):
        return ckpt, None
    from mmengine.runner import Runner
    cfg = copy.deepcopy(cfg)
    cfg.work_dir = work_dir
    runner = Runner.from_cfg(cfg)
    t0 = time.process_time()
    runner.train()
    return ckpt, time.process_time() - t0


def demo_run(demo_work_dir, pe):
    """The config and checkpoint that ``tools/demo.py`` wrote for encoding ``pe``.

    Args:
        demo_work_dir (str): The demo's ``--work-dir`` (``work_dirs/demo`` by default).
        pe (str): ``'sine'`` or ``'peg'``.

    Returns:
        tuple[Config, str]: The config the demo's Runner dumped into ``<demo_work_dir>/<pe>``
        (data paths included) and the checkpoint its ``last_checkpoint`` names.
    """
    import glob

    from mmengine.config import Config
    run_dir = osp.join(demo_work_dir, pe)
    last = osp.join(run_dir, 'last_checkpoint')
    configs = sorted(glob.glob(osp.join(run_dir, '*.py')))
    if not osp.isfile(last) or len(configs) != 1:
        found = 'no last_checkpoint' if not osp.isfile(last) else f'{len(configs)} configs'
        raise FileNotFoundError(
            f'{run_dir}: not a finished tools/demo.py run of the {pe!r} model ({found}; '
            'expected one dumped config *.py and last_checkpoint): run tools/demo.py first')
    with open(last) as f:
        # the path as the demo saved it; the file next to last_checkpoint if the tree moved
        ckpt = f.read().strip()
    if not osp.isfile(ckpt):
        ckpt = osp.join(run_dir, osp.basename(ckpt))
    if not osp.isfile(ckpt):
        raise FileNotFoundError(f'{last} names {ckpt!r}, which does not exist')
    return Config.fromfile(configs[0]), ckpt


def build(model_cfg, ckpt, variant='ours'):
    """The model of ``model_cfg`` with ``ckpt`` loaded strictly. ``variant``: ``'ours'``;
    ``'stock'``: mmdet's own class (and ``ChannelMapper``) on the same weights;
    ``'stock-neck'``: ours with mmdet's ``ChannelMapper``."""
    from mmengine.runner import load_checkpoint

    from mmposenc.registry import MODELS
    model_cfg = copy.deepcopy(model_cfg)
    if variant == 'stock':
        model_cfg.type = model_cfg.type.replace('mmposenc.PEG', '')  # DETR, DeformableDETR
        for key in OURS_KEYS:
            model_cfg.pop(key, None)
    if variant in ('stock', 'stock-neck'):
        model_cfg.neck.type = 'ChannelMapper'
    model = MODELS.build(model_cfg)
    with contextlib.redirect_stdout(io.StringIO()):
        load_checkpoint(model, ckpt, map_location='cpu', strict=True, logger='silent')
    return model.eval()


class PerImageBackbone(nn.Module):
    """Runs the backbone on each image of the batch alone and pastes its maps into maps of the
    batch's size (zeros in the padding): backbone features that do not depend on the batch."""

    def __init__(self, backbone):
        super().__init__()
        self.backbone = backbone
        self.img_shapes = None

    def forward(self, x):
        full = self.backbone(x)
        if self.img_shapes is None:
            return full
        outs = [torch.zeros_like(f) for f in full]
        for i, (h, w) in enumerate(self.img_shapes):
            for out, f in zip(outs, self.backbone(x[i:i + 1, :, :h, :w])):
                out[i, :, :f.shape[-2], :f.shape[-1]] = f[0]
        return tuple(outs)


def evaluate(model, dataset, ann_file, batch_size, num_val, per_image_backbone=False):
    """(COCO bbox mAP, {img_id: sorted scores}) of ``model`` on the first ``num_val`` images."""
    from mmdet.evaluation import CocoMetric
    from mmengine.dataset import pseudo_collate
    from mmengine.evaluator import Evaluator
    with contextlib.redirect_stdout(io.StringIO()):  # pycocotools' loading messages
        evaluator = Evaluator(CocoMetric(ann_file=ann_file, metric='bbox'))
    evaluator.dataset_meta = dataset.metainfo
    backbone = model.backbone
    if per_image_backbone:
        model.backbone = PerImageBackbone(backbone)
    scores = {}
    try:
        with torch.no_grad():
            for start in range(0, num_val, batch_size):
                batch = pseudo_collate(
                    [dataset[i] for i in range(start, min(start + batch_size, num_val))])
                if per_image_backbone:
                    model.backbone.img_shapes = [s.img_shape for s in batch['data_samples']]
                outputs = model.test_step(batch)
                for out in outputs:
                    scores[out.img_id] = out.pred_instances.scores.sort(descending=True)[0]
                evaluator.process(data_samples=outputs, data_batch=batch)
    finally:
        model.backbone = backbone
    with contextlib.redirect_stdout(io.StringIO()):
        metrics = evaluator.evaluate(num_val)
    return metrics['coco/bbox_mAP'], scores


def score_gap(a, b):
    return max((a[k] - b[k]).abs().max().item() for k in a)


def main(argv=None):
    args = parse_args(argv)
    os.environ.setdefault('OMP_NUM_THREADS', '1')
    from mmengine.registry import init_default_scope

    import mmposenc.models.detectors  # noqa: F401
    from mmposenc.utils.tools.shapes_coco import make_shapes_coco
    if args.demo_work_dir:
        args.detectors = ['deformable-detr']
    elif args.quick:
        args.data_root = osp.join('data', 'shapes_coco_quick')
        make_shapes_coco(args.data_root, num_train=16, num_val=8, min_size=96, max_size=128,
                         seed=0)
        args.iters, args.num_val = 4, 8
    else:
        make_shapes_coco(args.data_root, seed=0)
    init_default_scope('mmdet')
    from mmdet.registry import DATASETS
    make_cfg = {'detr': detr_cfg, 'deformable-detr': deformable_cfg}
    rows, (b1, b4) = [], args.batch_sizes
    for detector in args.detectors:
        cfgs, ckpts = {}, {}
        for pe in ('peg', 'sine'):
            if args.demo_work_dir:  # the demo's trained models
                cfgs[pe], ckpts[pe] = demo_run(args.demo_work_dir, pe)
                continue
            cfgs[pe] = make_cfg[detector](pe, args.data_root, args.iters)
            ckpts[pe], cpu = train(cfgs[pe], osp.join(args.work_dir, f'{detector}-{pe}'))
            if cpu is not None:
                print(f'{detector} {pe}: trained {args.iters} iterations, {cpu:.0f} s CPU')
        with contextlib.redirect_stdout(io.StringIO()):
            dataset = DATASETS.build(cfgs['sine'].test_dataloader.dataset)
        ann_file = cfgs['sine'].test_evaluator.ann_file
        variants = [('PEG (ours)', 'peg', 'ours'), ('sine (ours)', 'sine', 'ours'),
                    ('sine, stock mmdet', 'sine', 'stock')]
        if detector == 'deformable-detr':
            variants.append(('PEG (ours), ChannelMapper', 'peg', 'stock-neck'))
        num_val = min(args.num_val, len(dataset))
        for name, pe, variant in variants:
            model = build(cfgs[pe].model, ckpts[pe], variant)
            ap1, s1 = evaluate(model, dataset, ann_file, b1, num_val)
            ap4, s4 = evaluate(model, dataset, ann_file, b4, num_val)
            _, e1 = evaluate(model, dataset, ann_file, b1, num_val, per_image_backbone=True)
            _, e4 = evaluate(model, dataset, ann_file, b4, num_val, per_image_backbone=True)
            rows.append(dict(detector=detector, model=name, mAP_b1=ap1, mAP_b4=ap4,
                             score_gap=score_gap(s1, s4), score_gap_equal_backbone=score_gap(
                                 e1, e4), num_val=num_val,
                             iters=cfgs[pe].train_cfg.max_iters, checkpoint=ckpts[pe]))
            print(rows[-1])
    header = ('| Detector | Model | mAP, batch 1 | mAP, batch 4 | max per-image score diff | '
              'same, backbone run per image |')
    lines = [header, '| :-- | :-- | --: | --: | --: | --: |']
    for r in rows:
        lines.append(f"| {r['detector']} | {r['model']} | {r['mAP_b1']:.3f} | "
                     f"{r['mAP_b4']:.3f} | {r['score_gap']:.1e} | "
                     f"{r['score_gap_equal_backbone']:.1e} |")
    print('\n'.join(lines))
    if args.out:
        os.makedirs(osp.dirname(osp.abspath(args.out)), exist_ok=True)
        with open(args.out, 'w') as f:
            json.dump(rows, f, indent=1)
    return rows


if __name__ == '__main__':
    main()
