"""What the CPU-scale reproduction studies share: Fashion-MNIST, one small training loop,
evaluation at several resolutions, runs over seeds, mean +- std tables and plots.

A study script defines its variants (name -> a function ``seed -> nn.Module`` that maps
images (B, 1, H, W) to logits (B, 10)) and calls :func:`run_study`. Every (variant, seed)
pair is one run stored as its own JSON file under ``<out-dir>/runs/``, so

- an interrupted study resumes where it stopped (finished runs are skipped),
- two processes can share a study (``--variants`` / ``--seeds`` pick disjoint parts, both
  write to the same ``--out-dir``), and
- ``--report-only`` rebuilds the table and the plot from whatever runs exist.

Protocol shared by all studies (stated in docs/reproductions.md, the page of the studies):

- data: Fashion-MNIST (Debian ``dataset-fashion-mnist``, idx files in
  ``/usr/share/datasets/fashion-mnist``), a class-balanced training subset and a
  class-balanced test subset drawn once (``--data-seed``), the same for every variant and seed;
- other resolutions are made by resizing the whole 28 x 28 source image (bilinear, with
  antialiasing when shrinking), never by cropping;
- training: AdamW, linear warm-up over the first 10 % of the steps then cosine decay to 0,
  a DeiT-style random resized crop (35-100 % of the area) and flips (``--augment none``:
  no augmentation); the seed sets the initialisation, the batch order, the augmentation and
  any noise a model draws (CAPE's augmentation);
- statistics: mean and sample standard deviation (ddof 1) over seeds, and paired
  differences (same seed, so same batch order) against a reference variant.
"""
import argparse
import gzip
import json
import math
import os
import os.path as osp
import platform
import subprocess
import time
from typing import Callable, Dict, List, Optional, Sequence

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

DEFAULT_ROOT = '/usr/share/datasets/fashion-mnist'
MEAN, STD = 0.2860, 0.3530  # Fashion-MNIST training-set pixel mean / std


# ----------------------------------------------------------------------------- data
def load_idx(path: str) -> np.ndarray:
    """Read a (gzipped) idx file into a numpy array."""
    opener = gzip.open if path.endswith('.gz') else open
    with opener(path, 'rb') as f:
        data = f.read()
    ndim = data[3]
    shape = tuple(int.from_bytes(data[4 + 4 * i:8 + 4 * i], 'big') for i in range(ndim))
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(shape)


def load_split(root: str, split: str):
    """``(images uint8 (N, 28, 28), labels uint8 (N,))`` of the 'train' or 'test' split."""
    prefix = 'train' if split == 'train' else 't10k'
    for ext in ('.gz', ''):
        img = osp.join(root, f'{prefix}-images-idx3-ubyte{ext}')
        lbl = osp.join(root, f'{prefix}-labels-idx1-ubyte{ext}')
        if osp.exists(img) and osp.exists(lbl):
            return load_idx(img), load_idx(lbl)
    raise FileNotFoundError(f'Fashion-MNIST {split} idx files not found in {root} '
                            '(apt-get install dataset-fashion-mnist)')


def subsample(images: np.ndarray, labels: np.ndarray, n: int, seed: int):
    """A class-balanced random subset of size ``n`` (all when ``n <= 0``), normalised
    float images (n, 1, 28, 28) and int64 labels."""
    if n <= 0 or n >= len(labels):
        idx = np.arange(len(labels))
    else:
        rng = np.random.RandomState(seed)
        classes = np.unique(labels)
        per_class = n // len(classes)
        idx = np.concatenate([
            rng.choice(np.flatnonzero(labels == c), per_class, replace=False)
            for c in classes
        ])
    x = torch.from_numpy(images[idx].astype(np.float32) / 255.)[:, None]
    return (x - MEAN) / STD, torch.from_numpy(labels[idx].astype(np.int64))


def resize(x: torch.Tensor, res: int) -> torch.Tensor:
    """The whole image resized to ``res x res`` (bilinear; antialiased when shrinking)."""
    if x.shape[-1] == res and x.shape[-2] == res:
        return x
    return F.interpolate(x, size=(res, res), mode='bilinear', align_corners=False,
                         antialias=res < x.shape[-1])


