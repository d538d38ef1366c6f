"""Detection across resolutions: COCO AP of detectors trained at one scale, tested at others.

No DETR paper publishes AP against test scale per encoder position encoding; CPVT's claim is
that a conditional encoding generalises to input sizes not seen in training. This study tests
it on detection (a trained detector at other test scales, without the study:
``tools/analysis/detection_scales.py``, on the same functions,
:mod:`mmposenc.utils.tools.scales`).

The :data:`VARIANTS` (Deformable-DETR with encoder PE none / sine / PEG / CAPE, DETR and
Conditional-DETR with sine / PEG / RoPE-Mixed) on the demo's generated ``shapes_coco``
(``tools/demo.py``'s data, made here when missing), each trained at the native scale (no
resizing) with several seeds, then evaluated at every ``--scales`` entry. Each (variant, seed)
is one process (``--jobs`` at a time); its result is written to
``<out-dir>/runs/<variant>__seed<k>.json`` (the per-scale metrics, times, device, settings and
the commit of the code), so an interrupted study resumes (finished runs are skipped) and
``--report-only`` rebuilds ``<out-dir>/detection_resolution.{md,json}`` and the figure (AP
against test scale, mean and a band over the seeds)::

    python -m projects.detection_resolution.detection_resolution_study --seeds 0 1 2 --jobs 2 \\
        --out-dir projects/detection_resolution/results \\
        --figure projects/detection_resolution/results/detection_resolution.png
    python -m projects.detection_resolution.detection_resolution_study --report-only \\
        --out-dir projects/detection_resolution/results \\
        --figure projects/detection_resolution/results/detection_resolution.png

A scale is ``S`` (both sides times S) or ``SXxSY`` (width times SX, height times SY:
``1x0.75`` keeps the width and squeezes the height). ``--device cuda`` trains on the GPU;
mmcv's ``MultiScaleDeformableAttention`` then uses its CUDA kernel if this mmcv has one and
its PyTorch path otherwise (``--msda auto``; ``--msda pytorch`` forces the PyTorch path).
"""
import argparse
import copy
import json
import math
import os
import os.path as osp
import platform
import subprocess
import sys
import time
from typing import Dict, List, Optional, Sequence, Tuple

from mmposenc.utils.tools.runner import stretch_schedule
# the test scales (shared with tools/analysis/detection_scales.py, which tests a trained
# detector at them)
from mmposenc.utils.tools.scales import (Scale, check_device, evaluate_scales,  # noqa: F401
                                         is_square, parse_scale, parse_scales, scale_label,
                                         set_test_scale, use_msda_pytorch)

#: the repository (projects/detection_resolution/ is two folders below it)
REPO = osp.dirname(osp.dirname(osp.dirname(osp.realpath(__file__))))
#: this module, as the worker processes run it (``python -m``, the repository on PYTHONPATH)
MODULE = 'projects.detection_resolution.detection_resolution_study'

DD_DIR = osp.join('configs', 'peg_deformable_detr')
DD_SHAPES = 'deformable-detr-{}_r18-quarter_1xb4-2500i_shapes.py'
DETR_SHAPES = osp.join('configs', 'peg_detr', 'detr-sine_r18-quarter_1xb4-2500i_shapes.py')
#: the same DETR with Conditional-DETR's decoder and head (its reference-point sine at width 64)
CDETR_SHAPES = osp.join('configs', 'peg_detr',
                        'conditional-detr-sine_r18-quarter_1xb4-2500i_shapes.py')
#: the PEG of the DETR variants: masked, 3x3, after the first encoder layer
DETR_PEG = dict(encoder_pos='peg', peg_after=(0, ),
                peg_cfg=dict(type='mmposenc.MaskedPEG', kernel_size=3))
#: CAPE with the paper's ViT augmentation, as configs/peg_*detr/*-cape_* set it
CAPE = dict(encoder_pos='cape', level_embed=True,
            cape_cfg=dict(type='mmposenc.CAPE2d', max_global_shift=0.5, max_local_shift='auto',
                          max_global_scaling=1.4))
