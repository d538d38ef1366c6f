"""Every speed benchmark of mmposenc in one process, written as one markdown table.

Each row compares our module with its baseline on the same input, in this process, with the
repetitions of the two interleaved (a, b, a, b, ...) and the medians compared: a ratio < 1
means ours is faster. Rows with a target come from the issue ("PEG overhead <= 2 %", "PEG
no slower than sine"); the others are reported without one.

============================  ==========================================================
benchmark                     what runs
============================  ==========================================================
CPVT-Ti vs DeiT-Ti            backbone forward, no_grad (``cpvt_speed.py``; DeiT-Ti is
                              mmpretrain's ``VisionTransformer('deit-tiny')``)
PEG-DETR vs sine DETR         DETR-R50 (``configs/peg_detr``), a padded batch of 2 images
                              (``peg_detr_speed.py``'s models and batch): training step
                              (loss + backward) and ``predict``
PEG-Deformable-DETR vs sine   the demo's Deformable-DETR (half-width R18), same
PEG vs sine in the hosts of   Conditional-DETR-R50, DAB-DETR-R50, DINO-4scale-R50 and the COCO
the encoder switch            instance Mask2Former-R50 (PEG in its pixel decoder) of
                              ``configs/peg_*`` (their mmdet model zoo settings), same
MPA vs MHSA                   PerViT-T attention, 14 x 14 tokens, batch 8, eval with Phi_p
                              cached and train (``pervit_speed.speed``)
SaPE2 ViT vs MHSA ViT         PEViT-S/4 on 32 x 32 (the SaPE2 config) with SaPE2 biases vs
                              no position encoding: forward and training step
CAPE vs sine                  the encoding alone (``CAPE2d`` with its train-time
                              augmentation vs ``SinCos2dPE``, ViT-B tokens, 14 x 14) and
                              PEViT-Ti forward with each
============================  ==========================================================

Usage::

    OMP_NUM_THREADS=1 python tools/benchmark/run_all.py --threads 1 --out docs/benchmarks.md
    python tools/benchmark/run_all.py --quick                   # seconds, small inputs, printed
    python tools/benchmark/run_all.py --only cpvt cape
"""
import argparse
import copy
import datetime
import os
import os.path as osp
import platform
import sys
from typing import Callable, Dict, List, Optional, Sequence

import torch

HERE = osp.dirname(osp.abspath(__file__))
REPO = osp.dirname(osp.dirname(HERE))

# this checkout's mmposenc first (a tool of a clone imports the clone's, installed or not)
sys.path.insert(0, osp.dirname(osp.dirname(osp.dirname(osp.realpath(__file__)))))
from mmposenc.utils.tools.machine import cpu_model, interleaved_medians  # noqa: E402

import cpvt_speed  # noqa: E402  (its neighbour: Python puts this folder first on sys.path)

BENCHMARKS = ('cpvt', 'peg_detr', 'peg_deformable_detr', 'peg_conditional_detr', 'peg_dab_detr',
              'peg_dino', 'peg_mask2former', 'mpa', 'sape2', 'cape')


def row(benchmark: str, ours: float, baseline: float, target: Optional[float] = None,
        unit: str = 'ms') -> dict:
    """One table row; ``ours`` and ``baseline`` in seconds."""
    ratio = ours / baseline
    return dict(benchmark=benchmark, ours=ours * 1e3, baseline=baseline * 1e3, ratio=ratio,
                target=target, met=None if target is None else ratio <= target)


# ------------------------------------------------------------------------------ benchmarks
def bench_cpvt(quick: bool) -> List[dict]:
    batch, size, reps = (1, (64, 64), 3) if quick else (8, (224, 224), 20)
    t = cpvt_speed.bench(batch, size, reps)
    return [row(f'CPVT-Ti / DeiT-Ti forward (batch {batch}, {size[0]}x{size[1]})', t['cpvt'],
                t['deit'], 1.02)]


def _detector_rows(name: str, label: str, quick: bool, target: float = 1.00,
                   repeats: int = 10) -> List[dict]:
    import peg_detr_speed  # owned by the detector benchmark; we reuse its models and batch
    size = peg_detr_speed.input_size(name, (64, 96) if quick else (384, 480))
    reps = 2 if quick else (5 if name == 'detr' else repeats)
    models = peg_detr_speed.build_pair(peg_detr_speed.CONFIGS[name])
    data = peg_detr_speed.make_batch(models['sine'], size)

    def train_step(model):
        def fn():
            model.train()
            model.zero_grad(set_to_none=True)
            torch.manual_seed(0)  # the same random draws (Mask2Former's mask points, DINO's noise)
            losses = model.loss(data['inputs'], copy.deepcopy(data['data_samples']))
            sum(v for k, v in losses.items() if 'loss' in k).backward()
        return fn

    def predict(model):
        def fn():
            model.eval()
            with torch.no_grad():
                model.predict(data['inputs'], copy.deepcopy(data['data_samples']))
        return fn

    shape = f'batch 2, {size[0]}x{size[1]} + 3/4 padded'
    train = interleaved_medians({k: train_step(m) for k, m in models.items()}, reps, 1)
    pred = interleaved_medians({k: predict(m) for k, m in models.items()}, reps, 1)
    return [
        row(f'{label} PEG / sine, train step ({shape})', train['peg'], train['sine'], target),
        row(f'{label} PEG / sine, predict ({shape})', pred['peg'], pred['sine'], target),
    ]


