"""Evaluate detectors at several test batch sizes through the host's own test loop.

For every model and batch size (default 1, 2 and 8) the model's config is run by mmengine's
``Runner.test`` (the config's test pipeline, data preprocessor, ``TestLoop`` and evaluator:
``CocoMetric``), with the test dataloader's ``batch_size`` set and nothing else changed. The
tool reports, per model:

- the COCO bbox mAP at each batch size, to 4 decimals (and the mask mAP of models with
  instance masks, ``segm_mAP``);
- whether each image's predictions are the same as at batch 1: the largest difference of its
  scores rank by rank (each image's detections in the model's order) and of its boxes
  (pixels, in the original image) with the detections matched by label and score (detections
  whose scores tie within rounding may swap ranks; rank by rank too, in the JSON), labels
  compared too; ``same_images`` = how many images are within scores 1e-4 / boxes 0.01 px
  (issue 20's bar) with equal labels, ``identical`` = all of them, ``bitwise`` = images whose
  three tensors are equal bit for bit;
- the wall time of the test loop (from its first to its last iteration: data loading,
  ``test_step`` and the evaluator's per-batch processing; not the final COCO evaluation) at
  each batch size (and the process's CPU time over the same span: on a CPU shared with other
  jobs, a one-thread run's CPU time is the steadier measure), and, with
  ``--sort-by-aspect``, the same with the images ordered by aspect ratio (portrait ones
  together, then landscape, so that a batch holds images of similar shape and less padding;
  ``--sort-by-aspect LABEL ...``: for these models only).

Models (``--model LABEL CONFIG [CHECKPOINT]``, repeatable): a config path (or ``mmposenc::``
/ ``mmdet::`` name); ``off:CONFIG`` / ``on:CONFIG`` is the config with the model's one
switch ``padding_exact=False`` / ``True``; ``stock:CONFIG`` is the same config with the
host's own classes
(mmposenc's ``PEG*`` detector -> mmdet's, ``MaskedChannelMapper`` -> ``ChannelMapper``,
``PaddingExactResNet`` -> ``ResNet``), to be given a checkpoint with the same state-dict keys
(``encoder_pos='sine'``). Without a checkpoint ``--random-weights`` makes one (seeded): the
model's initial weights with trained-like norms (random norm affine parameters, the backbone's
BatchNorm statistics measured on the first images, then shifted: freshly initialised norms keep
a CNN's padded region at zero and hide what the issue is about); models with the same
state-dict keys share it.

Data: every config is pointed at a COCO tree (``--data-root``, default
``../shared/data/coco128``: its ``annotations/instances_train2017.json`` and ``train2017/``)
unless ``--keep-data``; the first ``--num-images`` images (default all) are written to an
annotation file in the work dir, which the dataset and the evaluator both read (in
aspect-ratio order for the sorted runs). Each run's predictions are saved in the work dir
(``<label>/predictions_b<N>[_sorted].pth``).

``--demo-work-dir DIR`` adds the models ``tools/demo.py`` trained (``DIR/{none,sine,peg}``:
the config the demo's Runner dumped and the checkpoint ``last_checkpoint`` names), on the
demo's own validation set: each as ours with the padding-exact backbone on, and the sine one
also with the switch off and in stock mmdet.

Usage::

    # COCO128, random weights with trained-like norms: ours vs stock mmdet on the same weights
    OMP_NUM_THREADS=1 python tools/analysis/batch_size_eval.py --random-weights \\
        --model "sine (ours)" \\
        configs/peg_deformable_detr/deformable-detr-sine_r50_16xb2-50e_coco.py \\
        --model "stock mmdet" mmdet::deformable_detr/deformable-detr_r50_16xb2-50e_coco.py \\
        --sort-by-aspect "sine (ours)" --out work_dirs/batch_size_eval/coco128.json \\
        --plot work_dirs/batch_size_eval/coco128.png
    # the demo's trained models
    python tools/analysis/batch_size_eval.py --demo-work-dir work_dirs/demo --sort-by-aspect
    # on a GPU
    python tools/analysis/batch_size_eval.py ... --device cuda
"""
import argparse
import contextlib
import copy
import glob
import io
import json
import os
import os.path as osp
import sys
import time
from typing import Dict, List, Optional