#: RoPE-Mixed in DETR's encoder (issue 23.1): the encoder_pos name of the registered encoding
ROPE_MIXED_POS = 'rope_mixed'
#: name -> (family, label, config relative to the repository, model overrides)
VARIANTS: Dict[str, Tuple[str, str, str, dict]] = {
    'dd-none': ('Deformable-DETR', 'none', osp.join(DD_DIR, DD_SHAPES.format('nope')), {}),
    'dd-sine': ('Deformable-DETR', 'sine', osp.join(DD_DIR, DD_SHAPES.format('sine')), {}),
    'dd-peg': ('Deformable-DETR', 'PEG', osp.join(DD_DIR, DD_SHAPES.format('peg')), {}),
    'dd-cape': ('Deformable-DETR', 'CAPE', osp.join(DD_DIR, DD_SHAPES.format('sine')), CAPE),
    'detr-sine': ('DETR', 'sine', DETR_SHAPES, {}),
    'detr-peg': ('DETR', 'PEG', DETR_SHAPES, DETR_PEG),
    'detr-rope-mixed': ('DETR', 'RoPE-Mixed', DETR_SHAPES, dict(encoder_pos=ROPE_MIXED_POS)),
    'cdetr-sine': ('Conditional-DETR', 'sine', CDETR_SHAPES, {}),
    'cdetr-peg': ('Conditional-DETR', 'PEG', CDETR_SHAPES, DETR_PEG),
    'cdetr-rope-mixed': ('Conditional-DETR', 'RoPE-Mixed', CDETR_SHAPES,
                         dict(encoder_pos=ROPE_MIXED_POS)),
}
FAMILIES = ('Deformable-DETR', 'DETR', 'Conditional-DETR')
#: family names in the figure's legends
SHORT = {'Deformable-DETR': 'DD', 'Conditional-DETR': 'C-DETR'}
DEFAULT_SCALES = ('0.5', '0.75', '1', '1.25', '1.5', '2', '1x0.75', '0.75x1', '1x1.5', '1.5x1')
#: the demo's data (tools/demo.py SHAPES): 1000 train / 100 val images of 96-128 px
SHAPES = dict(num_train=1000, num_val=100, min_size=96, max_size=128, object_size=(0.25, 0.5))
SHAPES_QUICK = dict(num_train=16, num_val=8, min_size=96, max_size=128, object_size=(0.25, 0.5))
METRICS = ('bbox_mAP', 'bbox_mAP_50', 'bbox_mAP_75', 'bbox_mAP_s', 'bbox_mAP_m', 'bbox_mAP_l')


# -------------------------------------------------------------------------------- configs
def register_hosts() -> None:
    from mmdet.utils import register_all_modules
    register_all_modules(init_default_scope=False)
    import mmposenc.models  # noqa: F401


def variant_config(variant: str):
    """The mmengine Config of ``variant`` (:data:`VARIANTS`): its config file plus its model
    overrides; a clear error when the variant's encoding is not registered in this checkout."""
    import mmposenc  # noqa: F401  (mmposenc:: bases)
    from mmengine.config import Config
    if variant not in VARIANTS:
        raise SystemExit(f'unknown variant {variant!r}; choose from {", ".join(VARIANTS)}')
    _, _, path, overrides = VARIANTS[variant]
    cfg = Config.fromfile(osp.join(REPO, path))
    if overrides:
        cfg.merge_from_dict(dict(model=copy.deepcopy(overrides)))
    pos = cfg.model.get('encoder_pos')
    if pos is not None:
        from mmposenc.models.detectors import encoder_pos as ep
        if pos not in ep.ENCODER_POS_TYPES:
            raise SystemExit(f'variant {variant}: encoder_pos={pos!r} is not in this '
                             f'checkout\'s mmposenc.models.detectors.encoder_pos.'
                             f'ENCODER_POS_TYPES {ep.ENCODER_POS_TYPES}; leave the variant out '
                             '(--variants) or update the checkout')
    return cfg


