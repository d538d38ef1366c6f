"""Train one small Deformable-DETR three times: encoder PE none, sine and PEG (CPVT Table 4).

With no arguments this needs no network and no data beside the repository: it generates the
synthetic ``shapes_coco`` dataset (coloured rectangles / ellipses / triangles on textured
backgrounds, 3 classes; ``tools/dataset_converters/make_shapes_coco.py``) into
``data/shapes_coco_demo``, trains
``configs/peg_deformable_detr/deformable-detr-{nope,sine,peg}_r18-quarter_*_shapes.py`` under
identical settings (same seed, data order and schedule; the three differ only in
``encoder_pos``) as three processes side by side (one thread each), evaluates each on the val
split with mmdet's ``CocoMetric`` (pycocotools) a few times during training, prints a table and
writes ``<work-dir>/demo.png``: val mAP against iteration for the three encodings and a few val
images with the PEG model's boxes drawn by mmdet's ``DetLocalVisualizer``::

    python tools/demo.py                 # the demo (~7.5 min on 2 CPU cores, see README)
    python tools/demo.py --quick         # seconds: a smoke run (tiny data, a few iterations)
    python tools/demo.py --only peg --iters 1000
    python tools/demo.py --data-root /data/coco --iters 5000   # a real COCO tree

``--data-root`` expects the COCO layout (``annotations/instances_{train,val}2017.json``,
``train2017/``, ``val2017/``; change the names with ``--train-ann`` etc.), and switches the
head to 80 classes. With ``--quick`` only the first 16 training and 8 validation images of
that tree that have annotations are used (their annotations are written to
``<work-dir>/quick_data/``), so a smoke run on a full COCO tree neither trains nor evaluates
on thousands of full-size images.

Paths are the user's: ``--work-dir`` (default ``work_dirs/demo``) and ``--data-root`` are
relative to the working directory, and the generated ``shapes_coco`` goes to
``data/shapes_coco_demo`` there (``make demo`` runs in the repository root).
"""
import argparse
import copy
import hashlib
import json
import os
import os.path as osp
import subprocess
import sys
import time

REPO = osp.dirname(osp.dirname(osp.realpath(__file__)))
# this checkout's mmposenc first (a tool of a clone imports the clone's, installed or not)
sys.path.insert(0, osp.dirname(osp.dirname(osp.realpath(__file__))))
from mmposenc.utils.tools.runner import stretch_schedule  # noqa: E402
CONFIG_DIR = osp.join(REPO, 'configs', 'peg_deformable_detr')
# the rows of CPVT Table 4: "w/o PE", the stock sine PE, "w/o PE + PEG"
ENCODINGS = ('none', 'sine', 'peg')
CONFIG_NAME = 'deformable-detr-{}_r18-quarter_1xb4-2500i_shapes.py'
CONFIGS = {pe: osp.join(CONFIG_DIR, CONFIG_NAME.format('nope' if pe == 'none' else pe))
           for pe in ENCODINGS}
METRICS = ('bbox_mAP', 'bbox_mAP_50', 'bbox_mAP_75', 'bbox_mAP_s', 'bbox_mAP_m', 'bbox_mAP_l',
           'bbox_AR@100')