def bench_peg_detr(quick: bool) -> List[dict]:
    return _detector_rows('detr', 'DETR-R50', quick)


def bench_peg_deformable_detr(quick: bool) -> List[dict]:
    return _detector_rows('deformable', 'Deformable-DETR (R18-half)', quick)


# issue 12's target: PEG / sine <= 1.01 (the PEG replaces per-layer position additions)
def bench_peg_conditional_detr(quick: bool) -> List[dict]:
    return _detector_rows('conditional-detr', 'Conditional-DETR-R50', quick, 1.01)


def bench_peg_dab_detr(quick: bool) -> List[dict]:
    return _detector_rows('dab-detr', 'DAB-DETR-R50', quick, 1.01)


def bench_peg_dino(quick: bool) -> List[dict]:
    return _detector_rows('dino', 'DINO-4scale-R50', quick, 1.01, repeats=5)


def bench_peg_mask2former(quick: bool) -> List[dict]:
    return _detector_rows('mask2former', 'Mask2Former-R50 (COCO instance)', quick, 1.01,
                          repeats=5)


def bench_mpa(quick: bool) -> List[dict]:
    import pervit_speed  # owned by the PerViT benchmark; we call its speed()
    args = argparse.Namespace(hw=6 if quick else 14, iters=5 if quick else 30)
    res = pervit_speed.speed(args)
    shape = f'batch 8, {args.hw}x{args.hw} tokens'
    rows = []
    # targets of the PerViT issue: eval with cached Phi_p <= 1.25x MHSA, training <= 2.0x
    for case, label, target in (('attn_eval', 'eval, Phi_p cached', 1.25),
                                ('attn_train', 'train', 2.0)):
        t = res[case]
        rows.append(row(f'PerViT MPA / MHSA attention, {label} ({shape})', t['ours'] / 1e3,
                        t['mhsa'] / 1e3, target))
    return rows


def _tiny_or(arch, quick):
    return dict(embed_dims=64, num_layers=2, num_heads=4, feedforward_channels=128) \
        if quick else arch


def bench_sape2(quick: bool) -> List[dict]:
    from mmposenc.models.backbones import PEViT
    batch, reps = (2, 3) if quick else (8, 10)
    arch = _tiny_or('small', quick)
    models = {}
    for key, pe in (('sape2', dict(type='SaPE2', mode='k', max_pos=16)),
                    ('mhsa', dict(type='NoPositionEncoding'))):
        torch.manual_seed(0)
        models[key] = PEViT(arch=arch, img_size=32, patch_size=4, pos_encoding=pe)
    x = torch.randn(batch, 3, 32, 32)

    def forward(m):
        def fn():
            m.eval()
            with torch.no_grad():
                m(x)
        return fn

    def train(m):
        def fn():
            m.train()
            m.zero_grad(set_to_none=True)
            m(x)[0].sum().backward()
        return fn

    fwd = interleaved_medians({k: forward(m) for k, m in models.items()}, reps)
    trn = interleaved_medians({k: train(m) for k, m in models.items()}, reps)
    name = 'PEViT-S/4' if not quick else 'PEViT (tiny)'
    shape = f'batch {batch}, 32x32, 8x8 tokens'
    return [row(f'{name} SaPE2 / no PE (MHSA), forward ({shape})', fwd['sape2'], fwd['mhsa']),
            row(f'{name} SaPE2 / no PE (MHSA), train step ({shape})', trn['sape2'],
                trn['mhsa'])]


