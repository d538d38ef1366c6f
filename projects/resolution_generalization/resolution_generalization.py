"""Study 2 of the reproductions: CPVT Table 2 / CAPE Table 3 at CPU scale.

Train one small :class:`mmposenc.models.PEViT` (class-token head) per position encoding on
Fashion-MNIST at 28 x 28 and evaluate it, without fine-tuning, on the test images resized to
other resolutions; several seeds, mean ± std, paired differences against the learnable
absolute PE (bicubically resized to the new grid, as DeiT and the CAPE paper's *abspos*).

Example (the run in README.md beside this file; two processes share the work)::

    OMP_NUM_THREADS=1 python -m projects.resolution_generalization.resolution_generalization \\
        --out-dir projects/resolution_generalization/results --variants none learnable-abs sincos-2d
    OMP_NUM_THREADS=1 python -m projects.resolution_generalization.resolution_generalization \\
        --out-dir projects/resolution_generalization/results --variants cape cape-noaug peg
    python -m projects.resolution_generalization.resolution_generalization \\
        --out-dir projects/resolution_generalization/results --report-only
"""
import numpy as np

from projects.common import fmnist_study as fs

#: name -> (PEViT pos_encoding config, label)
ENCODINGS = {
    'none': (dict(type='NoPositionEncoding'), 'none'),
    'learnable-abs': (dict(type='LearnableAbsolutePE'), 'learnable abs. (bicubic)'),
    'sincos-2d': (dict(type='SinCos2dPE'), '2D sin-cos (integer grid)'),
    # CAPE's "sinpos": its embedding on [-1, 1] positions without augmentation
    'cape-noaug': (dict(type='CAPE2d', max_global_shift=0., max_local_shift=0.,
                        max_global_scaling=1.), 'CAPE w/o aug. (sinpos)'),
    'cape': (dict(type='CAPE2d'), 'CAPE (Δ 0.5, ε 1/N, λ 1.4)'),
    'peg': (dict(type='PEGPositionEncoding'), 'PEG after layer 0'),
}
REF = 'learnable-abs'

# Paper numbers (top-1 %, trained at 224). CPVT [L] Table 2, DeiT-tiny / CPVT-Ti with one PEG
# at 0, at 160 / 224 / 384 / 448 / 512; CAPE Table 3, ViT-B, at 160 / 224 / 384 / 672.
CPVT_T2 = dict(le=(65.6, 72.2, 71.2, 68.8, 65.9), sin=(65.2, 72.3, 70.8, 68.2, 65.1),
               none=(62.1, 68.2, 68.6, 68.4, 65.0), peg=(66.8, 72.4, 73.2, 71.8, 70.3))
CAPE_T3 = dict(nopos=(75.30, 78.97, 78.68, 72.92), abspos=(77.78, 80.90, 79.90, 72.21),
               sinpos=(77.15, 81.32, 79.72, 70.71), cape=(77.14, 81.01, 80.33, 73.43))
_c, _k = CPVT_T2, CAPE_T3
#: (claim, variant, reference, paper's difference, where here). Scales: 20 px = x0.71 of the
#: training size (160 / 224); 44 px = x1.57 (closest to 384 / 224 = x1.71); 56 px = x2
#: (448 / 224). ('drop', r): accuracy at r minus accuracy at the training size.
COMPARISONS = [
    ('CPVT T2: PEG > LE at x0.71', 'peg', REF, _c['peg'][0] - _c['le'][0], 20),
    ('CPVT T2: PEG ≥ LE at the training size', 'peg', REF, _c['peg'][1] - _c['le'][1],
     'train'),
    ('CPVT T2: PEG > LE at x1.71 (here x1.57)', 'peg', REF, _c['peg'][2] - _c['le'][2], 44),
    ('CPVT T2: PEG > LE at x2', 'peg', REF, _c['peg'][3] - _c['le'][3], 56),
    ('CPVT T2: PEG loses less than LE from x1 to x2', 'peg', REF,
     (_c['peg'][3] - _c['peg'][1]) - (_c['le'][3] - _c['le'][1]), ('drop', 56)),
    ('CPVT T2: PEG > LE, mean of the other sizes', 'peg', REF,
     float(np.mean([_c['peg'][i] - _c['le'][i] for i in (0, 2, 3, 4)])), 'off'),
    ('CPVT T2: sin-cos < LE at x0.71', 'sincos-2d', REF, _c['sin'][0] - _c['le'][0], 20),
    ('CPVT T2: sin-cos < LE at x2', 'sincos-2d', REF, _c['sin'][3] - _c['le'][3], 56),
    ('CPVT T2: no PE < LE at the training size', 'none', REF, _c['none'][1] - _c['le'][1],
     'train'),
    ('CAPE T3: CAPE ≥ abspos at the training size', 'cape', REF,
     _k['cape'][1] - _k['abspos'][1], 'train'),
    ('CAPE T3: CAPE > abspos at x1.71 (here x1.57)', 'cape', REF,
     _k['cape'][2] - _k['abspos'][2], 44),
    ('CAPE T3: CAPE loses less than abspos from x1 to x1.71 (here x1.57)', 'cape', REF,
     (_k['cape'][2] - _k['cape'][1]) - (_k['abspos'][2] - _k['abspos'][1]), ('drop', 44)),
    ('CAPE T3: CAPE > abspos, mean of the other sizes (160, 384, 672)', 'cape', REF,
     float(np.mean([_k['cape'][i] - _k['abspos'][i] for i in (0, 2, 3)])), 'off'),
    ('CAPE T3: CAPE > sinpos at x1.71 (here x1.57)', 'cape', 'cape-noaug',
     _k['cape'][2] - _k['sinpos'][2], 44),
    ('CAPE T3: CAPE loses less than sinpos from x1 to x1.71 (here x1.57)', 'cape',
     'cape-noaug', (_k['cape'][2] - _k['cape'][1]) - (_k['sinpos'][2] - _k['sinpos'][1]),
     ('drop', 44)),
]


def build_builders(args):
    return fs.variant_builders(ENCODINGS, lambda pe: fs.build_pevit(pe, args))


def parse_args(argv=None):
    p = fs.study_parser(__doc__, ENCODINGS, eval_res=[20, 28, 36, 44, 56],
                        out_dir='work_dirs/reproductions/resolution')
    fs.add_vit_args(p, depth=4)
    return fs.parse_study_args(p, argv, embed_dims=16, depth=1, heads=2,
                               eval_res=[20, 28, 36])


def report(runs, args) -> str:
    labels = fs.variant_labels(ENCODINGS)
    return fs.standard_report(
        runs, args.out_dir, 'resolution', labels,
        fs.VIT_TITLE + ',\ntrained at {st[train_res]} px, no fine-tuning',
        [fs.resolution_table(runs, ref=REF, labels=labels),
         fs.comparison_table(runs, COMPARISONS, 'paper (ImageNet)')],
        plot=fs.plot_resolution)


def main(argv=None):
    args = parse_args(argv)
    return fs.run_and_report(build_builders(args), args, report, 'resolution',
                             model_info=fs.vit_info(args, head='cls_token'))


if __name__ == '__main__':
    main()