# the demo's dataset (tools/dataset_converters/make_shapes_coco.py)
SHAPES = dict(num_train=1000, num_val=100, min_size=96, max_size=128, object_size=(0.25, 0.5))
SHAPES_QUICK = dict(num_train=16, num_val=8, min_size=96, max_size=128, object_size=(0.25, 0.5))
NUM_SHOW = 4  # val images drawn with the PEG model's boxes
QUICK_IMAGES = dict(train=16, val=8)  # --quick on a COCO tree: images used per split


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
    parser.add_argument('--val-interval', type=int,
                        help='evaluate on val every this many iterations (default: config)')
    parser.add_argument('--batch-size', type=int, help='images per iteration (default: config)')
    parser.add_argument('--work-dir', default=osp.join('work_dirs', 'demo'),
                        help='outputs: one folder per encoding, demo.png (default: '
                        'work_dirs/demo in the working directory)')
    parser.add_argument('--seed', type=int, default=0)
    parser.add_argument('--only', choices=ENCODINGS, action='append',
                        help='train only this encoding (repeatable)')
    parser.add_argument('--jobs', type=int, default=len(ENCODINGS),
                        help='models trained at the same time, one process each (default: 3)')
    parser.add_argument('--threads', type=int, default=1,
                        help='torch threads per process (default: 1)')
    parser.add_argument('--num-train', type=int, help='shapes_coco training images')
    parser.add_argument('--num-val', type=int, help='shapes_coco val images')
    parser.add_argument('--img-size', type=int, nargs=2, metavar=('MIN', 'MAX'),
                        help='shapes_coco image sides (random in [MIN, MAX])')
    parser.add_argument('--object-size', type=float, nargs=2, metavar=('LO', 'HI'),
                        help='shapes_coco object sizes, fractions of the shorter image side')
    parser.add_argument('--max-objects', type=int, help='shapes_coco objects per image, at most')
    parser.add_argument('--cfg-options', nargs='+', default=[], metavar='KEY=VALUE',
                        help="override config keys, as in mmengine's DictAction")
    parser.add_argument('--worker', choices=ENCODINGS, help=argparse.SUPPRESS)
    parser.add_argument('--data-dir', help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    # the user's paths, relative to the working directory (also for the worker processes)
    for name in ('work_dir', 'data_root', 'data_dir'):
        if getattr(args, name):
            setattr(args, name, osp.abspath(getattr(args, name)))
    return args


def shapes_params(args):
    params = dict(SHAPES_QUICK if args.quick else SHAPES)
    if args.num_train:
        params['num_train'] = args.num_train
    if args.num_val:
        params['num_val'] = args.num_val
    if args.img_size:
        params['min_size'], params['max_size'] = args.img_size
    if args.object_size:
        params['object_size'] = tuple(args.object_size)
    if args.max_objects:
        params['max_objects'] = args.max_objects
    return params


def prepare_shapes(args):
    """Generate shapes_coco (skipped when already there) and return its root."""
    from mmposenc.utils.tools.shapes_coco import make_shapes_coco
    params = shapes_params(args)
    default = SHAPES_QUICK if args.quick else SHAPES
    name = 'shapes_coco_demo_quick' if args.quick else 'shapes_coco_demo'
    if params != default:  # other settings get their own folder
        name += '_' + hashlib.sha1(repr(sorted(params.items())).encode()).hexdigest()[:8]
    return make_shapes_coco(osp.abspath(osp.join('data', name)), seed=0, **params)


def prepare_quick_subset(args):
    """``--quick`` on a COCO tree: annotation files of the first :data:`QUICK_IMAGES`
    annotated images of each split, written to ``<work-dir>/quick_data/`` (the images stay in
    the tree). Returns the two files' absolute paths (train, val)."""
    out_dir = osp.join(args.work_dir, 'quick_data')
    os.makedirs(out_dir, exist_ok=True)
    out = []
    for split, ann in (('train', args.train_ann), ('val', args.val_ann)):
        src = osp.join(args.data_root, ann)
        with open(src) as f:
            coco = json.load(f)
        annotated = {a['image_id'] for a in coco.get('annotations', [])}
        images = sorted((img for img in coco.get('images', []) if img['id'] in annotated),
                        key=lambda img: img['id'])[:QUICK_IMAGES[split]]
        keep = {img['id'] for img in images}
        coco['images'] = images
        coco['annotations'] = [a for a in coco['annotations'] if a['image_id'] in keep]
        dst = osp.join(out_dir, f'instances_{split}.json')
        with open(dst, 'w') as f:
            json.dump(coco, f)
        out.append(dst)
    return tuple(out)


def build_cfg(pe, args, data_root):
    """The config of encoding ``pe`` with the demo's command-line settings applied."""
    from mmengine.config import Config, DictAction
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
    cfg.val_evaluator.metric_items = [m[len('bbox_'):] for m in METRICS]
    cfg.test_evaluator = copy.deepcopy(cfg.val_evaluator)
    if args.cfg_options:
        options = argparse.Namespace()
        DictAction(option_strings=[], dest='o')(None, options, args.cfg_options)
        cfg.merge_from_dict(options.o)
    config_iters = cfg.train_cfg.max_iters
    iters = args.iters or (6 if args.quick else config_iters)
    interval = args.val_interval or (3 if args.quick else cfg.train_cfg.val_interval)
    if args.iters and not args.val_interval:  # keep the config's number of evaluations
        interval = max(1, round(iters * cfg.train_cfg.val_interval / config_iters))
    cfg.train_cfg.val_interval = interval
    # the config's schedule (warm-up, then steps at fixed fractions), stretched to ``iters``
    stretch_schedule(cfg, iters)
    cfg.default_hooks.checkpoint.interval = iters
    cfg.default_hooks.logger.interval = max(1, min(50, iters // 4))
    if args.batch_size or args.quick:
        cfg.train_dataloader.batch_size = args.batch_size or 2
    cfg.randomness = dict(seed=args.seed)
    cfg.work_dir = osp.join(args.work_dir, pe)
    cfg.launcher = 'none'
    return cfg


def make_curve_hook(curve_file):
    """A hook that appends each validation's metrics, with the training time so far (process
    CPU time and wall time, validation excluded), to the JSON-lines file ``curve_file``."""
    from mmengine.hooks import Hook

    class CurveHook(Hook):
        priority = 'LOWEST'

        def before_train(self, runner):
            self.start = (time.process_time(), time.perf_counter())
            self.val_time = [0.0, 0.0]

        def before_val_epoch(self, runner):
            self.val_start = (time.process_time(), time.perf_counter())

        def after_val_epoch(self, runner, metrics=None):
            now = (time.process_time(), time.perf_counter())
            for i in range(2):
                self.val_time[i] += now[i] - self.val_start[i]
            point = dict(
                iter=runner.iter,
                train_cpu=now[0] - self.start[0] - self.val_time[0],
                train_wall=now[1] - self.start[1] - self.val_time[1],
                val_cpu=self.val_time[0],
                metrics={k: float(v) for k, v in (metrics or {}).items()})
            with open(curve_file, 'a') as f:
                f.write(json.dumps(point) + '\n')

    return CurveHook()


def predict_samples(runner, num):
    """Predictions of the trained model on the first ``num`` val images (original scale)."""
    import torch
    model = runner.model
    model.eval()
    out = []
    loader = runner.val_dataloader
    with torch.no_grad():
        for batch in loader:
            for sample in model.test_step(batch):
                pred = sample.pred_instances
                out.append(dict(img_path=sample.img_path,
                                bboxes=pred.bboxes.tolist(), scores=pred.scores.tolist(),
                                labels=pred.labels.tolist()))
            if len(out) >= num:
                break
    return out[:num]


def run_worker(args):
    """Train one encoding (``--worker``); write its curve and result files."""
    import torch
    from mmengine.runner import Runner

    import mmposenc.registry  # noqa: F401
    torch.set_num_threads(args.threads)
    pe = args.worker
    cfg = build_cfg(pe, args, args.data_dir)
    os.makedirs(cfg.work_dir, exist_ok=True)
    curve_file = osp.join(cfg.work_dir, 'curve.jsonl')
    if osp.exists(curve_file):
        os.remove(curve_file)
    runner = Runner.from_cfg(cfg)
    runner.register_hook(make_curve_hook(curve_file))
    num_params = sum(p.numel() for p in runner.model.parameters())
    cpu0, wall0 = time.process_time(), time.perf_counter()
    runner.train()
    total_cpu, total_wall = time.process_time() - cpu0, time.perf_counter() - wall0
    with open(curve_file) as f:
        curve = [json.loads(line) for line in f]
    result = dict(pe=pe, params=num_params, iters=cfg.train_cfg.max_iters,
                  train_images=len(runner.train_dataloader.dataset),
                  val_images=len(runner.val_dataloader.dataset),
                  batch_size=cfg.train_dataloader.batch_size, threads=args.threads,
                  curve=curve, metrics=curve[-1]['metrics'],
                  train_cpu=curve[-1]['train_cpu'], train_wall=curve[-1]['train_wall'],
                  total_cpu=total_cpu, total_wall=total_wall,
                  samples=predict_samples(runner, NUM_SHOW) if pe == 'peg' else [])
    with open(osp.join(cfg.work_dir, 'result.json'), 'w') as f:
        json.dump(result, f)


def worker_argv(args):
    """The command-line options a worker process needs to build the same config."""
    argv = ['--quick'] if args.quick else []
    names = ['iters', 'val_interval', 'batch_size', 'seed', 'threads']
    if args.data_root:
        names += ['data_root', 'train_ann', 'train_img', 'val_ann', 'val_img']
    for name in names:
        value = getattr(args, name)
        if value is not None:
            argv += ['--' + name.replace('_', '-'), str(value)]
    if args.cfg_options:
        argv += ['--cfg-options', *args.cfg_options]
    return argv


def run_all(args, data_root, encodings):
    """Train ``encodings`` as ``args.jobs`` parallel worker processes; return their results."""
    pending, running, results = list(encodings), {}, {}
    shown = {pe: 0 for pe in encodings}
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads))
    argv = worker_argv(args)
    while pending or running:
        while pending and len(running) < max(1, args.jobs):
            pe = pending.pop(0)
            work_dir = osp.join(args.work_dir, pe)
            os.makedirs(work_dir, exist_ok=True)
            for name in ('curve.jsonl', 'result.json'):
                if osp.exists(osp.join(work_dir, name)):
                    os.remove(osp.join(work_dir, name))
            log = open(osp.join(work_dir, 'demo.log'), 'w')
            cmd = [sys.executable, osp.abspath(__file__), *argv, '--worker', pe,
                   '--data-dir', data_root, '--work-dir', args.work_dir]
            running[pe] = (subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                            env=env), log)
            print(f'[{pe}] training (log: {osp.relpath(log.name)})', flush=True)
        time.sleep(0.5)
        for pe in list(running):
            proc, log = running[pe]
            shown[pe] = report_progress(args, pe, shown[pe])
            if proc.poll() is None:
                continue
            log.close()
            del running[pe]
            if proc.returncode != 0:
                with open(log.name) as f:
                    tail = f.read()[-4000:]
                raise RuntimeError(f'training {pe} failed (exit {proc.returncode}); the end '
                                   f'of {log.name}:\n{tail}')
            with open(osp.join(args.work_dir, pe, 'result.json')) as f:
                results[pe] = json.load(f)
    return [results[pe] for pe in encodings]


