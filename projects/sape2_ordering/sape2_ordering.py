"""Study 4 of the reproductions: the ordering of SaPE2 Tables 1-2 at CPU scale.

One small :class:`mmposenc.models.PEViT` (class-token head, patch 4) on Fashion-MNIST 28 x 28
(7 x 7 tokens; the paper: CIFAR at 32 x 32, 8 x 8 tokens) per position encoding: learnable
absolute (APE, the vanilla ViT), 2D RoPE, 2D RoPE + APE, SaPE2 (K), SaPE2 (Q) + APE and
SaPE2 (K) + APE. Several seeds, mean ± std, paired differences against APE.

Example (the run in README.md beside this file; two processes share the work)::

    OMP_NUM_THREADS=1 python -m projects.sape2_ordering.sape2_ordering \\
        --out-dir projects/sape2_ordering/results --variants ape rope2d rope2d+ape
    OMP_NUM_THREADS=1 python -m projects.sape2_ordering.sape2_ordering \\
        --out-dir projects/sape2_ordering/results --variants sape2-k sape2-q+ape sape2-k+ape
    python -m projects.sape2_ordering.sape2_ordering --out-dir projects/sape2_ordering/results \\
        --report-only
"""
from projects.common import fmnist_study as fs

APE = dict(type='LearnableAbsolutePE')
#: name -> (PEViT pos_encoding config(s), label, paper's CIFAR-10 top-1 (Table 1 / 2))
VARIANTS = {
    'ape': (APE, 'APE (vanilla ViT)', 87.41),
    'rope2d': (dict(type='RoPE2d'), '2D RoPE', 89.92),
    'rope2d+ape': ([APE, dict(type='RoPE2d')], '2D RoPE + APE', 89.98),
    'sape2-k': (dict(type='SaPE2', mode='k'), 'SaPE2 (K)', 91.06),
    'sape2-q+ape': ([APE, dict(type='SaPE2', mode='q')], 'SaPE2 (Q) + APE', 90.17),
    'sape2-k+ape': ([APE, dict(type='SaPE2', mode='k')], 'SaPE2 (K) + APE', 93.98),
}
REF = 'ape'

#: (claim, variant, reference, paper's difference in CIFAR-10 top-1 points)
COMPARISONS = [
    ('Table 1: 2D RoPE > APE', 'rope2d', 'ape', 89.92 - 87.41),
    ('Table 1: 2D RoPE + APE ≥ 2D RoPE', 'rope2d+ape', 'rope2d', 89.98 - 89.92),
    ('Table 1: SaPE2 > 2D RoPE', 'sape2-k', 'rope2d', 91.06 - 89.92),
    ('Table 1: SaPE2 + APE > SaPE2', 'sape2-k+ape', 'sape2-k', 93.98 - 91.06),
    ('Table 1: SaPE2 + APE > 2D RoPE + APE', 'sape2-k+ape', 'rope2d+ape', 93.98 - 89.98),
    ('Table 2: SaPE2 (K) + APE > APE', 'sape2-k+ape', 'ape', 93.98 - 87.41),
    ('Table 2: SaPE2 (Q) + APE > APE', 'sape2-q+ape', 'ape', 90.17 - 87.41),
    ('Table 2: K > Q (both + APE)', 'sape2-k+ape', 'sape2-q+ape', 93.98 - 90.17),
]


def build_builders(args):
    return fs.variant_builders(VARIANTS, lambda pe: fs.build_pevit(pe, args))


def parse_args(argv=None):
    p = fs.study_parser(__doc__, VARIANTS, eval_res=[28],
                        out_dir='work_dirs/reproductions/sape2')
    fs.add_vit_args(p, depth=4)
    return fs.parse_study_args(p, argv, embed_dims=16, depth=1, heads=2)


def report(runs, args) -> str:
    return fs.standard_report(
        runs, args.out_dir, 'sape2', fs.variant_labels(VARIANTS),
        '\n' + fs.VIT_TITLE + ', at {st[train_res]} px',
        fs.paper_tables(runs, VARIANTS, 'paper top-1 (CIFAR-10, ViT-S/4)', COMPARISONS,
                        'paper (CIFAR-10)'))


def main(argv=None):
    args = parse_args(argv)
    return fs.run_and_report(build_builders(args), args, report, 'sape2',
                             model_info=fs.vit_info(args))


if __name__ == '__main__':
    main()