def study_cfg(variant: str, seed: int, data_root: str, work_dir: str, iters: Optional[int] = None,
              batch_size: Optional[int] = None, cfg_options: Optional[list] = None):
    """The training config of one run: ``variant`` on ``data_root`` (a shapes_coco tree), its
    schedule stretched to ``iters`` (warm-up capped at a tenth, milestones at the same
    fractions, as ``tools/demo.py --iters`` does), no validation during training (the scales
    are evaluated after it), ``seed``, one checkpoint at the end (no optimizer state)."""
    from mmengine.config import DictAction
    cfg = variant_config(variant)
    root = data_root.rstrip('/') + '/'
    for loader in (cfg.train_dataloader, cfg.test_dataloader):
        loader.dataset.data_root = root
    cfg.test_evaluator = dict(type='CocoMetric', metric='bbox', format_only=False,
                              ann_file=osp.join(root, 'annotations/instances_val.json'),
                              metric_items=[m[len('bbox_'):] for m in METRICS])
    cfg.val_dataloader = cfg.val_evaluator = cfg.val_cfg = None
    cfg.train_cfg = dict(type='IterBasedTrainLoop', max_iters=cfg.train_cfg.max_iters)
    if cfg_options:
        ns = argparse.Namespace()
        DictAction(option_strings=[], dest='o')(None, ns, list(cfg_options))
        cfg.merge_from_dict(ns.o)
    iters = iters or cfg.train_cfg.max_iters
    stretch_schedule(cfg, iters)
    if batch_size:
        cfg.train_dataloader.batch_size = batch_size
    cfg.default_hooks.checkpoint = dict(type='CheckpointHook', by_epoch=False, interval=iters,
                                        max_keep_ckpts=1, save_optimizer=False,
                                        save_param_scheduler=False)
    cfg.default_hooks.logger.interval = max(1, min(50, iters // 4))
    cfg.randomness = dict(seed=seed)
    cfg.work_dir = work_dir
    cfg.launcher = 'none'
    return cfg


def prepare_data(data_dir: str, quick: bool = False) -> str:
    """The demo's shapes_coco in ``data_dir`` (generated when missing; seconds)."""
    from mmposenc.utils.tools.shapes_coco import make_shapes_coco
    return make_shapes_coco(osp.abspath(data_dir), seed=0,
                            **(SHAPES_QUICK if quick else SHAPES))


def iters_of(specs: Optional[Sequence[str]], family: str) -> Optional[int]:
    """The iterations of ``family`` from ``--iters`` entries ``N`` (every family) and
    ``FAMILY=N`` (that family; the later entry wins); None: the config's.

    Raises:
        ValueError: an entry that is not ``N`` or ``FAMILY=N`` with a known family and N > 0.
    """
    iters = None
    for spec in specs or []:
        name, _, value = str(spec).rpartition('=')
        try:
            n = int(value)
        except ValueError:
            n = 0
        if n <= 0 or (name and name not in FAMILIES):
            raise ValueError(f'--iters entries are N or FAMILY=N with N > 0 and FAMILY one of '
                             f'{FAMILIES}, got {spec!r}')
        if not name or name == family:
            iters = n
    return iters


# ------------------------------------------------------------------------------ one run
def code_state() -> dict:
    """The commit of this checkout and whether the code a run uses differs from it."""
    def git(*cmd):
        try:
            out = subprocess.run(['git', '-C', REPO, *cmd], capture_output=True, text=True,
                                 timeout=30)
        except (OSError, subprocess.SubprocessError):
            return None
        return out.stdout.strip() if out.returncode == 0 else None

    commit = git('rev-parse', 'HEAD')
    changes = git('status', '--porcelain', '--', 'mmposenc', 'configs',
                  'projects/detection_resolution')
    return dict(commit=commit, uncommitted_changes=None if changes is None else bool(changes))


def run_path(out_dir: str, variant: str, seed: int) -> str:
    return osp.join(out_dir, 'runs', f'{variant}__seed{seed}.json')


def run_one(args) -> dict:
    """Train ``args.worker`` with ``args.seed`` and evaluate it at every scale; write and
    return the run record."""
    path = run_path(args.out_dir, args.worker, args.seed)
    if osp.isfile(path):  # made meanwhile by another process sharing the out-dir
        print(f'{path} exists: not run again')
        with open(path) as f:
            return json.load(f)
    code = code_state()  # now, as the modules are imported: a checkout may change later
    import torch
    check_device(args.device)  # before the heavy imports: a run without its device ends here
    from mmengine.runner import Runner
    torch.set_num_threads(args.threads)
    register_hosts()
    msda = use_msda_pytorch(args.msda, args.device)
    work_dir = osp.join(args.work_root, f'{args.worker}__seed{args.seed}')
    cfg = study_cfg(args.worker, args.seed, args.data_dir, work_dir,
                    iters_of(args.iters, VARIANTS[args.worker][0]),
                    args.batch_size, args.cfg_options)
    scales = parse_scales(args.scales)
    start_load = os.getloadavg()[0] if hasattr(os, 'getloadavg') else None
    runner = Runner.from_cfg(cfg)
    params = sum(p.numel() for p in runner.model.parameters())
    cpu0, wall0 = time.process_time(), time.perf_counter()
    runner.train()
    if args.device.startswith('cuda'):
        torch.cuda.synchronize()
    train_cpu, train_wall = time.process_time() - cpu0, time.perf_counter() - wall0
    rows = evaluate_scales(runner, cfg, scales)
    family, label, config, overrides = VARIANTS[args.worker]
    record = dict(
        variant=args.worker, family=family, label=label, config=config, overrides=overrides,
        seed=args.seed, params=params, iters=cfg.train_cfg.max_iters,
        batch_size=cfg.train_dataloader.batch_size,
        train_images=len(runner.train_dataloader.dataset),
        train_cpu=train_cpu, train_wall=train_wall,
        eval_wall=sum(r['eval_wall'] for r in rows), scales=rows,
        device=args.device if not args.device.startswith('cuda') else
        f'{args.device} ({torch.cuda.get_device_name()})', msda=msda, threads=args.threads,
        torch=torch.__version__, python=platform.python_version(),
        load_start=start_load,
        load_end=os.getloadavg()[0] if hasattr(os, 'getloadavg') else None,
        finished=time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime()),
        code=code, cfg_options=args.cfg_options or [])
    os.makedirs(osp.dirname(path), exist_ok=True)
    with open(path + '.tmp', 'w') as f:
        json.dump(record, f, indent=1)
    os.replace(path + '.tmp', path)  # a run file is complete or absent
    return record


# ------------------------------------------------------------------------------ the study
def worker_argv(args, device: str) -> List[str]:
    argv = ['--out-dir', args.out_dir, '--work-root', args.work_root, '--data-dir',
            args.data_dir, '--device', device, '--msda', args.msda, '--threads',
            str(args.threads), '--scales', *args.scales]
    if args.iters:
        argv += ['--iters', *args.iters]
    if args.batch_size:
        argv += ['--batch-size', str(args.batch_size)]
    if args.cfg_options:
        argv += ['--cfg-options', *args.cfg_options]
    return argv


def run_study(args) -> List[Tuple[str, int]]:
    """Train and evaluate every (variant, seed) without a run file, ``args.jobs`` processes at
    a time, seeds outermost (an interrupted study has whole seeds). With ``--device cuda``,
    ``args.cpu_jobs`` of the ``args.jobs`` slots train on the CPU instead (a free GPU slot is
    taken first; each run records its device); with ``args.retry_on_cpu`` a run that fails on
    the GPU is run again on the CPU. No new run starts after ``args.time_limit`` seconds;
    at ``args.deadline`` seconds the runs still going are stopped (counted as failed).
    ``args.archive``, if given, is rewritten after every finished run (a tar.gz of the run files
    and the calls' log), so a study killed from outside still leaves what it finished.
    Returns the runs that failed."""
    todo = [(v, s) for s in args.seeds for v in args.variants
            if not osp.isfile(run_path(args.out_dir, v, s))]
    cpu_slots = args.jobs if args.device == 'cpu' else min(args.cpu_jobs, args.jobs)
    print(f'{len(todo)} run(s) to do, {args.jobs} at a time'
          + (f' ({args.jobs - cpu_slots} on {args.device}, {cpu_slots} on the CPU)'
             if args.device != 'cpu' else ''), flush=True)
    # the workers import this module (and the mmposenc) of this checkout, from any folder
    path = os.pathsep.join(p for p in (REPO, os.environ.get('PYTHONPATH')) if p)
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads),
               MKL_NUM_THREADS=str(args.threads), PYTHONPATH=path)
    cpu_env = dict(env, CUDA_VISIBLE_DEVICES='')
    t0 = time.perf_counter()
    running, failed, retry = {}, [], []
    os.makedirs(args.work_root, exist_ok=True)
    while todo or running or retry:
        late = args.time_limit is not None and time.perf_counter() - t0 > args.time_limit
        while (todo or retry) and len(running) < max(1, args.jobs) and not late:
            on_cpu = sum(1 for r in running.values() if r[3] == 'cpu')
            device = args.device if len(running) - on_cpu < args.jobs - cpu_slots else 'cpu'
            if retry:  # failed on the GPU: again on the CPU, before anything new
                device = 'cpu'
                v, s = retry.pop(0)
            else:
                # the GPU slots take the heaviest runs first (Deformable-DETR: its attention's
                # PyTorch path costs twice DETR's step on the CPU), the CPU slots the next
                pick = next((i for i, (v, _) in enumerate(todo)
                             if VARIANTS[v][0] == 'Deformable-DETR'), 0) if device != 'cpu' else 0
                v, s = todo.pop(pick)
            log = open(osp.join(args.work_root, f'{v}__seed{s}.log'), 'w')
            cmd = [sys.executable, '-m', MODULE, *worker_argv(args, device), '--worker', v,
                   '--seed', str(s)]
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                    env=cpu_env if device == 'cpu' else env)
            running[(v, s)] = (proc, log, time.perf_counter(), device)
            print(f'[{v} seed {s}] started on {device} (log {log.name})', flush=True)
        if late and (todo or retry):
            print(f'--time-limit {args.time_limit} s reached: {len(todo) + len(retry)} run(s) '
                  'not started: ' + ', '.join(f'{v}/{s}' for v, s in retry + todo), flush=True)
            failed += retry
            todo, retry = [], []
        time.sleep(0.5)
        if args.deadline is not None and time.perf_counter() - t0 > args.deadline:
            for key, (proc, log, _, device) in list(running.items()):
                if proc.poll() is None:
                    proc.kill()  # a worker of this study (its own process id)
                    proc.wait()
                    print(f'[{key[0]} seed {key[1]}] stopped at --deadline {args.deadline} s '
                          f'({device})', flush=True)
                    log.close()
                    del running[key]
                    failed.append(key)
            if todo or retry:
                print(f'--deadline: {len(todo) + len(retry)} run(s) not started', flush=True)
                failed += retry + todo
                todo, retry = [], []
        for key in list(running):
            proc, log, started, device = running[key]
            if proc.poll() is None:
                continue
            log.close()
            del running[key]
            took = time.perf_counter() - started
            if proc.returncode != 0:
                with open(log.name) as f:
                    tail = f.read()[-3000:]
                again = args.retry_on_cpu and device != 'cpu'
                print(f'[{key[0]} seed {key[1]}] FAILED on {device} (exit {proc.returncode}, '
                      f'{took:.0f} s){"; again on the CPU" if again else ""}; end of '
                      f'{log.name}:\n{tail}', flush=True)
                if again:
                    os.replace(log.name, log.name[:-len('.log')] + f'.{device}-failed.log')
                    retry.append(key)
                else:
                    failed.append(key)
            else:
                print(f'[{key[0]} seed {key[1]}] done on {device} in {took:.0f} s '
                      f'({time.perf_counter() - t0:.0f} s since start)', flush=True)
                if args.archive:
                    write_archive(args.out_dir, args.archive)
    return failed