# this checkout's mmposenc first (a tool of a clone imports the clone's, installed or not)
sys.path.insert(0, osp.dirname(osp.dirname(osp.dirname(osp.realpath(__file__)))))

REPO = osp.dirname(osp.dirname(osp.dirname(osp.realpath(__file__))))

#: Tolerances of "the same predictions" (issue 20: scores 1e-4, boxes 0.01 px).
SCORE_TOL = 1e-4
BOX_TOL = 0.01
#: Arguments of mmposenc's detectors that mmdet's do not take (``stock:``).
OURS_KEYS = ('encoder_pos', 'decoder_pos', 'level_embed', 'peg_after', 'peg_cfg', 'cape_cfg',
             'backbone_strides', 'encoder_strides')


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--model', nargs='+', action='append', default=[],
                        metavar='LABEL CONFIG [CHECKPOINT]',
                        help='a row: label, config (stock:CONFIG = host classes), checkpoint')
    parser.add_argument('--demo-work-dir', help="add tools/demo.py's trained models")
    parser.add_argument('--data-root', default=None,
                        help='COCO tree (default ../shared/data/coco128)')
    parser.add_argument('--keep-data', action='store_true',
                        help="use each config's own test data instead of --data-root")
    parser.add_argument('--num-images', type=int, default=None,
                        help='the first N images of the test set (default: all)')
    parser.add_argument('--batch-sizes', type=int, nargs='+', default=[1, 2, 8])
    parser.add_argument('--sort-by-aspect', nargs='*', metavar='LABEL', default=None,
                        help='also run the batch sizes > 1 with the images in aspect-ratio '
                        'order: every model, or only the models with these labels')
    parser.add_argument('--random-weights', action='store_true',
                        help='models without a checkpoint get seeded random weights with '
                        'trained-like norms')
    parser.add_argument('--seed', type=int, default=0)
    parser.add_argument('--workers', type=int, default=0, help='dataloader workers')
    parser.add_argument('--device', default='cpu', help="'cpu' or 'cuda'")
    parser.add_argument('--work-dir', default=osp.join('work_dirs', 'batch_size_eval'))
    parser.add_argument('--out', help='write the rows as JSON here')
    parser.add_argument('--table', help='write the markdown table here')
    parser.add_argument('--plot', help='write the figure (PNG) here')
    args = parser.parse_args(argv)
    for spec in args.model:
        if len(spec) not in (2, 3):
            parser.error(f'--model {" ".join(spec)}: give LABEL CONFIG [CHECKPOINT]')
    if not args.model and not args.demo_work_dir:
        parser.error('give at least one --model or --demo-work-dir')
    if 1 not in args.batch_sizes:
        parser.error('--batch-sizes must include 1 (the reference)')
    return args


def to_stock(cfg) -> None:
    """The host's own classes in place of mmposenc's, same state-dict keys (in place)."""
    model = cfg.model
    if model.type.startswith('mmposenc.PEG'):
        model.type = model.type[len('mmposenc.PEG'):]
    for key in OURS_KEYS:
        model.pop(key, None)
    if model.get('neck', None) and model.neck.type == 'mmposenc.MaskedChannelMapper':
        model.neck.type = 'ChannelMapper'
    if model.backbone.type == 'mmposenc.PaddingExactResNet':
        model.backbone.type = 'ResNet'
        model.backbone.pop('padding_exact', None)
    if model.type.startswith('mmposenc.'):
        raise ValueError(f'stock: no host class for {model.type}')