def report_progress(args, pe, shown):
    """Print the validation points of ``pe`` not printed yet; return how many are printed."""
    curve_file = osp.join(args.work_dir, pe, 'curve.jsonl')
    if not osp.exists(curve_file):
        return shown
    with open(curve_file) as f:
        lines = [line for line in f if line.endswith('\n')]
    for line in lines[shown:]:
        p = json.loads(line)
        m = p['metrics']
        print(f"[{pe}] iter {p['iter']}: mAP {m.get('coco/bbox_mAP', float('nan')):.3f}, "
              f"mAP_50 {m.get('coco/bbox_mAP_50', float('nan')):.3f} "
              f"(training so far: {p['train_cpu']:.0f} s CPU, {p['train_wall']:.0f} s wall)",
              flush=True)
    return len(lines)


def format_table(results):
    """Markdown table of the final metrics; a metric that is -1 for every model (COCO's value
    when no object of that size exists, e.g. mAP_l on shapes_coco) is left out."""
    metrics = [m for m in METRICS
               if any(r['metrics'].get(f'coco/{m}', -1.0) != -1.0 for r in results)]
    header = ['encoder PE', 'params'] + [m.replace('bbox_', '') for m in metrics] + [
        'train CPU s', 'train wall s', 'iters']
    rows = []
    for r in results:
        values = [r['metrics'].get(f'coco/{m}', float('nan')) for m in metrics]
        rows.append([r['pe'], f"{r['params'] / 1e6:.3f}M"] + [f'{v:.3f}' for v in values] +
                    [f"{r['train_cpu']:.0f}", f"{r['train_wall']:.0f}", str(r['iters'])])
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows)]
    line = lambda cells: '| ' + ' | '.join(  # noqa: E731
        str(c).ljust(w) for c, w in zip(cells, widths)) + ' |'
    out = [line(header), '|' + '|'.join('-' * (w + 2) for w in widths) + '|']
    out += [line(r) for r in rows]
    return '\n'.join(out)