def bench_cape(quick: bool) -> List[dict]:
    from mmposenc.models.backbones import PEViT
    from mmposenc.models.layers import CAPE2d, SinCos2dPE
    batch, dims, hw, reps = (2, 64, (6, 6), 5) if quick else (8, 768, (14, 14), 50)
    x = torch.randn(batch, hw[0] * hw[1], dims)
    cape, sincos = CAPE2d(dims).train(), SinCos2dPE(dims)
    pe = interleaved_medians({'cape': lambda: cape.add_to_tokens(x, hw),
                              'sine': lambda: sincos.add_to_tokens(x, hw)}, reps)
    size = 16 * hw[0]
    vits = {}
    for key, cfg in (('cape', dict(type='CAPE2d')), ('sine', dict(type='SinCos2dPE'))):
        torch.manual_seed(0)
        vits[key] = PEViT(arch=_tiny_or('tiny', quick), img_size=size, pos_encoding=cfg).eval()
    img = torch.randn(batch, 3, size, size)

    def forward(m):
        def fn():
            with torch.no_grad():
                m(img)
        return fn

    fwd = interleaved_medians({k: forward(m) for k, m in vits.items()}, max(3, reps // 5))
    return [
        row(f'CAPE2d (train-time augmentation) / 2D sin-cos, the encoding alone '
            f'(batch {batch}, {hw[0]}x{hw[1]} tokens, {dims} ch)', pe['cape'], pe['sine']),
        row(f'PEViT-{"Ti" if not quick else "tiny"} CAPE / sin-cos, forward (batch {batch}, '
            f'{size}x{size})', fwd['cape'], fwd['sine']),
    ]


RUNNERS: Dict[str, Callable[[bool], List[dict]]] = dict(
    cpvt=bench_cpvt, peg_detr=bench_peg_detr, peg_deformable_detr=bench_peg_deformable_detr,
    peg_conditional_detr=bench_peg_conditional_detr, peg_dab_detr=bench_peg_dab_detr,
    peg_dino=bench_peg_dino, peg_mask2former=bench_peg_mask2former, mpa=bench_mpa,
    sape2=bench_sape2, cape=bench_cape)


# ---------------------------------------------------------------------------------- report
def machine_info() -> Dict[str, str]:
    cpu = cpu_model()
    return dict(cpu=cpu, cores=str(os.cpu_count()), torch=torch.__version__,
                threads=str(torch.get_num_threads()),
                omp_num_threads=os.environ.get('OMP_NUM_THREADS', 'unset'),
                python=platform.python_version(),
                date=datetime.datetime.now().strftime('%Y-%m-%d %H:%M'))


def to_markdown(rows: Sequence[dict], info: Dict[str, str], quick: bool,
                command: Optional[str] = None) -> str:
    lines = [
        '# Speed benchmarks' + (' (--quick: small inputs, not representative)' if quick else ''),
        '',
        f'Machine: {info["cpu"]}, {info["cores"]} cores; torch {info["torch"]}, '
        f'{info["threads"]} threads (OMP_NUM_THREADS={info["omp_num_threads"]}); Python '
        f'{info["python"]}; {info["date"]}.',
        '',
        'Medians of interleaved repetitions in one process; ratio = ours / baseline '
        '(< 1: ours is faster). Command: `'
        + (command or 'python tools/benchmark/run_all.py' + (' --quick' if quick else ''))
        + '`.',
        '',
        '| benchmark | ours (ms) | baseline (ms) | ratio | target | met? |',
        '|---|---:|---:|---:|---:|:---:|',
    ]
    for r in rows:
        target = '-' if r['target'] is None else f'<= {r["target"]:.2f}'
        met = '-' if r['met'] is None else ('yes' if r['met'] else 'no')
        lines.append(f'| {r["benchmark"]} | {r["ours"]:.2f} | {r["baseline"]:.2f} | '
                     f'{r["ratio"]:.3f} | {target} | {met} |')
    return '\n'.join(lines) + '\n'


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--out', default=None,
                        help='write the markdown here too (the repository\'s table: '
                        '--out docs/benchmarks.md); by default it is only printed')
    parser.add_argument('--quick', action='store_true',
                        help='tiny inputs and 2-5 repetitions (for tests; ratios are noise)')
    parser.add_argument('--only', nargs='+', choices=BENCHMARKS, default=list(BENCHMARKS))
    parser.add_argument('--threads', type=int, default=None,
                        help='torch threads (default: torch\'s own choice)')
    return parser.parse_args(argv)


def main(argv=None) -> List[dict]:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    rows = []
    for name in args.only:
        print(f'== {name}', flush=True)
        new = RUNNERS[name](args.quick)
        for r in new:
            print(f'   {r["benchmark"]}: {r["ours"]:.2f} / {r["baseline"]:.2f} ms = '
                  f'{r["ratio"]:.3f}', flush=True)
        rows += new
    argv = sys.argv[1:] if argv is None else list(argv)
    command = ' '.join(['OMP_NUM_THREADS=' + os.environ['OMP_NUM_THREADS']]
                       if 'OMP_NUM_THREADS' in os.environ else [])
    command = (command + ' python tools/benchmark/run_all.py ' + ' '.join(argv)).strip()
    text = to_markdown(rows, machine_info(), args.quick, command)
    print(text)
    if args.out:
        os.makedirs(osp.dirname(osp.abspath(args.out)), exist_ok=True)
        with open(args.out, 'w') as f:
            f.write(text)
        print(f'written to {args.out}')
    return rows


if __name__ == '__main__':
    main()