def load_cfg(config: str, work_dir: str):
    """The config of a row (``stock:`` / ``off:`` applied), quiet, its work dir set."""
    from mmposenc.utils.tools.runner import load_config
    from mmengine.config import Config
    stock, off, on = (config.startswith(p) for p in ('stock:', 'off:', 'on:'))
    path = config.split(':', 1)[1] if stock or off or on else config
    if osp.isfile(path) and not path.endswith('.py'):
        raise ValueError(f'{path}: not a config (.py)')
    try:
        cfg = load_config(path, work_dir=work_dir)
    except ValueError:  # a dumped config (the demo's) has its own default_scope
        cfg = Config.fromfile(path)
        cfg.work_dir = work_dir
    if stock:
        to_stock(cfg)
    if off or on:  # the model's one switch (PaddingExactMixin)
        cfg.model.padding_exact = bool(on)
    cfg.log_level = 'WARNING'
    cfg.launcher = 'none'
    cfg.pop('visualizer', None)
    cfg.default_hooks.pop('visualization', None)
    cfg.default_hooks.pop('checkpoint', None)
    return cfg


def write_ann(src: str, dst: str, num_images: Optional[int], sort: bool) -> List[int]:
    """The first ``num_images`` images of ``src`` (with their annotations) into ``dst``,
    sorted by aspect ratio (width / height) if ``sort``; their ids in that order."""
    with open(src) as f:
        ann = json.load(f)
    images = ann['images'][:num_images] if num_images else ann['images']
    if sort:
        images = sorted(images, key=lambda im: (im['width'] / im['height'], im['id']))
    ids = {im['id'] for im in images}
    ann = dict(ann, images=images,
               annotations=[a for a in ann['annotations'] if a['image_id'] in ids])
    with open(dst, 'w') as f:
        json.dump(ann, f)
    return [im['id'] for im in images]


def test_ann_file(cfg) -> str:
    """The absolute annotation file of the config's test dataset."""
    from mmposenc.utils.tools.coco128 import innermost_dataset
    ds = innermost_dataset(cfg.test_dataloader.dataset)
    ann = ds.ann_file
    if not osp.isabs(ann) and ds.get('data_root', None):
        ann = osp.join(ds.data_root, ann)
    return osp.abspath(ann)


def set_test_data(cfg, ann_file: str, batch_size: int, workers: int) -> None:
    """Test dataloader: ``ann_file`` (dataset and evaluator), ``batch_size``, in order."""
    from mmposenc.utils.tools.coco128 import innermost_dataset
    loader = cfg.test_dataloader
    loader.batch_size = batch_size
    loader.num_workers = workers
    loader.persistent_workers = workers > 0
    loader.sampler = dict(type='DefaultSampler', shuffle=False)
    loader.pop('batch_sampler', None)
    innermost_dataset(loader.dataset).ann_file = ann_file
    evaluators = cfg.test_evaluator if isinstance(cfg.test_evaluator, list) else [
        cfg.test_evaluator]
    for e in evaluators:
        if 'ann_file' in e:
            e.ann_file = ann_file


class Recorder:
    """A hook: each image's predictions (cpu) and the test loop's wall time."""
    priority = 'LOWEST'

    def __init__(self, device: str):
        from mmengine.hooks import Hook
        self.device = device
        self.preds: Dict[int, dict] = {}
        self.start = self.end = self.cpu_start = self.cpu_end = None
        hook = self

        class _Hook(Hook):
            def before_test_iter(self, runner, batch_idx, data_batch=None):
                if hook.start is None:
                    hook.sync()
                    hook.start = time.perf_counter()
                    hook.cpu_start = time.process_time()

            def after_test_iter(self, runner, batch_idx, data_batch=None, outputs=None):
                for out in outputs:
                    p = out.pred_instances
                    hook.preds[int(out.img_id)] = dict(
                        scores=p.scores.detach().cpu(), bboxes=p.bboxes.detach().cpu(),
                        labels=p.labels.detach().cpu())
                hook.sync()
                hook.end = time.perf_counter()
                hook.cpu_end = time.process_time()

        self.hook = _Hook()

    def sync(self):
        if self.device != 'cpu':
            import torch
            torch.cuda.synchronize()


