"""Study 5 of the reproductions: PerViT Table 1 (a) vs (b) and Table A3 at CPU scale.

One small :class:`mmposenc.models.PerViT` on Fashion-MNIST per variant: the position-based
attention Phi_p absent (MHSA, Table 1 (b) / A3 "absent") or present, trained or fixed at its
initialisation, with the peripheral, convolutional or random initialisation (Table 5 top,
Table A3). The C-stem is shortened to two stride-2 convolutions so that a 28 x 28 image gives
7 x 7 tokens; everything else (CPE, MPA, the four stages) is PerViT's. Several seeds,
mean ± std, paired differences against the paper's PerViT (peripheral, trained).

Example (the run in README.md beside this file; two processes share the work)::

    OMP_NUM_THREADS=1 python -m projects.pervit_phi_p.pervit_phi_p \\
        --out-dir projects/pervit_phi_p/results \\
        --variants absent peripheral-trained conv-trained rand-trained
    OMP_NUM_THREADS=1 python -m projects.pervit_phi_p.pervit_phi_p \\
        --out-dir projects/pervit_phi_p/results \\
        --variants peripheral-fixed conv-fixed rand-fixed
    python -m projects.pervit_phi_p.pervit_phi_p --out-dir projects/pervit_phi_p/results \\
        --report-only
"""
from projects.common import fmnist_study as fs

#: name -> (PerViT keyword arguments, label, paper's PerViT-T ImageNet top-1)
VARIANTS = {
    'absent': (dict(with_phi_p=False), 'Φp absent (MHSA)', 77.3),
    'peripheral-trained': (dict(ppe_init='peripheral'), 'peripheral, trained', 78.8),
    'conv-trained': (dict(ppe_init='conv'), 'conv, trained', 78.6),
    'rand-trained': (dict(ppe_init='rand'), 'rand, trained', 78.5),
    'peripheral-fixed': (dict(ppe_init='peripheral', freeze_phi_p=True),
                         'peripheral, fixed', 77.8),
    'conv-fixed': (dict(ppe_init='conv', freeze_phi_p=True), 'conv, fixed', 77.1),
    'rand-fixed': (dict(ppe_init='rand', freeze_phi_p=True), 'rand, fixed', 75.8),
}
REF = 'peripheral-trained'

#: (claim, variant, reference, paper's difference in ImageNet top-1 points)
COMPARISONS = [
    ('Table 1 (a) vs (b): Φp helps', 'peripheral-trained', 'absent', 78.8 - 77.3),
    ('Table 5 / A3: peripheral > conv init (trained)', 'peripheral-trained', 'conv-trained',
     78.8 - 78.6),
    ('Table 5 / A3: peripheral > rand init (trained)', 'peripheral-trained', 'rand-trained',
     78.8 - 78.5),
    ('Table A3: trained > fixed (peripheral)', 'peripheral-trained', 'peripheral-fixed',
     78.8 - 77.8),
    ('Table A3: trained > fixed (conv)', 'conv-trained', 'conv-fixed', 78.6 - 77.1),
    ('Table A3: trained > fixed (rand)', 'rand-trained', 'rand-fixed', 78.5 - 75.8),
    ('Table A3: fixed peripheral > absent', 'peripheral-fixed', 'absent', 77.8 - 77.3),
    ('Table A3: fixed conv < absent', 'conv-fixed', 'absent', 77.1 - 77.3),
    ('Table A3: fixed rand < absent', 'rand-fixed', 'absent', 75.8 - 77.3),
]


def build_builders(args):
    from mmposenc.models.backbones import PerViT
    d = args.embed_dims
    arch = dict(embed_dims=[d, d, d, d], depths=list(args.depths), num_heads=args.heads,
                stem_channels=[d // 2, d], drop_path_rate=0.)

    def build(kw):
        net = PerViT(arch=arch, in_channels=1, mlp_ratio=args.mlp_ratio, **kw)
        net.init_weights()
        return fs.Classifier(net, net.out_channels[-1])

    return fs.variant_builders(VARIANTS, build)


def parse_args(argv=None):
    p = fs.study_parser(__doc__, VARIANTS, eval_res=[28],
                        out_dir='work_dirs/reproductions/pervit_phi_p')
    p.add_argument('--embed-dims', type=int, default=48)
    p.add_argument('--depths', type=int, nargs=4, default=[1, 1, 1, 1])
    p.add_argument('--heads', type=int, default=4)
    p.add_argument('--mlp-ratio', type=float, default=2.)
    return fs.parse_study_args(p, argv, embed_dims=16, depths=[1, 1, 1, 1], heads=2)


def model_info(args) -> dict:
    return dict(backbone='PerViT', embed_dims=args.embed_dims, depths=list(args.depths),
                heads=args.heads, mlp_ratio=args.mlp_ratio,
                stem_channels=[args.embed_dims // 2, args.embed_dims])


def report(runs, args) -> str:
    return fs.standard_report(
        runs, args.out_dir, 'pervit_phi_p', fs.variant_labels(VARIANTS),
        '\nPerViT dims {m[embed_dims]}, depths {m[depths]}, 7x7 tokens',
        fs.paper_tables(runs, VARIANTS, 'paper top-1 (PerViT-T, ImageNet)', COMPARISONS,
                        'paper (PerViT-T, ImageNet)'))


def main(argv=None):
    args = parse_args(argv)
    return fs.run_and_report(build_builders(args), args, report, 'pervit',
                             model_info=model_info(args))


if __name__ == '__main__':
    main()