def write_archive(out_dir: str, archive: str) -> str:
    """``out_dir``'s files except the training work dirs (``work/``) as the tar.gz ``archive``,
    written next to it and renamed into place (a reader never sees half an archive)."""
    import tarfile
    os.makedirs(osp.dirname(osp.abspath(archive)), exist_ok=True)
    tmp = archive + '.tmp'
    with tarfile.open(tmp, 'w:gz') as tar:
        for root, dirs, files in os.walk(out_dir):
            dirs[:] = sorted(d for d in dirs if not (root == out_dir and d == 'work'))
            for name in sorted(files):
                if name.endswith('.tmp'):
                    continue
                path = osp.join(root, name)
                tar.add(path, arcname=osp.join(osp.basename(out_dir.rstrip('/')),
                                               osp.relpath(path, out_dir)))
    os.replace(tmp, archive)
    return archive


# ----------------------------------------------------------------------------- the report
def load_runs(out_dir: str, variants: Optional[Sequence[str]] = None) -> Dict[str, List[dict]]:
    """The run records under ``out_dir/runs``: variant -> records sorted by seed (variants in
    :data:`VARIANTS` order, those without runs left out)."""
    runs: Dict[str, List[dict]] = {}
    folder = osp.join(out_dir, 'runs')
    for name in sorted(os.listdir(folder)) if osp.isdir(folder) else []:
        if not name.endswith('.json'):
            continue
        with open(osp.join(folder, name)) as f:
            rec = json.load(f)
        runs.setdefault(rec['variant'], []).append(rec)
    order = [v for v in VARIANTS if v in runs] + sorted(v for v in runs if v not in VARIANTS)
    if variants:
        order = [v for v in order if v in variants]
    return {v: sorted(runs[v], key=lambda r: r['seed']) for v in order}