def check_keys(model, checkpoint: str) -> None:
    """The checkpoint has exactly the model's state-dict keys (Runner.test loads with
    strict=False and only warns).

    Raises:
        KeyError: one line naming the checkpoint and the first differing keys.
    """
    from mmposenc.engine.checkpoint import load_local_checkpoint
    state = load_local_checkpoint(checkpoint, map_location='cpu')
    state = state.get('state_dict', state)
    have, want = set(state), set(model.state_dict())
    if have != want:
        raise KeyError(f'{checkpoint}: state-dict keys differ from the model\'s (missing '
                       f'{sorted(want - have)[:3]}, unexpected {sorted(have - want)[:3]}): '
                       'give a checkpoint of this model (stock: takes encoder_pos=sine ones)')


@contextlib.contextmanager
def full_precision_coco_metrics():
    """mmdet's CocoMetric rounds the mAP it reports to 3 decimals (``round(val, 3)`` in
    ``compute_metrics``); within the context its module's ``round`` keeps every digit, so the
    batch sizes can be compared to 4 decimals (the evaluation itself is unchanged)."""
    from mmdet.evaluation.metrics import coco_metric
    coco_metric.round = lambda value, ndigits=None: value
    try:
        yield
    finally:
        del coco_metric.round


def run_test(cfg, checkpoint: str, device: str):
    """Runner.test of ``cfg`` with ``checkpoint``: (metrics, predictions, loop seconds, loop
    CPU seconds of this process)."""
    from mmengine.runner import Runner
    cfg = copy.deepcopy(cfg)
    cfg.load_from = checkpoint
    with contextlib.redirect_stdout(io.StringIO()):  # pycocotools' prints
        runner = Runner.from_cfg(cfg)
        runner.model.to(device)
        check_keys(runner.model, checkpoint)
        rec = Recorder(device)
        runner.register_hook(rec.hook, priority='LOWEST')
        with full_precision_coco_metrics():
            metrics = runner.test()
    return metrics, rec.preds, rec.end - rec.start, rec.cpu_end - rec.cpu_start


def matched_box_diff(a: dict, b: dict) -> float:
    """Largest, over the detections of ``a``, box difference (pixels, largest coordinate) to
    the closest detection of ``b`` with the same label and a score within ``SCORE_TOL``:
    detections whose scores tie within rounding may swap ranks, the set is what counts."""
    import torch
    if not a['scores'].numel():
        return 0.
    same = (a['labels'][:, None] == b['labels'][None]) & (
        (a['scores'][:, None] - b['scores'][None]).abs() <= SCORE_TOL)
    d = (a['bboxes'][:, None] - b['bboxes'][None]).abs().amax(-1)
    d = torch.where(same, d, torch.full_like(d, float('inf')))
    return d.min(1).values.max().item()


def compare(ref: Dict[int, dict], other: Dict[int, dict]) -> dict:
    """Per image: largest score and box differences rank by rank, the box difference with
    detections matched (:func:`matched_box_diff`, both ways), labels, bitwise images.
    ``same_images``: the images whose labels are equal, scores rank by rank within
    ``SCORE_TOL`` and matched boxes within ``BOX_TOL``; ``identical``: all of them are."""
    import torch
    ds = db = dm = 0.
    labels_equal, bitwise, same = True, 0, 0
    for img_id, a in ref.items():
        b = other[img_id]
        if a['scores'].shape != b['scores'].shape:
            ds = db = dm = float('inf')
            labels_equal = False
            continue
        s = bx = m = 0.
        if a['scores'].numel():
            s = (a['scores'] - b['scores']).abs().max().item()
            bx = (a['bboxes'] - b['bboxes']).abs().max().item()
            m = max(matched_box_diff(a, b), matched_box_diff(b, a))
        ds, db, dm = max(ds, s), max(db, bx), max(dm, m)
        labels = bool(torch.equal(a['labels'].sort()[0], b['labels'].sort()[0]))
        labels_equal &= labels
        same += labels and s <= SCORE_TOL and m <= BOX_TOL
        bitwise += all(torch.equal(a[k], b[k]) for k in ('scores', 'bboxes', 'labels'))
    return dict(max_score_diff=ds, max_box_diff=db, max_matched_box_diff=dm,
                labels_equal=labels_equal, bitwise_images=bitwise, same_images=same,
                images=len(ref), identical=labels_equal and ds <= SCORE_TOL and dm <= BOX_TOL)


