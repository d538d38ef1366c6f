"""Cost of RoPE-Mixed (issue 23, item 4) against no position encoding and against RoPE-Axial,
train step and eval forward, in one process.

The model is :class:`~mmposenc.models.backbones.PEViT` (``--arch``, class token, a linear
classifier on it) with one ``pos_encoding`` per variant, all built from the same seed:

- ``none``: :class:`~mmposenc.models.layers.NoPositionEncoding`;
- ``rope-axial``: :class:`~mmposenc.models.layers.RoPE2d` (theta 100, no parameters; its angles
  are recomputed in every layer);
- ``rope-mixed``: :class:`~mmposenc.models.layers.RoPEMixed` (learnt frequencies; in eval under
  ``no_grad`` the angles of each layer come from the cache after the first call);
- ``rope-mixed, no cache`` (eval only): the same with ``cache_size=0``, what the cache saves;
- ``rope-dinov3``: :class:`~mmposenc.models.layers.DINOv3RoPE` (no parameters, cached in eval).

Stages: ``train`` = one training step (train mode, forward, cross-entropy on random labels,
backward, AdamW step) and ``eval`` = forward in eval mode under ``no_grad``. Within each
repetition every variant runs once (the order rotated per repetition); each variant's time is
divided by that of ``none`` (and of ``rope-axial``) of the same repetition, and the medians of
the times and of the ratios are reported. ``--backends eager compile``: also each model wrapped
in ``torch.compile`` (compiled during the warm-up calls, not timed; the cache is bypassed
while compiling, so compiled eval computes the angles in the graph); a backend that fails on this
machine gets one row saying why.

Usage::

    OMP_NUM_THREADS=1 python tools/benchmark/rope_cost.py --threads 1 --out rope_cost.md
    python tools/benchmark/rope_cost.py --arch small --img-size 224 --batch-size 8 \\
        --backends eager compile --repeats 10
    python tools/benchmark/rope_cost.py --device cuda --arch base --batch-size 64
    python tools/benchmark/rope_cost.py --quick   # seconds: tiny model, 2 repetitions
"""
import argparse
import os.path as osp
import statistics
import sys
import time
import traceback
from typing import Callable, Dict, List

import torch
import torch.nn as nn


REPO = osp.dirname(osp.dirname(osp.dirname(osp.realpath(__file__))))
# this checkout's mmposenc first (a tool of a clone imports the clone's, installed or not)
sys.path.insert(0, osp.dirname(osp.dirname(osp.dirname(osp.realpath(__file__)))))
from mmposenc.utils.tools.machine import machine  # noqa: E402

VARIANTS = {
    'none': dict(type='mmposenc.NoPositionEncoding'),
    'rope-axial': dict(type='mmposenc.RoPE2d'),
    'rope-mixed': dict(type='mmposenc.RoPEMixed'),
    'rope-mixed, no cache': dict(type='mmposenc.RoPEMixed', cache_size=0),
    'rope-dinov3': dict(type='mmposenc.DINOv3RoPE'),
}
STAGES = ('train', 'eval')
QUICK_ARCH = dict(embed_dims=64, num_layers=2, num_heads=4, feedforward_channels=128)


class Classifier(nn.Module):
    """PEViT + a linear head on the class token."""

    def __init__(self, arch, pos_encoding, img_size, patch_size, num_classes=100):
        super().__init__()
        from mmposenc.models.backbones import PEViT
        self.backbone = PEViT(arch=arch, pos_encoding=pos_encoding, img_size=img_size,
                              patch_size=patch_size)
        self.head = nn.Linear(self.backbone.embed_dims, num_classes)

    def forward(self, x):
        return self.head(self.backbone(x)[-1])


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--arch', default='tiny', help="PEViT arch ('tiny', 'small', 'base')")
    parser.add_argument('--img-size', type=int, default=224)
    parser.add_argument('--patch-size', type=int, default=16)
    parser.add_argument('--batch-size', type=int, default=8)
    parser.add_argument('--variants', nargs='+', choices=list(VARIANTS), default=list(VARIANTS))
    parser.add_argument('--stages', nargs='+', choices=STAGES, default=list(STAGES))
    parser.add_argument('--backends', nargs='+', choices=('eager', 'compile'),
                        default=['eager', 'compile'])
    parser.add_argument('--repeats', type=int, default=6)
    parser.add_argument('--warmup', type=int, default=2)
    parser.add_argument('--threads', type=int, default=None)
    parser.add_argument('--device', default='cpu')
    parser.add_argument('--quick', action='store_true',
                        help='a 2-layer width-64 ViT on 64 x 64 images, 2 repetitions')
    parser.add_argument('--out', help='also write the markdown table to this file')
    args = parser.parse_args(argv)
    if args.quick:
        args.arch, args.img_size, args.patch_size = dict(QUICK_ARCH), 64, 8
        args.batch_size, args.repeats, args.warmup = 2, 2, 1
    if 'none' not in args.variants:
        args.variants = ['none'] + args.variants
    return args