def _ap(rec: dict, label: str, metric: str = 'bbox_mAP') -> float:
    for row in rec['scales']:
        if row['scale'] == label:
            return 100 * row['metrics'][f'coco/{metric}']
    return float('nan')


def _stats(values: Sequence[float]) -> Tuple[float, float, float, float]:
    import numpy as np
    v = np.asarray(values, dtype=float)
    std = float(v.std(ddof=1)) if len(v) > 1 else 0.0
    return float(v.mean()), std, float(v.min()), float(v.max())


def _fmt(values: Sequence[float]) -> str:
    if not values or any(math.isnan(x) for x in values):
        return 'n/a'
    mean, std, _, _ = _stats(values)
    return f'{mean:.1f} ± {std:.1f}' if len(values) > 1 else f'{mean:.1f}'


def scale_columns(runs: Dict[str, List[dict]]) -> List[str]:
    """Scale labels present in the runs: the square ones by size, then the others."""
    labels = {}
    for recs in runs.values():
        for rec in recs:
            for row in rec['scales']:
                labels[row['scale']] = (row['sx'], row['sy'])
    square = sorted((lab for lab, s in labels.items() if is_square(s)), key=lambda x:
                    labels[x][0])
    other = sorted((lab for lab, s in labels.items() if not is_square(s)),
                   key=lambda x: (labels[x][0] * labels[x][1], labels[x]))
    return square + other