def random_checkpoint(cfg, work_dir: str, seed: int, cache: dict, device: str) -> str:
    """Seeded initial weights with trained-like norms (module doc), saved; reused by models
    with the same state-dict keys."""
    import torch
    from mmposenc.utils.tools.coco128 import make_norms_trained_like
    from mmengine.runner import Runner
    cfg = copy.deepcopy(cfg)
    cfg.randomness = dict(seed=seed)
    cfg.model.backbone.init_cfg = None  # no pretrained download: random weights
    with contextlib.redirect_stdout(io.StringIO()):
        runner = Runner.from_cfg(cfg)
    model = runner.model.to(device)
    keys = tuple(sorted(model.state_dict()))
    if keys in cache:
        return cache[keys]
    model.init_weights()
    loader_cfg = copy.deepcopy(cfg.test_dataloader)
    loader_cfg.update(batch_size=4, num_workers=0, persistent_workers=False)
    with contextlib.redirect_stdout(io.StringIO()):
        data = next(iter(runner.build_dataloader(loader_cfg, seed=seed)))
    with torch.no_grad():
        inputs = model.data_preprocessor(data, False)['inputs']
        make_norms_trained_like(model, inputs, seed=seed)
    path = osp.join(work_dir, f'random_weights_{len(cache)}.pth')
    torch.save(dict(state_dict={k: v.cpu() for k, v in model.state_dict().items()},
                    meta=dict(seed=seed, note='initial weights, trained-like norms')), path)
    cache[keys] = path
    return path


def demo_models(demo_work_dir: str) -> List[tuple]:
    """(label, config, checkpoint) of tools/demo.py's trained models in ``demo_work_dir``."""
    rows = []
    for pe in ('none', 'sine', 'peg'):
        run_dir = osp.join(demo_work_dir, pe)
        last = osp.join(run_dir, 'last_checkpoint')
        configs = sorted(glob.glob(osp.join(run_dir, '*.py')))
        if not osp.isfile(last) or len(configs) != 1:
            continue
        with open(last) as f:
            ckpt = f.read().strip()
        if not osp.isfile(ckpt):
            ckpt = osp.join(run_dir, osp.basename(ckpt))
        rows.append((f'demo {pe} (ours)', configs[0], ckpt))
        if pe == 'sine':
            rows.append(('demo sine (ours), padding_exact=False', 'off:' + configs[0], ckpt))
            rows.append(('demo sine, stock mmdet', 'stock:' + configs[0], ckpt))
    if not rows:
        raise FileNotFoundError(
            f'{demo_work_dir}: no finished tools/demo.py run (<dir>/{{none,sine,peg}} with one '
            'dumped config and last_checkpoint): run tools/demo.py first')
    return rows


def exact_backbone(cfg) -> None:
    """The demo's models as ours: the padding-exact ResNet, on (their configs as the demo
    dumped them may predate it or have it off)."""
    if cfg.model.type.startswith('mmposenc.') and cfg.model.backbone.type in (
            'ResNet', 'mmposenc.PaddingExactResNet'):
        cfg.model.backbone.type = 'mmposenc.PaddingExactResNet'
        cfg.model.backbone.padding_exact = True