def draw_figure(results, val_ann, out_file, title):
    """Val mAP against iteration for each encoding, and the PEG model's boxes on val images
    (drawn by mmdet's ``DetLocalVisualizer``, ground truth on the left of each pair)."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    import mmcv
    import numpy as np
    import torch
    from mmdet.structures import DetDataSample
    from mmdet.visualization import DetLocalVisualizer
    from mmengine.structures import InstanceData

    samples = next((r['samples'] for r in results if r['pe'] == 'peg'), [])
    ncols = 3 if samples else 1
    fig = plt.figure(figsize=(12.5 if samples else 5.5, 5), dpi=100)
    grid = fig.add_gridspec(2, ncols, width_ratios=[1.2, 1, 1][:ncols])
    ax = fig.add_subplot(grid[:, 0])
    for r in results:
        iters = [p['iter'] for p in r['curve']]
        maps = [p['metrics'].get('coco/bbox_mAP', float('nan')) for p in r['curve']]
        ax.plot(iters, maps, marker='o', label=f"{r['pe']} ({maps[-1]:.3f})")
    ax.set_xlabel('iteration')
    ax.set_ylabel('val mAP@[.5:.95]')
    ax.set_title('encoder position encoding')
    ax.grid(alpha=0.3)
    ax.legend()
    if samples:
        with open(val_ann) as f:
            coco = json.load(f)
        cats = sorted(coco['categories'], key=lambda c: c['id'])
        cat_index = {c['id']: i for i, c in enumerate(cats)}
        by_name = {img['file_name']: img['id'] for img in coco['images']}
        gts = {}
        for ann in coco['annotations']:
            gts.setdefault(ann['image_id'], []).append(ann)
        vis = DetLocalVisualizer(name=f'demo_{os.getpid()}_{time.time()}', line_width=2)
        vis.dataset_meta = dict(classes=[c['name'] for c in cats])
        if len(cats) == 3:  # shapes_coco: the configs' palette; else mmdet's fixed random one
            vis.dataset_meta['palette'] = [(220, 20, 60), (0, 128, 255), (60, 180, 75)]
        scale = 4  # the images are small: draw on a nearest-upscaled copy
        for k, s in enumerate(samples[:4]):
            img = mmcv.imread(s['img_path'], channel_order='rgb')
            img = np.ascontiguousarray(img.repeat(scale, 0).repeat(scale, 1))
            anns = gts.get(by_name.get(osp.basename(s['img_path'])), [])
            gt_boxes = [[a['bbox'][0], a['bbox'][1], a['bbox'][0] + a['bbox'][2],
                         a['bbox'][1] + a['bbox'][3]] for a in anns]
            sample = DetDataSample()
            sample.gt_instances = InstanceData(
                bboxes=torch.tensor(gt_boxes, dtype=torch.float32).reshape(-1, 4) * scale,
                labels=torch.tensor([cat_index[a['category_id']] for a in anns],
                                    dtype=torch.long))
            sample.pred_instances = InstanceData(
                bboxes=torch.tensor(s['bboxes'], dtype=torch.float32).reshape(-1, 4) * scale,
                scores=torch.tensor(s['scores']), labels=torch.tensor(s['labels']))
            vis.add_datasample('val', img, data_sample=sample, draw_gt=True, draw_pred=True,
                               show=False, pred_score_thr=0.3)
            sub = fig.add_subplot(grid[k // 2, 1 + k % 2])
            sub.imshow(vis.get_image())
            sub.set_axis_off()
            sub.set_title('ground truth | PEG (score > 0.3)', fontsize=7)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(out_file)
    plt.close(fig)
    return out_file


def main(argv=None):
    args = parse_args(argv)
    if args.worker:
        return run_worker(args)
    t0 = time.perf_counter()
    data_root = args.data_root or prepare_shapes(args)
    if args.quick and args.data_root:
        args.train_ann, args.val_ann = prepare_quick_subset(args)
    encodings = [pe for pe in ENCODINGS if pe in (args.only or ENCODINGS)]
    results = run_all(args, data_root, encodings)
    source = args.data_root or f'shapes_coco ({osp.relpath(data_root)})'
    r0 = results[0]
    print(f'\nDeformable-DETR on {source}: encoder position encoding, val COCO bbox metrics '
          f"(pycocotools); identical seed, data and schedule ({r0['iters']} iterations of "
          f"{r0['batch_size']} images, {r0['threads']} thread(s) per model, "
          f'{min(args.jobs, len(results))} model(s) at a time)\n')
    print(format_table(results))
    os.makedirs(args.work_dir, exist_ok=True)
    val_ann = osp.join(data_root, args.val_ann if args.data_root else
                       'annotations/instances_val.json')
    out_file = draw_figure(
        results, val_ann, osp.join(args.work_dir, 'demo.png'),
        f"Deformable-DETR on {osp.basename(data_root.rstrip('/'))}, "
        f"{r0['iters']} iterations of {r0['batch_size']}")
    wall = time.perf_counter() - t0  # after the figure, which it counts
    print(f'\nfigure: {out_file}\ntotal wall time (data, training, evaluation, figure): '
          f'{wall:.0f} s')
    return results


if __name__ == '__main__':
    main()
