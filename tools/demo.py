"""Train a small PEG Deformable-DETR and the same model with sine PE; compare COCO mAP.

With no arguments this needs no network and no data beside the repository: it generates the
synthetic ``shapes_coco`` dataset (coloured rectangles / ellipses / triangles on textured
backgrounds, 3 classes, images 128-192 px) into ``data/shapes_coco``, trains
``configs/peg_deformable_detr/deformable-detr-{peg,sine}_r18-half_1xb4-400i_shapes.py`` under
identical settings (same seed, data order and schedule; CPU, a few minutes each), evaluates
both with mmdet's ``CocoMetric`` (pycocotools) and prints the two side by side::

    python tools/demo.py                 # a few minutes per model on 2 CPU cores
    python tools/demo.py --quick         # seconds: a smoke run (tiny data, a few iterations)
    python tools/demo.py --data-root /data/coco --iters 5000   # a real COCO tree

``--data-root`` expects the COCO layout (``annotations/instances_{train,val}2017.json``,
``train2017/``, ``val2017/``; change the names with ``--train-ann`` etc.), and switches the
head to 80 classes.
"""
import argparse
import copy
import os
import os.path as osp
import sys
import time

REPO = osp.dirname(osp.dirname(osp.abspath(__file__)))
CONFIG_DIR = osp.join(REPO, 'configs', 'peg_deformable_detr')
CONFIGS = {
    'peg': osp.join(CONFIG_DIR, 'deformable-detr-peg_r18-half_1xb4-400i_shapes.py'),
    'sine': osp.join(CONFIG_DIR, 'deformable-detr-sine_r18-half_1xb4-400i_shapes.py'),
}
METRICS = ('bbox_mAP', 'bbox_mAP_50', 'bbox_mAP_75', 'bbox_mAP_s', 'bbox_mAP_m', 'bbox_mAP_l')


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--quick', action='store_true',
                        help='smoke run: 24 tiny images, a few iterations (seconds)')
    parser.add_argument('--data-root', help='a COCO tree to use instead of shapes_coco')
    parser.add_argument('--train-ann', default='annotations/instances_train2017.json')
    parser.add_argument('--train-img', default='train2017/')
    parser.add_argument('--val-ann', default='annotations/instances_val2017.json')
    parser.add_argument('--val-img', default='val2017/')
    parser.add_argument('--iters', type=int, help='training iterations (default: config)')
    parser.add_argument('--batch-size', type=int, help='images per iteration (default: config, 4)')
    parser.add_argument('--work-dir', default=osp.join(REPO, 'work_dirs', 'demo'))
    parser.add_argument('--seed', type=int, default=0)
    parser.add_argument('--only', choices=sorted(CONFIGS), action='append',
                        help='train only this model (repeatable)')
    return parser.parse_args(argv)


def prepare_shapes(quick):
    sys.path.insert(0, osp.join(REPO, 'tools', 'dataset_converters'))
    from make_shapes_coco import make_shapes_coco
    if quick:
        root = osp.join(REPO, 'data', 'shapes_coco_quick')
        make_shapes_coco(root, num_train=16, num_val=8, min_size=96, max_size=128, seed=0)
    else:
        root = osp.join(REPO, 'data', 'shapes_coco')
        make_shapes_coco(root, seed=0)
    return root


def build_cfg(pe, args, data_root):
    from mmengine.config import Config
    cfg = Config.fromfile(CONFIGS[pe])
    root = data_root.rstrip('/') + '/'
    for loader in (cfg.train_dataloader, cfg.val_dataloader, cfg.test_dataloader):
        loader.dataset.data_root = root
    if args.data_root:  # a real COCO tree: its own 80 classes and file names
        for loader in (cfg.train_dataloader, cfg.val_dataloader, cfg.test_dataloader):
            loader.dataset.pop('metainfo', None)
        cfg.train_dataloader.dataset.ann_file = args.train_ann
        cfg.train_dataloader.dataset.data_prefix = dict(img=args.train_img)
        for loader in (cfg.val_dataloader, cfg.test_dataloader):
            loader.dataset.ann_file = args.val_ann
            loader.dataset.data_prefix = dict(img=args.val_img)
        cfg.model.bbox_head.num_classes = 80
        val_ann = osp.join(root, args.val_ann)
    else:
        val_ann = osp.join(root, 'annotations/instances_val.json')
    cfg.val_evaluator.ann_file = val_ann
    cfg.test_evaluator = copy.deepcopy(cfg.val_evaluator)
    iters = args.iters or (6 if args.quick else cfg.train_cfg.max_iters)
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
    batch = args.batch_size or (2 if args.quick else cfg.train_dataloader.batch_size)
    cfg.train_dataloader.batch_size = batch
    cfg.randomness = dict(seed=args.seed)
    cfg.work_dir = osp.join(args.work_dir, pe)
    cfg.launcher = 'none'
    return cfg


def run_one(pe, args, data_root):
    from mmengine.runner import Runner

    import mmposenc.registry  # noqa: F401
    cfg = build_cfg(pe, args, data_root)
    runner = Runner.from_cfg(cfg)
    num_params = sum(p.numel() for p in runner.model.parameters())
    t0 = time.perf_counter()
    runner.train()
    train_time = time.perf_counter() - t0
    metrics = runner.val()
    return dict(pe=pe, params=num_params, train_time=train_time,
                iters=cfg.train_cfg.max_iters, metrics=metrics)


def format_table(results):
    header = ['encoder PE', 'params'] + [m.replace('bbox_', '') for m in METRICS] + [
        'train s', 'iters']
    rows = []
    for r in results:
        values = [r['metrics'].get(f'coco/{m}', float('nan')) for m in METRICS]
        rows.append([r['pe'], f"{r['params'] / 1e6:.2f}M"] + [f'{v:.3f}' for v in values] +
                    [f"{r['train_time']:.0f}", str(r['iters'])])
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows)]
    line = lambda cells: '| ' + ' | '.join(  # noqa: E731
        str(c).ljust(w) for c, w in zip(cells, widths)) + ' |'
    out = [line(header), '|' + '|'.join('-' * (w + 2) for w in widths) + '|']
    out += [line(r) for r in rows]
    return '\n'.join(out)


def main(argv=None):
    args = parse_args(argv)
    os.chdir(REPO)
    data_root = args.data_root or prepare_shapes(args.quick)
    results = [run_one(pe, args, data_root) for pe in (args.only or ['peg', 'sine'])]
    source = args.data_root or f'shapes_coco ({data_root})'
    print(f'\nDeformable-DETR on {source}: encoder position encoding, COCO bbox metrics '
          '(pycocotools), identical settings\n')
    print(format_table(results))
    return results


if __name__ == '__main__':
    main()