def evaluate_model(label, config, checkpoint, args, cache) -> dict:
    import torch
    from mmposenc.utils.tools.coco128 import DEFAULT_COCO128, point_at_coco
    work = osp.join(osp.abspath(args.work_dir), label.replace(' ', '_').replace('/', '_')
                    .replace(',', '').replace('(', '').replace(')', ''))
    os.makedirs(work, exist_ok=True)
    cfg = load_cfg(config, work)
    if label.startswith('demo '):
        exact_backbone(cfg)
    if not args.keep_data and not label.startswith('demo '):
        point_at_coco(cfg, args.data_root or DEFAULT_COCO128)
    src = test_ann_file(cfg)
    if checkpoint is None:
        if not args.random_weights:
            raise ValueError(f'--model {label}: no checkpoint; give one or --random-weights')
        set_test_data(cfg, src, 1, 0)
        checkpoint = random_checkpoint(cfg, osp.abspath(args.work_dir), args.seed, cache,
                                       args.device)
    runs = [(b, False) for b in args.batch_sizes]
    if args.sort_by_aspect is not None and (not args.sort_by_aspect
                                            or label in args.sort_by_aspect):
        runs += [(b, True) for b in args.batch_sizes if b > 1]
    row = dict(model=label, config=config, checkpoint=checkpoint, device=args.device, runs=[])
    ref = None
    for batch_size, sort in runs:
        ann = osp.join(work, f'ann_{"sorted" if sort else "order"}.json')
        ids = write_ann(src, ann, args.num_images, sort)
        set_test_data(cfg, ann, batch_size, args.workers)
        metrics, preds, seconds, cpu = run_test(cfg, checkpoint, args.device)
        torch.save(preds, osp.join(
            work, f'predictions_b{batch_size}{"_sorted" if sort else ""}.pth'))
        mAP = metrics.get('coco/bbox_mAP', float('nan'))
        run = dict(batch_size=batch_size, sorted=sort, mAP=mAP, seconds=seconds,
                   cpu_seconds=cpu, images=len(ids))
        if 'coco/segm_mAP' in metrics:  # instance masks: their mAP too
            run['segm_mAP'] = metrics['coco/segm_mAP']
        if ref is None:
            ref = preds
        run.update(compare(ref, preds))
        row['runs'].append(run)
        segm = f' (segm {run["segm_mAP"]:.4f})' if 'segm_mAP' in run else ''
        print(f'{label}: batch {batch_size}{" sorted" if sort else ""}: mAP {mAP:.4f}{segm}, '
              f'{seconds:.1f} s ({cpu:.1f} s CPU), max score diff {run["max_score_diff"]:.2e}, box '
              f'{run["max_box_diff"]:.2e} px (matched {run["max_matched_box_diff"]:.2e}), '
              f'identical {run["identical"]} ({run["same_images"]}/{run["images"]} images the '
              'same)', flush=True)
    return row


def _map_cell(run: dict) -> str:
    """The box mAP of a run, and its mask mAP after a slash where it has instance masks."""
    segm = f' / {run["segm_mAP"]:.4f}' if 'segm_mAP' in run else ''
    return f'{run["mAP"]:.4f}{segm}'


def table(rows: List[dict]) -> str:
    sizes = sorted({r['batch_size'] for row in rows for r in row['runs']})
    head = ['model'] + [f'mAP b{b}' for b in sizes] + [
        f'same as b1 at b{b}: images (max score / matched box diff)' for b in sizes
        if b > 1] + [
        f'b{b} wall / CPU (s)' for b in sizes]
    if any(r['sorted'] for row in rows for r in row['runs']):
        head += [f'b{b} sorted, wall / CPU (s)' for b in sizes if b > 1]
    lines = ['| ' + ' | '.join(head) + ' |', '|' + '---|' * len(head)]
    for row in rows:
        runs = {(r['batch_size'], r['sorted']): r for r in row['runs']}
        cells = [row['model']] + [_map_cell(runs[(b, False)]) for b in sizes]
        for b in sizes[1:]:
            r = runs[(b, False)]
            word = 'yes' if r['identical'] else 'no'
            if r['bitwise_images'] == r['images']:
                word = 'yes, bitwise'
            box = r.get('max_matched_box_diff', r['max_box_diff'])
            if box == float('inf'):  # no detection of the same label and score: rank-wise
                box = r['max_box_diff']
            count = f'{r["same_images"]}/{r["images"]}' if 'same_images' in r else ''
            cells.append(f'{word}, {count} ({r["max_score_diff"]:.1e} / {box:.1e} px)'
                         if count else f'{word} ({r["max_score_diff"]:.1e} / {box:.1e} px)')
        def secs(r):
            return f'{r["seconds"]:.1f} / {r["cpu_seconds"]:.1f}'
        cells += [secs(runs[(b, False)]) for b in sizes]
        if len(head) > len(cells):
            cells += [secs(runs[(b, True)]) if (b, True) in runs else '' for b in sizes[1:]]
        lines.append('| ' + ' | '.join(cells) + ' |')
    return '\n'.join(lines)