def random_resized_crop(x: torch.Tensor, generator: torch.Generator,
                        scale: Sequence[float] = (0.35, 1.),
                        ratio: Sequence[float] = (3 / 4, 4 / 3),
                        flip: bool = True) -> torch.Tensor:
    """DeiT-style training augmentation, batched: per image a random crop covering
    ``scale`` of the area with aspect ratio in ``ratio``, resized back to the input size
    (bilinear), and a horizontal flip with probability 1/2."""
    B = x.shape[0]
    u = torch.rand(B, 5, generator=generator)
    area = scale[0] + (scale[1] - scale[0]) * u[:, 0]
    log_r = math.log(ratio[0]) + (math.log(ratio[1]) - math.log(ratio[0])) * u[:, 1]
    w = (area * log_r.exp()).sqrt().clamp(max=1.)  # crop size as a fraction of the side
    h = (area / log_r.exp()).sqrt().clamp(max=1.)
    cx = (2 * u[:, 2] - 1) * (1 - w)  # crop centre in [-1, 1], crop inside the image
    cy = (2 * u[:, 3] - 1) * (1 - h)
    sign = torch.where(u[:, 4] < 0.5, -1., 1.) if flip else torch.ones(B)
    theta = torch.zeros(B, 2, 3)
    theta[:, 0, 0], theta[:, 0, 2] = w * sign, cx
    theta[:, 1, 1], theta[:, 1, 2] = h, cy
    grid = F.affine_grid(theta, list(x.shape), align_corners=False)
    return F.grid_sample(x, grid, mode='bilinear', padding_mode='border', align_corners=False)


def load_data(args):
    """Training and test subsets as ``(x_tr, y_tr, x_te, y_te)``."""
    x_tr, y_tr = subsample(*load_split(args.data_root, 'train'), args.train_size,
                           args.data_seed)
    x_te, y_te = subsample(*load_split(args.data_root, 'test'), args.test_size, args.data_seed)
    return x_tr, y_tr, x_te, y_te


