"""Study 1 of the reproductions: CPVT Table 4's encoder rows (no PE / sine / PEG) on the demo
detector over several seeds.

Runs ``tools/demo.py --seed K`` (unless its result files exist) for each seed and summarises
the three models' final COCO mAP with mean +- std, the paired differences with the same
verdict rule as the other studies, and a PNG of the val mAP curves (mean over seeds).

Example (each seed is one ``make demo``: about 7-8 min on an idle 2-core machine)::

    OMP_NUM_THREADS=1 python -m projects.demo_seeds.demo_seeds --seeds 0 1 2 \
        --out-dir projects/demo_seeds/results
    # reuse finished demo runs: --run SEED=WORK_DIR (WORK_DIR holds none/ sine/ peg/)
"""
import argparse
import json
import os
import os.path as osp
import subprocess
import sys

import numpy as np

from projects.common.fmnist_study import fmt, verdict

ENCODINGS = ('none', 'sine', 'peg')
#: CPVT [E] Table 4 differences (AP points) behind each claim
CLAIMS = (('peg', 'sine', 0.3, 'PEG > sine (DD 39.4 -> DD w/o PE + PEG 39.7)'),
          ('peg', 'none', 1.1, 'PEG > no PE (DETR: w/o PE 32.8, + PEG 33.9)'),
          ('sine', 'none', 0.9, 'sine > no PE (DETR: w/o PE 32.8, sine 33.7)'))
REPO = osp.dirname(osp.dirname(osp.dirname(osp.realpath(__file__))))


def load_run(work_dir: str) -> dict:
    out = {}
    for enc in ENCODINGS:
        with open(osp.join(work_dir, enc, 'result.json')) as f:
            out[enc] = json.load(f)
    return out


def final_map(rec: dict) -> float:
    return rec['curve'][-1]['metrics']['coco/bbox_mAP']


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--seeds', type=int, nargs='+', default=[0, 1, 2])
    parser.add_argument('--run', action='append', default=[],
                        help='SEED=WORK_DIR of a finished demo run to reuse')
    parser.add_argument('--out-dir', default='work_dirs/reproductions/demo_seeds',
                        help='table, JSON and PNG (projects/demo_seeds/results: the tracked '
                        'copy)')
    parser.add_argument('--work-root', default='work_dirs/demo_seeds')
    args = parser.parse_args()
    dirs = {int(k): v for k, v in (r.split('=', 1) for r in args.run)}
    for seed in args.seeds:
        d = dirs.setdefault(seed, osp.join(args.work_root, f'seed{seed}'))
        if not all(osp.isfile(osp.join(d, e, 'result.json')) for e in ENCODINGS):
            subprocess.run([sys.executable, osp.join(REPO, 'tools', 'demo.py'), '--seed',
                            str(seed), '--work-dir', d], check=True)
    runs = {s: load_run(dirs[s]) for s in args.seeds}
    os.makedirs(args.out_dir, exist_ok=True)

    lines = ['| encoder PE | ' + ' | '.join(f'seed {s}' for s in args.seeds) +
             ' | mean ± std | train CPU s (mean) |',
             '|---|' + '---:|' * (len(args.seeds) + 2)]
    for enc in ENCODINGS:
        maps = [final_map(runs[s][enc]) for s in args.seeds]
        cpu = np.mean([runs[s][enc]['curve'][-1]['train_cpu'] for s in args.seeds])
        lines.append(f'| {enc} | ' + ' | '.join(f'{m:.3f}' for m in maps) +
                     f' | {fmt(maps, 3)} | {cpu:.0f} |')
    lines += ['', '| claim ([E] Table 4) | paired difference (mAP) | verdict |', '|---|---:|---|']
    summary = {}
    for a, b, paper, text in CLAIMS:
        diffs = [final_map(runs[s][a]) - final_map(runs[s][b]) for s in args.seeds]
        v = verdict(diffs, paper)
        summary[f'{a}-{b}'] = dict(diffs=diffs, verdict=v)
        lines.append(f'| {text} | {fmt(diffs, 3)} | {v} |')
    table = '\n'.join(lines) + '\n'
    with open(osp.join(args.out_dir, 'table.md'), 'w') as f:
        f.write(table)
    with open(osp.join(args.out_dir, 'results.json'), 'w') as f:
        json.dump(dict(seeds=args.seeds, runs={str(s): {e: runs[s][e]['curve'] for e in ENCODINGS}
                                                for s in args.seeds}, claims=summary), f)

    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6, 4))
    for enc in ENCODINGS:
        iters = [p['iter'] for p in runs[args.seeds[0]][enc]['curve']]
        curves = np.array([[p['metrics']['coco/bbox_mAP'] for p in runs[s][enc]['curve']]
                           for s in args.seeds])
        m, s = curves.mean(0), curves.std(0, ddof=1) if len(args.seeds) > 1 else 0 * curves[0]
        ax.plot(iters, m, label=enc)
        ax.fill_between(iters, m - s, m + s, alpha=0.2)
    ax.set_xlabel('iteration (batch 4)')
    ax.set_ylabel('val COCO mAP')
    ax.set_title(f'demo Deformable-DETR, mean ± std over seeds {args.seeds}')
    ax.legend()
    fig.tight_layout()
    fig.savefig(osp.join(args.out_dir, 'demo_seeds.png'), dpi=100)
    print(table)


if __name__ == '__main__':
    main()