def plot(rows: List[dict], path: str) -> None:
    """Left: largest per-image score difference vs batch 1 per model and batch size (log;
    0 drawn at the floor). Right: test-loop time per batch size, in order and sorted (CPU
    time of the process on a CPU, wall time on a GPU)."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    floor = 1e-9
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    sizes = sorted({r['batch_size'] for row in rows for r in row['runs']} - {1})
    width = 0.8 / max(1, len(rows))
    for i, row in enumerate(rows):
        runs = {(r['batch_size'], r['sorted']): r for r in row['runs']}
        vals = [max(runs[(b, False)]['max_score_diff'], floor) for b in sizes]
        ax1.bar([k + i * width for k in range(len(sizes))], vals, width, label=row['model'])
        all_sizes = sorted({b for b, _ in runs})
        key = 'cpu_seconds' if row.get('device', 'cpu') == 'cpu' else 'seconds'
        ax2.plot(all_sizes, [runs[(b, False)][key] for b in all_sizes], 'o-',
                 label=row['model'])
        srt = [b for b in all_sizes if (b, True) in runs]
        if srt:
            ax2.plot(srt, [runs[(b, True)][key] for b in srt], 'o--',
                     color=ax2.lines[-1].get_color(), label=row['model'] + ', sorted')
    ax1.set_yscale('log')
    ax1.axhline(SCORE_TOL, color='grey', lw=0.8, ls=':')
    ax1.set_xticks([k + width * (len(rows) - 1) / 2 for k in range(len(sizes))])
    ax1.set_xticklabels([f'batch {b}' for b in sizes])
    ax1.set_ylabel(f'max |score - score at batch 1| (0 drawn at {floor:g})')
    ax1.set_title('per-image predictions vs batch 1')
    ax1.legend(fontsize=7, loc='center right')
    ax2.set_xscale('log', base=2)
    ax2.set_xlabel('test batch size')
    on_cpu = all(row.get('device', 'cpu') == 'cpu' for row in rows)
    ax2.set_ylabel(f'test loop {"CPU" if on_cpu else "wall"} time (s)')
    ax2.set_title('evaluation time')
    ax2.legend(fontsize=7)
    fig.tight_layout()
    os.makedirs(osp.dirname(osp.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=110)


def main(argv=None) -> List[dict]:
    args = parse_args(argv)
    specs = [tuple(s) + (None, ) * (3 - len(s)) for s in args.model]
    if args.demo_work_dir:
        specs += demo_models(args.demo_work_dir)
    unknown = set(args.sort_by_aspect or ()) - {label for label, _, _ in specs}
    if unknown:
        raise ValueError(f'--sort-by-aspect {sorted(unknown)[0]!r}: no model has this label '
                         f'(labels: {", ".join(label for label, _, _ in specs)})')
    import torch
    import mmposenc  # noqa: F401
    os.makedirs(args.work_dir, exist_ok=True)
    torch.manual_seed(args.seed)
    cache: dict = {}
    rows = [evaluate_model(label, config, ckpt, args, cache) for label, config, ckpt in specs]
    text = table(rows)
    print(text)
    for path, content in ((args.out, json.dumps(rows, indent=1)), (args.table, text + '\n')):
        if path:
            os.makedirs(osp.dirname(osp.abspath(path)), exist_ok=True)
            with open(path, 'w') as f:
                f.write(content)
    if args.plot:
        plot(rows, args.plot)
    return rows


if __name__ == '__main__':
    main()