# ----------------------------------------------------------------------------- models
class Classifier(nn.Module):
    """An mmposenc backbone returning a tuple of (B, C) features + a linear head."""

    def __init__(self, backbone: nn.Module, embed_dims: int, num_classes: int = 10):
        super().__init__()
        self.backbone = backbone
        self.head = nn.Linear(embed_dims, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        feat = self.backbone(x)[-1]
        if feat.dim() == 4:  # a feature map: global average pooling
            feat = feat.mean((2, 3))
        return self.head(feat)


def add_vit_args(p: argparse.ArgumentParser, depth: int = 4, embed_dims: int = 64,
                 heads: int = 4) -> None:
    """Size of the plain ViT (:func:`build_pevit`) of a study."""
    p.add_argument('--embed-dims', type=int, default=embed_dims)
    p.add_argument('--depth', type=int, default=depth)
    p.add_argument('--heads', type=int, default=heads)
    p.add_argument('--mlp-ratio', type=int, default=2)
    p.add_argument('--patch-size', type=int, default=4)


def vit_info(args, backbone: str = 'PEViT', **extra) -> dict:
    """The model settings of :func:`add_vit_args`, stored with every run."""
    return dict(backbone=backbone, embed_dims=args.embed_dims, depth=args.depth,
                heads=args.heads, mlp_ratio=args.mlp_ratio, patch_size=args.patch_size,
                **extra)


def build_pevit(pos_encoding, args, out_type: str = 'cls_token') -> nn.Module:
    """A :class:`mmposenc.models.PEViT` classifier (1 input channel, 10 classes) with the
    given ``pos_encoding`` config(s), sized by :func:`add_vit_args`."""
    from mmposenc.models.backbones import PEViT
    vit = PEViT(
        arch=dict(embed_dims=args.embed_dims, num_layers=args.depth, num_heads=args.heads,
                  feedforward_channels=args.mlp_ratio * args.embed_dims),
        pos_encoding=pos_encoding, img_size=args.train_res, patch_size=args.patch_size,
        in_channels=1, out_type=out_type, with_cls_token=out_type == 'cls_token')
    vit.init_weights()
    return Classifier(vit, args.embed_dims)


# ----------------------------------------------------------------------------- training
def train(model: nn.Module, x: torch.Tensor, y: torch.Tensor, epochs: int, batch_size: int,
          lr: float, weight_decay: float, train_res: int, seed: int, augment: str = 'rrc',
          log: Optional[Callable[[str], None]] = None) -> dict:
    """AdamW with linear warm-up (10 % of the steps) and cosine decay, cross-entropy;
    ``augment='rrc'``: :func:`random_resized_crop` of every training batch, ``'none'``: none.

    Parameters with ``requires_grad=False`` stay fixed. Returns wall and process CPU
    seconds, the number of steps and the mean loss of the last epoch.
    """
    steps_per_epoch = max(1, len(y) // batch_size)
    total = steps_per_epoch * epochs
    warmup = max(1, total // 10)
    params = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in params if p.ndim > 1]
    no_decay = [p for p in params if p.ndim <= 1]  # norms, biases, scalars: no decay
    opt = torch.optim.AdamW([dict(params=decay, weight_decay=weight_decay),
                             dict(params=no_decay, weight_decay=0.)], lr=lr)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: (s + 1) / warmup if s < warmup else 0.5 * (1 + math.cos(
            math.pi * (s - warmup) / max(1, total - warmup))))
    gen = torch.Generator().manual_seed(seed)
    wall0, cpu0 = time.time(), time.process_time()
    model.train()
    last = []
    for epoch in range(epochs):
        perm = torch.randperm(len(y), generator=gen)
        losses = []
        for s in range(steps_per_epoch):
            idx = perm[s * batch_size:(s + 1) * batch_size]
            xb = x[idx]
            if augment == 'rrc':
                xb = random_resized_crop(xb, gen)
            loss = F.cross_entropy(model(resize(xb, train_res)), y[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            losses.append(loss.item())
        last = losses
        if log:
            log(f'epoch {epoch + 1}/{epochs} loss {np.mean(losses):.3f} '
                f'({time.time() - wall0:.0f} s)')
    return dict(train_wall_s=time.time() - wall0, train_cpu_s=time.process_time() - cpu0,
                steps=total, final_loss=float(np.mean(last)))


@torch.no_grad()
def evaluate(model: nn.Module, x: torch.Tensor, y: torch.Tensor, resolutions: Sequence[int],
             batch_size: int = 500) -> Dict[int, float]:
    """Top-1 accuracy (%) of ``model`` on ``x`` resized to each resolution."""
    model.eval()
    acc = {}
    for res in resolutions:
        correct = 0
        for i in range(0, len(y), batch_size):
            logits = model(resize(x[i:i + batch_size], res))
            correct += (logits.argmax(1) == y[i:i + batch_size]).sum().item()
        acc[int(res)] = 100. * correct / len(y)
    return acc


def count_params(model: nn.Module, trainable_only: bool = False) -> int:
    return sum(p.numel() for p in model.parameters()
               if p.requires_grad or not trainable_only)


# ----------------------------------------------------------------------------- runs
def add_common_args(p: argparse.ArgumentParser, variants: Sequence[str], *,
                    eval_res: Sequence[int], out_dir: str, train_size: int = 8000,
                    test_size: int = 2000, epochs: int = 3, batch_size: int = 64,
                    lr: float = 2e-3) -> argparse.ArgumentParser:
    """Arguments every study script takes (the study's defaults are passed in)."""
    p.add_argument('--data-root', default=DEFAULT_ROOT)
    p.add_argument('--out-dir', default=out_dir)
    p.add_argument('--variants', nargs='+', default=list(variants), choices=list(variants))
    p.add_argument('--seeds', type=int, nargs='+', default=[0, 1, 2])
    p.add_argument('--train-size', type=int, default=train_size)
    p.add_argument('--test-size', type=int, default=test_size)
    p.add_argument('--data-seed', type=int, default=0,
                   help='seed of the training / test subsets (the same for every run)')
    p.add_argument('--epochs', type=int, default=epochs)
    p.add_argument('--batch-size', type=int, default=batch_size)
    p.add_argument('--lr', type=float, default=lr)
    p.add_argument('--weight-decay', type=float, default=0.05)
    p.add_argument('--augment', choices=['rrc', 'none'], default='rrc',
                   help='training augmentation: random resized crop (area 0.35-1) + flip, '
                   'or none')
    p.add_argument('--train-res', type=int, default=28)
    p.add_argument('--eval-res', type=int, nargs='+', default=list(eval_res))
    p.add_argument('--threads', type=int, default=1, help='torch intra-op threads')
    p.add_argument('--overwrite', action='store_true', help='re-run finished runs')
    p.add_argument('--report-only', action='store_true',
                   help='only rebuild the table and plot from the stored runs')
    p.add_argument('--quick', action='store_true',
                   help='a seconds-long smoke run (tiny model, data and schedule; 2 seeds)')
    return p


def study_parser(doc: str, variants: Sequence[str], **defaults) -> argparse.ArgumentParser:
    """A parser described by the first line of the study's ``doc`` with
    :func:`add_common_args` (``defaults``: its keyword arguments)."""
    return add_common_args(argparse.ArgumentParser(description=doc.split('\n')[0]),
                           list(variants), **defaults)


def parse_study_args(p: argparse.ArgumentParser, argv=None, **quick_overrides):
    """Parse ``argv``; with ``--quick`` also :func:`apply_quick` (``quick_overrides``: the
    study's tiny model)."""
    args = p.parse_args(argv)
    if args.quick:
        apply_quick(args, **quick_overrides)
    return args


def apply_quick(args, **model_overrides) -> None:
    """Shrink everything for ``--quick`` (the study passes its own model overrides)."""
    args.train_size, args.test_size, args.epochs, args.batch_size = 40, 20, 1, 20
    args.seeds = args.seeds[:2] if len(args.seeds) >= 2 else [0, 1]
    for k, v in model_overrides.items():
        setattr(args, k, v)


def machine_state() -> dict:
    """Load and machine facts recorded with every run (the machine may be shared)."""
    load = os.getloadavg() if hasattr(os, 'getloadavg') else (float('nan'), ) * 3
    return dict(loadavg_1m=round(load[0], 2), cpus=os.cpu_count(),
                torch_threads=torch.get_num_threads(), torch=torch.__version__,
                python=platform.python_version())


def code_state() -> dict:
    """The code a run used, recorded with every run: the commit of this checkout and whether
    ``mmposenc/`` or ``projects/`` differ from it (uncommitted changes). Without git
    or a history both are None."""
    root = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))

    def git(*cmd):
        try:
            out = subprocess.run(['git', '-C', root, *cmd], capture_output=True, text=True,
                                 timeout=30)  # reads the checkout's git state, writes nothing
        except (OSError, subprocess.SubprocessError):
            return None
        return out.stdout.strip() if out.returncode == 0 else None

    commit = git('rev-parse', 'HEAD')
    changes = git('status', '--porcelain', '--', 'mmposenc', 'projects')
    return dict(commit=commit, uncommitted_changes=None if changes is None else bool(changes))


def quiet_mmengine() -> None:
    """Silence mmengine's per-parameter ``init_weights`` log (INFO) for the many builds."""
    import logging
    logging.getLogger('mmengine').setLevel(logging.WARNING)
    try:
        from mmengine.logging import MMLogger
        MMLogger.get_current_instance().setLevel(logging.WARNING)
    except Exception:  # noqa: BLE001 (an mmengine without a current logger: nothing to do)
        pass


def variant_builders(variants: Dict[str, tuple], build: Callable[[object], nn.Module]
                     ) -> Dict[str, Callable[[int], nn.Module]]:
    """The ``builders`` of :func:`run_study`: variant -> ``seed -> build(config)``, where
    ``config`` is the first item of the variant's tuple in ``variants`` (the seed is set
    before the call, so builders do not use it)."""
    return {v: (lambda seed, cfg=spec[0]: build(cfg)) for v, spec in variants.items()}


def run_and_report(builders: Dict[str, Callable[[int], nn.Module]], args,
                   report: Callable[[Dict[str, List[dict]], object], str],
                   log_name: str = 'study', model_info: Optional[dict] = None
                   ) -> Dict[str, List[dict]]:
    """A study's ``main``: :func:`run_study`, then ``report`` (printed) of the stored runs of
    every variant of ``builders``, not only of the selected ones.

    Returns:
        dict: variant -> list of run records, as :func:`load_runs`.
    """
    run_study(builders, args, log_name, model_info=model_info)
    runs = load_runs(args.out_dir, list(builders))  # everything stored so far
    print(report(runs, args))
    return runs


def run_path(out_dir: str, variant: str, seed: int) -> str:
    return osp.join(out_dir, 'runs', f'{variant}__seed{seed}.json')


def run_study(builders: Dict[str, Callable[[int], nn.Module]], args,
              log_name: str = 'study', model_info: Optional[dict] = None
              ) -> Dict[str, List[dict]]:
    """Train and evaluate every selected (variant, seed) that has no stored run.

    ``model_info`` (the study's model settings) is stored with every run.

    Returns:
        dict: variant -> list of run records (all stored runs of the selected variants).
    """
    torch.set_num_threads(args.threads)
    quiet_mmengine()
    os.makedirs(osp.join(args.out_dir, 'runs'), exist_ok=True)
    if args.train_res not in args.eval_res:
        args.eval_res = sorted(args.eval_res + [args.train_res])
    todo = [(v, s) for v in args.variants for s in args.seeds
            if args.overwrite or not osp.exists(run_path(args.out_dir, v, s))]
    data = load_data(args) if todo and not args.report_only else None
    code = code_state() if data is not None else None  # the modules are imported by now
    if data is not None:
        print(f'[{log_name}] train {tuple(data[0].shape)}, test {tuple(data[2].shape)}; '
              f'{len(todo)} runs to do', flush=True)
    for variant, seed in ([] if args.report_only else todo):
        torch.manual_seed(seed)
        np.random.seed(seed)
        model = builders[variant](seed)
        state0 = machine_state()
        rec = train(model, data[0], data[1], args.epochs, args.batch_size, args.lr,
                    args.weight_decay, args.train_res, seed, args.augment,
                    log=lambda m: print(f'  [{variant} s{seed}] {m}', flush=True))
        wall0, cpu0 = time.time(), time.process_time()
        acc = evaluate(model, data[2], data[3], args.eval_res)
        rec.update(eval_wall_s=time.time() - wall0, eval_cpu_s=time.process_time() - cpu0)
        rec.update(variant=variant, seed=seed, acc=acc, params=count_params(model),
                   trainable_params=count_params(model, True),
                   model_info=model_info or {},
                   loadavg_1m_start=state0['loadavg_1m'],
                   loadavg_1m_end=machine_state()['loadavg_1m'], machine=state0,
                   code=code,
                   settings=dict(train_size=args.train_size, test_size=args.test_size,
                                 epochs=args.epochs, batch_size=args.batch_size, lr=args.lr,
                                 weight_decay=args.weight_decay, train_res=args.train_res,
                                 augment=args.augment,
                                 data_seed=args.data_seed))
        with open(run_path(args.out_dir, variant, seed), 'w') as f:
            json.dump(rec, f, indent=1)
        print(f'  [{variant} s{seed}] ' + ', '.join(f'{r}px {a:.1f}' for r, a in acc.items())
              + f' (train {rec["train_wall_s"]:.0f} s wall, {rec["train_cpu_s"]:.0f} s CPU)',
              flush=True)
    return load_runs(args.out_dir, args.variants)


def load_runs(out_dir: str, variants: Sequence[str]) -> Dict[str, List[dict]]:
    """Stored runs of ``variants`` (in that order), each list sorted by seed."""
    runs = {}
    for v in variants:
        recs = []
        run_dir = osp.join(out_dir, 'runs')
        for name in sorted(os.listdir(run_dir)) if osp.isdir(run_dir) else []:
            if name.startswith(f'{v}__seed') and name.endswith('.json'):
                with open(osp.join(run_dir, name)) as f:
                    rec = json.load(f)
                rec['acc'] = {int(k): a for k, a in rec['acc'].items()}
                recs.append(rec)
        if recs:
            runs[v] = sorted(recs, key=lambda r: r['seed'])
    return runs


# ----------------------------------------------------------------------------- statistics
def mean_std(values: Sequence[float]):
    """Mean and sample standard deviation (ddof 1; 0 for a single value)."""
    v = np.asarray(values, dtype=float)
    return float(v.mean()), float(v.std(ddof=1)) if len(v) > 1 else 0.


def fmt(values: Sequence[float], digits: int = 1) -> str:
    m, s = mean_std(values)
    return f'{m:.{digits}f} ± {s:.{digits}f}'


def metric(rec: dict, res) -> float:
    """Accuracy at ``res``: an int, ``'train'`` (the training resolution), ``'off'`` (the
    mean over the other resolutions) or ``('drop', r)`` (accuracy at ``r`` minus accuracy at
    the training resolution)."""
    train_res = rec['settings']['train_res']
    if res == 'off':
        return float(np.mean([a for r, a in rec['acc'].items() if r != train_res]))
    if res == 'train':
        return rec['acc'][train_res]
    if isinstance(res, (tuple, list)) and res[0] == 'drop':
        return rec['acc'][int(res[1])] - rec['acc'][train_res]
    return rec['acc'][int(res)]


def res_label(res) -> str:
    """How :func:`metric`'s ``res`` reads in a table."""
    if isinstance(res, (tuple, list)):
        return f'{res[1]} px − train'
    return {'train': 'train res.', 'off': 'mean off-train'}.get(res, f'{res} px')


def paired(runs: Dict[str, List[dict]], variant: str, ref: str, res) -> List[float]:
    """Per-seed differences ``variant - ref`` of :func:`metric` over their common seeds."""
    a = {r['seed']: metric(r, res) for r in runs.get(variant, [])}
    b = {r['seed']: metric(r, res) for r in runs.get(ref, [])}
    return [a[s] - b[s] for s in sorted(set(a) & set(b))]


def verdict(diffs: Sequence[float], paper_diff: float) -> str:
    """'holds' when every seed's paired difference has the paper's sign and the mean is
    more than two standard errors from 0; 'reversed' when the same is true with the
    opposite sign; 'unclear' otherwise (with 3 seeds this is a lenient test: say so)."""
    if len(diffs) < 2 or paper_diff == 0:
        return 'unclear'
    m, s = mean_std(diffs)
    strong = abs(m) > 2 * s / math.sqrt(len(diffs))
    sign = 1 if paper_diff > 0 else -1
    if strong and all(d * sign > 0 for d in diffs):
        return 'holds'
    if strong and all(d * sign < 0 for d in diffs):
        return 'reversed'
    return 'unclear'


def summary_line(runs: Dict[str, List[dict]]) -> str:
    """Seeds, wall / CPU time and machine load of the stored runs, one line."""
    recs = [r for rs in runs.values() for r in rs]
    if not recs:
        return 'no runs'
    wall = sum(r['train_wall_s'] + r.get('eval_wall_s', 0) for r in recs)
    cpu = sum(r['train_cpu_s'] + r.get('eval_cpu_s', 0) for r in recs)
    loads = [r[k] for r in recs for k in ('loadavg_1m_start', 'loadavg_1m_end')]
    m = recs[0]['machine']
    return (f'{len(recs)} runs, {len(runs)} variants x seeds '
            f'{sorted({r["seed"] for r in recs})}; summed train+eval time {wall / 60:.1f} min '
            f'wall, {cpu / 60:.1f} min CPU (per-run CPU / wall = {cpu / wall:.2f}); '
            f'1-min load average {min(loads):.1f}-{max(loads):.1f} on {m["cpus"]} cores; '
            f'torch {m["torch"]}, {m["torch_threads"]} thread(s)')


def variant_table(runs: Dict[str, List[dict]], info: Dict[str, tuple], paper_header: str
                  ) -> str:
    """Markdown: variant (label), the paper's number, parameters (trainable), seeds and
    top-1 at the training resolution (mean ± std). ``info``: variant -> a tuple ending in
    (label, paper), such as a study's ``VARIANTS``."""
    lines = [f'| variant | {paper_header} | params (trainable) | seeds | top-1 at train res. |',
             '|---|---|---|---|---|']
    for v, recs in runs.items():
        res = recs[0]['settings']['train_res']
        label, paper = info[v][-2:]
        lines.append(f'| {label} | {paper} | {recs[0]["params"]:,} '
                     f'({recs[0]["trainable_params"]:,}) | {len(recs)} | '
                     f'{fmt([r["acc"][res] for r in recs])} |')
    return '\n'.join(lines)


def comparison_table(runs: Dict[str, List[dict]], comparisons: Sequence[tuple],
                     paper_header: str, off_train: bool = False) -> str:
    """Markdown: one row per ``(claim, variant, reference, paper difference[, res])`` with
    the paired difference ``variant - reference`` here (mean ± std over common seeds) of
    :func:`metric` at ``res`` (default ``'train'``) and its :func:`verdict`; with
    ``off_train`` also of the mean over the other resolutions."""
    head = f'| claim | {paper_header} | here (paired, mean ± std) | at | verdict |'
    lines = [head + (' here, mean off-train | verdict |' if off_train else ''),
             '|---|---|---|---|---|' + ('---|---|' if off_train else '')]
    for claim, v, ref, paper, *res in comparisons:
        if v not in runs or ref not in runs:
            continue
        res = res[0] if res else 'train'
        r = res[1] if isinstance(res, (tuple, list)) else res
        if isinstance(r, int) and r not in runs[v][0]['acc']:
            continue  # that resolution was not evaluated (e.g. --quick)
        d = paired(runs, v, ref, res)
        row = f'| {claim} | {paper:+.2f} | {fmt(d)} | {res_label(res)} | {verdict(d, paper)} |'
        if off_train:
            d = paired(runs, v, ref, 'off')
            row += f' {fmt(d)} | {verdict(d, paper)} |'
        lines.append(row)
    return '\n'.join(lines)


def paper_tables(runs: Dict[str, List[dict]], variants: Dict[str, tuple], paper_header: str,
                 comparisons: Sequence[tuple], diff_header: str, off_train: bool = False
                 ) -> List[str]:
    """:func:`variant_table` (``variants``: name -> (config, label, paper)) and
    :func:`comparison_table` of a study, as two markdown blocks."""
    return [variant_table(runs, variants, paper_header),
            comparison_table(runs, comparisons, diff_header, off_train=off_train)]


def resolution_table(runs: Dict[str, List[dict]], ref: Optional[str] = None,
                     labels: Optional[Dict[str, str]] = None) -> str:
    """Markdown: one row per variant, mean ± std per resolution, mean off-train and (with
    ``ref``) the paired difference of the off-train mean against ``ref``."""
    if not runs:
        return '(no runs)'
    first = next(iter(runs.values()))[0]
    res_list = sorted(first['acc'])
    train_res = first['settings']['train_res']
    cols = [f'{r} px' + (' (train)' if r == train_res else '') for r in res_list]
    head = ['variant', 'seeds', 'params'] + cols + ['mean off-train']
    if ref:
        head.append(f'off-train − {ref} (paired)')
    lines = ['| ' + ' | '.join(head) + ' |', '|' + '---|' * len(head)]
    for v, recs in runs.items():
        row = [labels.get(v, v) if labels else v, str(len(recs)), f'{recs[0]["params"]:,}']
        row += [fmt([r['acc'][x] for r in recs]) for x in res_list]
        row.append(fmt([metric(r, 'off') for r in recs]))
        if ref:
            row.append('—' if v == ref or ref not in runs else
                       f'{fmt(paired(runs, v, ref, "off"))}')
        lines.append('| ' + ' | '.join(row) + ' |')
    return '\n'.join(lines)


def plot_resolution(runs: Dict[str, List[dict]], path: str, title: str,
                    labels: Optional[Dict[str, str]] = None) -> None:
    """Accuracy vs test resolution, mean over seeds with ±1 std error bars."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4.5))
    train_res = None
    for i, (v, recs) in enumerate(runs.items()):
        res_list = sorted(recs[0]['acc'])
        train_res = recs[0]['settings']['train_res']
        ms = [mean_std([r['acc'][x] for r in recs]) for x in res_list]
        ax.errorbar(np.array(res_list) + 0.25 * (i - len(runs) / 2), [m for m, _ in ms],
                    yerr=[s for _, s in ms], marker='o', capsize=3,
                    label=f'{labels.get(v, v) if labels else v} (n={len(recs)})')
    if train_res:
        ax.axvline(train_res, color='grey', ls='--', lw=1)
    ax.set_xlabel('test resolution (px, whole image resized); dashed: training resolution')
    ax.set_ylabel('top-1 accuracy (%), mean ± std over seeds')
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_bars(runs: Dict[str, List[dict]], path: str, title: str, res='train',
              labels: Optional[Dict[str, str]] = None) -> None:
    """One bar per variant (mean ± std over seeds, seeds as dots) of :func:`metric`."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    names = list(runs)
    fig, ax = plt.subplots(figsize=(max(5, 0.9 * len(names) + 2), 4.2))
    vals = []
    for v in names:
        vals.append([metric(rec, res) for rec in runs[v]])
    ms = [mean_std(v) for v in vals]
    xs = np.arange(len(names))
    ax.bar(xs, [m for m, _ in ms], yerr=[s for _, s in ms], capsize=4, color='#8fb3d9')
    for x, v in zip(xs, vals):
        ax.plot([x] * len(v), v, 'k.', ms=4)
    lo = min(min(v) for v in vals)
    hi = max(max(v) for v in vals)
    ax.set_ylim(max(0, lo - 0.6 * (hi - lo) - 1), hi + 0.3 * (hi - lo) + 1)
    ax.set_xticks(xs)
    ax.set_xticklabels([labels.get(n, n) if labels else n for n in names], rotation=25,
                       ha='right', fontsize=8)
    ax.set_ylabel('top-1 accuracy (%), mean ± std; dots: seeds')
    ax.set_title(title, fontsize=10)
    ax.grid(axis='y', alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ----------------------------------------------------------------------------- reports
#: :func:`standard_report` title text of a plain ViT (:func:`vit_info`) study
VIT_TITLE = '{m[backbone]} {m[depth]} layers, dim {m[embed_dims]}, patch {m[patch_size]}'


def variant_labels(variants: Dict[str, tuple]) -> Dict[str, str]:
    """variant -> label, from a study's ``VARIANTS`` (name -> (config, label[, paper]))."""
    return {k: v[1] for k, v in variants.items()}


def standard_report(runs: Dict[str, List[dict]], out_dir: str, name: str,
                    labels: Dict[str, str], title: str, sections: Sequence[str],
                    plot: Callable = plot_bars) -> str:
    """Write a study's plot ``<out_dir>/<name>.png`` and its markdown ``<name>.md``: the
    ``sections`` and :func:`summary_line`, separated by blank lines.

    Args:
        runs (dict): variant -> run records, as :func:`load_runs`.
        out_dir (str): Where the two files go.
        name (str): Their name without the extension.
        labels (dict): variant -> label in the plot.
        title (str): The plot title after the data description ``'Fashion-MNIST (N
            train imgs, E epochs), '``; a :meth:`str.format` template of ``m`` (the
            first run's ``model_info``) and ``st`` (its ``settings``), e.g.
            ``'\\n' + VIT_TITLE``.
        sections (Sequence[str]): Markdown blocks (tables) before the summary line.
        plot (callable): :func:`plot_bars` or :func:`plot_resolution`.

    Returns:
        str: The markdown, or ``'(no runs)'`` (nothing written) without runs.

    Examples:
        >>> standard_report({}, '/tmp', 'study', {}, VIT_TITLE, [])
        '(no runs)'
    """
    if not runs:
        return '(no runs)'
    rec = next(iter(runs.values()))[0]
    m, st = rec['model_info'], rec['settings']
    plot(runs, osp.join(out_dir, f'{name}.png'), labels=labels,
         title=(f'Fashion-MNIST ({st["train_size"]} train imgs, {st["epochs"]} epochs), ' +
                title.format(m=m, st=st)))
    text = '\n\n'.join(list(sections) + [summary_line(runs)]) + '\n'
    with open(osp.join(out_dir, f'{name}.md'), 'w') as f:
        f.write(text)
    return text
