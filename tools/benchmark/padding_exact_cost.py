"""Cost of the padding-exact backbones (issue 20, item 1): the same backbone with and without
its padding-exact mode on the same padded batch, in one process.

Models (``--models``): ``r50`` = :class:`~mmposenc.models.detectors.PaddingExactResNet` depth 50
(the DETR configs' ResNet-50: ``frozen_stages=1``, ``norm_eval=True``), ``pvt-s`` / ``pvt-t``
= :class:`~mmposenc.models.backbones.PVTPEG` small / tiny, ``swin-t`` =
:class:`~mmposenc.models.backbones.SwinPEG` tiny, all four stages out. The batch: a
480 x 640 and a 640 x 426 image padded to 640 x 640 (the sizes of the tests' COCO128 pair;
random pixels: the cost does not depend on them), or ``--size H W`` for the first image and
3/4 of it for the second.

Timed, for each model, ``stock`` (no image sizes bound: the stock backbone) against ``exact``
(the sizes bound: masking on), interleaved (stock, exact, exact, stock, ...) with the ratio
``t(exact) / t(stock)`` taken within each repetition and its median reported:

- ``forward``: eval mode, no grad (inference);
- ``train``: train mode, forward + backward of the sum of the maps (a training step's backbone
  part, without optimizer).

Usage::

    OMP_NUM_THREADS=1 python tools/benchmark/padding_exact_cost.py --threads 1
    python tools/benchmark/padding_exact_cost.py --models pvt-s --repeats 10 --out cost.md
    python tools/benchmark/padding_exact_cost.py --quick   # seconds: small input, 2 repetitions
"""
import argparse
import os.path as osp
import statistics
import sys
import time
from typing import Callable, Dict, List

import torch

sys.path.insert(0, osp.dirname(osp.abspath(__file__)))
from bench_common import machine  # noqa: E402

REPO = osp.dirname(osp.dirname(osp.dirname(osp.realpath(__file__))))
sys.path.insert(0, REPO)  # this checkout's mmposenc

MODELS = ('r50', 'pvt-s', 'pvt-t', 'swin-t')
LABELS = {'r50': 'ResNet-50 (PaddingExactResNet)', 'pvt-s': 'PVTPEG-S', 'pvt-t': 'PVTPEG-T',
          'swin-t': 'SwinPEG-T'}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--models', nargs='+', choices=MODELS, default=['r50', 'pvt-s', 'swin-t'])
    parser.add_argument('--size', type=int, nargs=2, default=None,
                        help='(h, w) of the first image; the second is 3/4 of it. Default: '
                        'the 480 x 640 + 640 x 426 pair')
    parser.add_argument('--repeats', type=int, default=6)
    parser.add_argument('--warmup', type=int, default=1)
    parser.add_argument('--threads', type=int, default=None)
    parser.add_argument('--device', default='cpu')
    parser.add_argument('--quick', action='store_true',
                        help='a smoke run: 96 x 128 input, 2 repetitions, no warm-up')
    parser.add_argument('--out', help='also write the markdown table to this file')
    args = parser.parse_args(argv)
    if args.quick:
        args.size, args.repeats, args.warmup = [96, 128], 2, 0
    return args


def build(name: str):
    import mmposenc.models.detectors  # noqa: F401  (PaddingExactResNet needs mmdet)
    from mmposenc.registry import MODELS as REGISTRY
    if name == 'r50':
        cfg = dict(type='mmposenc.PaddingExactResNet', depth=50, num_stages=4,
                   out_indices=(1, 2, 3), frozen_stages=1, norm_eval=True, style='pytorch',
                   norm_cfg=dict(type='BN', requires_grad=False))
    elif name == 'swin-t':
        cfg = dict(type='mmposenc.SwinPEG', arch='tiny', out_indices=(0, 1, 2, 3),
                   padding_exact=True)
    else:
        cfg = dict(type='mmposenc.PVTPEG', arch=name[-1], out_indices=(0, 1, 2, 3),
                   final_norm=False, padding_exact=True)
    return REGISTRY.build(cfg)


def batch(size, device):
    if size is None:
        shapes = [(480, 640), (640, 426)]
    else:
        h, w = size
        shapes = [(h, w), (h * 3 // 4, w * 3 // 4)]
    H, W = max(s[0] for s in shapes), max(s[1] for s in shapes)
    x = torch.zeros(len(shapes), 3, H, W, device=device)
    for i, (h, w) in enumerate(shapes):
        x[i, :, :h, :w] = torch.randn(3, h, w, device=device)
    return x, shapes


def timer(device) -> Callable[[Callable], float]:
    def run(fn):
        if device != 'cpu':
            torch.cuda.synchronize()
        t = time.perf_counter()
        fn()
        if device != 'cpu':
            torch.cuda.synchronize()
        return time.perf_counter() - t
    return run


def measure(name: str, args) -> Dict[str, Dict[str, float]]:
    from mmposenc.models.utils.padding_exact import backbone_image_shapes
    model = build(name).to(args.device)
    x, shapes = batch(args.size, args.device)
    clock = timer(args.device)

    def call(exact: bool, train: bool):
        def fn():
            with backbone_image_shapes(model, shapes if exact else None):
                if train:
                    model.train()
                    sum(o.sum() for o in model(x)).backward()
                else:
                    model.eval()
                    with torch.no_grad():
                        model(x)
        return fn

    results = {}
    for stage, train in (('forward', False), ('train', True)):
        for _ in range(args.warmup):
            call(False, train)()
            call(True, train)()
        times = {'stock': [], 'exact': []}
        ratios = []
        for r in range(args.repeats):
            order = ('stock', 'exact') if r % 2 == 0 else ('exact', 'stock')
            t = {k: clock(call(k == 'exact', train)) for k in order}
            for k in order:
                times[k].append(t[k])
            ratios.append(t['exact'] / t['stock'])
        results[stage] = dict(stock=statistics.median(times['stock']),
                              exact=statistics.median(times['exact']),
                              ratio=statistics.median(ratios))
    return results


def table(all_results, args) -> str:
    size = ('480x640 + 640x426 in 640x640' if args.size is None else
            f'{args.size[0]}x{args.size[1]} + 3/4 of it')
    lines = [f'Padding-exact backbones vs stock, batch of 2 ({size}), {args.device}; '
             f'{machine()}; median of {args.repeats} interleaved repetitions', '',
             '| backbone | stage | stock (s) | exact (s) | exact / stock |',
             '|---|---|---|---|---|']
    for name, res in all_results.items():
        for stage, r in res.items():
            lines.append(f'| {LABELS[name]} | {stage} | {r["stock"]:.3f} | {r["exact"]:.3f} '
                         f'| {r["ratio"]:.3f} |')
    return '\n'.join(lines)


def main(argv=None) -> List[str]:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    results = {name: measure(name, args) for name in args.models}
    text = table(results, args)
    print(text)
    if args.out:
        with open(args.out, 'w') as f:
            f.write(text + '\n')
    return text


if __name__ == '__main__':
    main()