def summarize(runs: Dict[str, List[dict]]) -> dict:
    """Per variant: seeds, per scale mean / std / min / max of AP and of AP - AP(1x) (paired
    per seed), the mean over the scales other than 1, params, times."""
    cols = scale_columns(runs)
    out = {}
    for v, recs in runs.items():
        per = {}
        for lab in cols:
            aps = [_ap(r, lab) for r in recs]
            drops = [_ap(r, lab) - _ap(r, '1') for r in recs]
            m, s, lo, hi = _stats(aps)
            dm, ds, _, _ = _stats(drops)
            per[lab] = dict(ap=aps, mean=m, std=s, min=lo, max=hi, diff_mean=dm, diff_std=ds)
        off = [lab for lab in cols if lab != '1']
        off_means = [sum(_ap(r, lab) for lab in off) / len(off) for r in recs] if off else []
        out[v] = dict(family=recs[0]['family'], label=recs[0]['label'],
                      seeds=[r['seed'] for r in recs], params=recs[0]['params'],
                      iters=recs[0]['iters'], batch_size=recs[0]['batch_size'],
                      device=sorted({r['device'] for r in recs}),
                      commits=sorted({(r.get('code') or {}).get('commit') or '?' for r in recs}),
                      train_wall=[r['train_wall'] for r in recs],
                      train_cpu=[r['train_cpu'] for r in recs],
                      scales=per, off_train_mean=off_means)
    return dict(columns=cols, variants=out)


def to_markdown(summary: dict) -> str:
    cols = summary['columns']
    head = ' | '.join(f'{c} (train)' if c == '1' else c for c in cols)
    lines = ['*COCO box AP (mAP@[.5:.95], points) on the 100 val images at each test scale '
             '(S: both sides x S; SXxSY: width x SX, height x SY), mean ± std over the seeds; '
             'trained at scale 1 only.*', '',
             f'| detector | encoder PE | seeds | {head} | mean off-train |',
             '|---|---|---|' + '---:|' * (len(cols) + 1)]
    for v, s in summary['variants'].items():
        cells = [_fmt(s['scales'][c]['ap']) for c in cols]
        lines.append(f"| {s['family']} | {s['label']} | {len(s['seeds'])} | "
                     + ' | '.join(cells) + f" | {_fmt(s['off_train_mean'])} |")
    off = [c for c in cols if c != '1']
    lines += ['', '*AP at each scale minus AP at scale 1 (points), paired per seed, mean ± std:*',
              '', '| detector | encoder PE | ' + ' | '.join(off) + ' |',
              '|---|---|' + '---:|' * len(off)]
    for v, s in summary['variants'].items():
        cells = []
        for c in off:
            d = s['scales'][c]
            cells.append('n/a' if math.isnan(d['diff_mean']) else
                         f"{d['diff_mean']:+.1f} ± {d['diff_std']:.1f}")
        lines.append(f"| {s['family']} | {s['label']} | " + ' | '.join(cells) + ' |')
    lines += ['', '| detector | encoder PE | params | iterations x batch | train CPU s '
              '(mean; process time) | device | code |', '|---|---|---:|---:|---:|---|---|']
    for v, s in summary['variants'].items():
        cpu = sum(s['train_cpu']) / len(s['train_cpu'])
        lines.append(f"| {s['family']} | {s['label']} | {s['params'] / 1e6:.2f} M | "
                     f"{s['iters']} x {s['batch_size']} | {cpu:.0f} | "
                     f"{', '.join(s['device'])} | {', '.join(c[:7] for c in s['commits'])} |")
    return '\n'.join(lines) + '\n'