def timer(device) -> Callable[[Callable], float]:
    sync = torch.cuda.synchronize if str(device).startswith('cuda') else (lambda: None)

    def run(fn):
        sync()
        t = time.perf_counter()
        fn()
        sync()
        return time.perf_counter() - t
    return run


def allow_recompiles(limit: int = 64) -> None:
    """Every variant is its own compiled model of the same code: raise dynamo's recompile
    limit (8) so that none of them silently falls back to eager."""
    import torch._dynamo
    for name in ('recompile_limit', 'cache_size_limit'):
        if hasattr(torch._dynamo.config, name):
            setattr(torch._dynamo.config, name, max(limit, getattr(torch._dynamo.config, name)))


def build(variant: str, args, backend: str):
    torch.manual_seed(0)
    model = Classifier(args.arch, VARIANTS[variant], args.img_size, args.patch_size)
    model = model.to(args.device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    run = torch.compile(model) if backend == 'compile' else model
    return model, run, opt


def stage_fn(stage: str, model, run, opt, x, y) -> Callable[[], None]:
    if stage == 'train':
        def step():
            model.train()
            opt.zero_grad(set_to_none=True)
            nn.functional.cross_entropy(run(x), y).backward()
            opt.step()
        return step

    def forward():
        model.eval()
        with torch.no_grad():
            run(x)
    return forward


def measure(stage: str, backend: str, args) -> Dict[str, List[float]]:
    """Times (s) per variant, one per repetition, variants interleaved."""
    variants = [v for v in args.variants if not (stage == 'train' and 'no cache' in v)]
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(args.batch_size, 3, args.img_size, args.img_size, generator=gen).to(
        args.device)
    y = torch.randint(0, 100, (args.batch_size, ), generator=gen).to(args.device)
    fns = {}
    for v in variants:
        model, run, opt = build(v, args, backend)
        fns[v] = stage_fn(stage, model, run, opt, x, y)
        for _ in range(args.warmup):  # compiles here; fills the eval cache
            fns[v]()
    tick = timer(args.device)
    times = {v: [] for v in variants}
    for r in range(args.repeats):
        order = variants[r % len(variants):] + variants[:r % len(variants)]
        for v in order:
            times[v].append(tick(fns[v]))
    return times


def rows_for(stage: str, backend: str, times: Dict[str, List[float]]) -> List[str]:
    rows = []
    for v, ts in times.items():
        vs_none = statistics.median(t / n for t, n in zip(ts, times['none']))
        vs_axial = (statistics.median(t / a for t, a in zip(ts, times['rope-axial']))
                    if 'rope-axial' in times else float('nan'))
        rows.append(f'| {stage} | {backend} | {v} | {1e3 * statistics.median(ts):.1f} | '
                    f'{vs_none:.3f} | {vs_axial:.3f} |')
    return rows


def main(argv=None):
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    import mmposenc.models  # noqa: F401  (registers the encodings)
    if 'compile' in args.backends:
        allow_recompiles()
    arch = args.arch if isinstance(args.arch, str) else 'custom ' + str(args.arch)
    header = [
        f'RoPE cost: PEViT {arch}, {args.img_size} x {args.img_size} images, patch '
        f'{args.patch_size}, batch {args.batch_size}, {args.device}; {machine()}; '
        f'{args.repeats} repetitions (median), {args.warmup} warm-up calls.', '',
        '| stage | backend | encoding | median ms | / none | / rope-axial |',
        '|---|---|---|---|---|---|']
    rows = []
    for backend in args.backends:
        for stage in args.stages:
            try:
                times = measure(stage, backend, args)
            except Exception as e:  # e.g. torch.compile without a working C++ toolchain
                reason = traceback.format_exception_only(type(e), e)[-1].strip().splitlines()[0]
                rows.append(f'| {stage} | {backend} | (failed: {reason[:160]}) | | | |')
            else:
                rows += rows_for(stage, backend, times)
            print(rows[-1], flush=True)
    text = '\n'.join(header + rows)
    print(text)
    if args.out:
        with open(args.out, 'w') as f:
            f.write(text + '\n')


if __name__ == '__main__':
    main()