def plot(summary: dict, out_file: str, band: str = 'minmax', title: str = '') -> str:
    """AP against test scale: one panel per detector family (square scales, log axis), one
    for the aspect changes; the mean over seeds with a band (``band`` 'minmax' or 'std')."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    import numpy as np
    cols = summary['columns']
    sq = [c for c in cols if 'x' not in c]
    ns = [c for c in cols if 'x' in c]
    fams = [f for f in FAMILIES if any(s['family'] == f for s in summary['variants'].values())]
    fams += sorted({s['family'] for s in summary['variants'].values()} - set(fams))
    npanel = len(fams) + (1 if ns else 0)
    fig, axes = plt.subplots(1, npanel, figsize=(4.2 * npanel, 3.6), squeeze=False)
    axes = axes[0]
    xs = [float(c) for c in sq]
    colours = plt.rcParams['axes.prop_cycle'].by_key()['color']
    for ax, fam in zip(axes, fams):
        for k, (v, s) in enumerate((v, s) for v, s in summary['variants'].items()
                                   if s['family'] == fam):
            m = np.array([s['scales'][c]['mean'] for c in sq])
            if band == 'std':
                sd = np.array([s['scales'][c]['std'] for c in sq])
                lo, hi = m - sd, m + sd
            else:
                lo = np.array([s['scales'][c]['min'] for c in sq])
                hi = np.array([s['scales'][c]['max'] for c in sq])
            c = colours[k % len(colours)]
            ax.plot(xs, m, 'o-', color=c, label=f"{s['label']} ({len(s['seeds'])} seeds)")
            ax.fill_between(xs, lo, hi, color=c, alpha=0.2)
        ax.set_xscale('log', base=2)
        ax.set_xticks(xs)
        ax.set_xticklabels(sq)
        ax.axvline(1.0, color='gray', ls='--', lw=1)
        ax.set_xlabel('test scale (training scale 1)')
        ax.set_ylabel('box AP')
        ax.set_ylim(0, max(ax.get_ylim()[1], 1.0))  # a model near 0 AP is drawn near 0
        ax.set_title(fam, fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    if ns:
        ax = axes[-1]
        names = list(summary['variants'])
        width = 0.8 / max(1, len(names))
        for k, v in enumerate(names):
            s = summary['variants'][v]
            m = np.array([s['scales'][c]['mean'] for c in ns])
            lo = np.array([s['scales'][c]['min' if band != 'std' else 'mean'] for c in ns])
            hi = np.array([s['scales'][c]['max' if band != 'std' else 'mean'] for c in ns])
            if band == 'std':
                sd = np.array([s['scales'][c]['std'] for c in ns])
                lo, hi = m - sd, m + sd
            pos = np.arange(len(ns)) + (k - (len(names) - 1) / 2) * width
            yerr = [np.maximum(m - lo, 0), np.maximum(hi - m, 0)]  # >= 0 under rounding
            ax.errorbar(pos, m, yerr=yerr, fmt='o', ms=4, capsize=2,
                        label=f"{SHORT.get(s['family'], s['family'])} "
                        f"{s['label']}")
        ax.set_xticks(np.arange(len(ns)))
        ax.set_xticklabels(ns)
        ax.set_xlabel('aspect change (width x height factors)')
        ax.set_ylabel('box AP')
        ax.set_title('non-square test sizes', fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6)
    bandtxt = 'min-max' if band != 'std' else '± std'
    fig.suptitle(title or f'AP against test scale, mean and {bandtxt} over seeds', fontsize=10)
    fig.tight_layout()
    os.makedirs(osp.dirname(osp.abspath(out_file)), exist_ok=True)
    fig.savefig(out_file, dpi=100)
    plt.close(fig)
    return out_file


def report(args) -> dict:
    runs = load_runs(args.out_dir, args.variants if args.variants_given else None)
    if not runs:
        raise SystemExit(f'no run files in {osp.join(args.out_dir, "runs")}: run the study '
                         'first (without --report-only)')
    summary = summarize(runs)
    table = to_markdown(summary)
    with open(osp.join(args.out_dir, 'detection_resolution.md'), 'w') as f:
        f.write(table)
    with open(osp.join(args.out_dir, 'detection_resolution.json'), 'w') as f:
        json.dump(summary, f, indent=1)
    figure = args.figure or osp.join(args.out_dir, 'detection_resolution.png')
    print(table)
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print('matplotlib is not installed: no figure (the table and the runs are written; '
              '--report-only rebuilds the figure where it is)')
        return summary
    plot(summary, figure, band=args.band)
    print(f'figure: {figure}')
    return summary


# ------------------------------------------------------------------------------------ main
def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument('--scales', nargs='+', default=list(DEFAULT_SCALES),
                   help='test scales: S or SXxSY (width x SX, height x SY); default: '
                   + ' '.join(DEFAULT_SCALES))
    p.add_argument('--variants', nargs='+', help='default: all of ' + ', '.join(VARIANTS))
    p.add_argument('--seeds', type=int, nargs='+', default=[0, 1, 2])
    p.add_argument('--iters', nargs='+', metavar='[FAMILY=]N',
                   help="training iterations (default: the config's 2500; the schedule is "
                   'stretched to it); FAMILY=N sets one detector family, e.g. '
                   '--iters 1500 DETR=3000')
    p.add_argument('--batch-size', type=int, help='training images per iteration '
                   '(default: the config\'s 4)')
    p.add_argument('--jobs', type=int, default=1, help='runs at the same time, one process '
                   'each (default 1)')
    p.add_argument('--cpu-jobs', type=int, default=0,
                   help='with --device cuda: this many of the --jobs slots train on the CPU '
                   '(tiny models: a many-core machine trains more at once than one GPU)')
    p.add_argument('--retry-on-cpu', action='store_true',
                   help='with --device cuda: a run that fails on the GPU runs again on the CPU')
    p.add_argument('--threads', type=int, default=1, help='torch threads per run')
    p.add_argument('--device', default='cpu', help='cpu or cuda (default cpu)')
    p.add_argument('--msda', choices=('auto', 'cuda', 'pytorch'), default='auto',
                   help="mmcv MultiScaleDeformableAttention on CUDA: its kernel ('cuda'), its "
                   "PyTorch path ('pytorch', for an mmcv without CUDA ops), or 'auto' (the "
                   'kernel if it runs)')
    p.add_argument('--time-limit', type=float, help='start no run after this many seconds')
    p.add_argument('--deadline', type=float, help='stop the runs still going after this many '
                   'seconds (the finished ones are kept)')
    p.add_argument('--archive', help='also write <out-dir> (run files, table, figure, log) as '
                   'this .tar.gz, rewritten after every finished run')
    p.add_argument('--out-dir', default=osp.join('work_dirs', 'detection_resolution'),
                   help='runs/*.json, the table, the summary JSON (and the figure unless '
                   '--figure)')
    p.add_argument('--figure', help='PNG path (default: <out-dir>/detection_resolution.png)')
    p.add_argument('--band', choices=('minmax', 'std'), default='minmax',
                   help='the band around the mean in the figure')
    p.add_argument('--work-root', help='training work dirs, logs, checkpoints (default: '
                   '<out-dir>/work)')
    p.add_argument('--data-dir', default=osp.join('data', 'shapes_coco_demo'),
                   help="the demo's shapes_coco (made here when missing; default "
                   'data/shapes_coco_demo, shared with tools/demo.py)')
    p.add_argument('--quick', action='store_true',
                   help='smoke run: 16 + 8 tiny-data images, 4 iterations, 2 scales')
    p.add_argument('--report-only', action='store_true',
                   help='rebuild the table and the figure from the run files')
    p.add_argument('--cfg-options', nargs='+', metavar='KEY=VALUE',
                   help='override config keys of every run (DictAction syntax)')
    p.add_argument('--worker', help=argparse.SUPPRESS)
    p.add_argument('--seed', type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.variants_given = args.variants is not None
    args.variants = args.variants or list(VARIANTS)
    unknown = [v for v in args.variants if v not in VARIANTS]
    if unknown:
        p.error(f'unknown variant(s) {unknown}; choose from {", ".join(VARIANTS)}')
    try:
        scales = parse_scales(args.scales)
    except ValueError as e:
        p.error(str(e))
    try:
        for family in FAMILIES:
            iters_of(args.iters, family)
    except ValueError as e:
        p.error(str(e))
    if (1.0, 1.0) not in scales:
        args.scales = ['1'] + list(args.scales)  # the study's reference: the training scale
    if args.quick and not args.worker:
        args.iters = args.iters or ['4']
        args.batch_size = args.batch_size or 2
        if args.scales == list(DEFAULT_SCALES):
            args.scales = ['0.5', '1', '1x0.75']
        if args.data_dir == osp.join('data', 'shapes_coco_demo'):
            args.data_dir = osp.join('data', 'shapes_coco_demo_quick')
    for name in ('out_dir', 'data_dir'):
        setattr(args, name, osp.abspath(getattr(args, name)))
    args.work_root = osp.abspath(args.work_root or osp.join(args.out_dir, 'work'))
    return args


def main(argv=None):
    args = parse_args(argv)
    if args.worker:
        return run_one(args)
    if not args.report_only:
        if not args.device.startswith('cuda') and args.device != 'cpu':
            raise SystemExit(f'--device must be cpu or cuda[:N], got {args.device!r}')
        check_device(args.device)  # before the data and the runs
        t0 = time.perf_counter()
        started = time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())
        args.data_dir = prepare_data(args.data_dir, args.quick)
        failed = run_study(args)
        wall = time.perf_counter() - t0
        print(f'study wall time: {wall:.0f} s', flush=True)
        os.makedirs(args.out_dir, exist_ok=True)
        with open(osp.join(args.out_dir, 'study_log.jsonl'), 'a') as f:  # one line per call
            f.write(json.dumps(dict(
                started=started, wall_s=wall, argv=sys.argv[1:], failed=failed,
                cpu_count=os.cpu_count(), code=code_state(),
                load_end=os.getloadavg()[0] if hasattr(os, 'getloadavg') else None)) + '\n')
        if args.archive:
            write_archive(args.out_dir, args.archive)
        if failed:
            if not load_runs(args.out_dir):
                raise SystemExit('every run failed: ' +
                                 ', '.join(f'{v}/seed {s}' for v, s in failed))
            report(args)
            if args.archive:
                write_archive(args.out_dir, args.archive)
            raise SystemExit(f'{len(failed)} run(s) failed: ' +
                             ', '.join(f'{v}/seed {s}' for v, s in failed))
    summary = report(args)
    if args.archive and not args.report_only:
        write_archive(args.out_dir, args.archive)
    return summary


if __name__ == '__main__':
    main()
