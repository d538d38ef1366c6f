"""Study 3 of the reproductions: CPVT Tables 3, 6 and 12 at CPU scale.

One small :class:`mmposenc.models.CPVT` on Fashion-MNIST per variant: class token (CLT) vs
global average pooling (GAP) with the learnable absolute PE (DeiT) and with PEGs (Table 3),
the PEG after the input (position -1) vs after the first layer (0) vs no PE (Table 6), and one
PEG vs one after each of the first five layers, "0-5" (Table 12). Several seeds, mean ± std,
paired differences. The test set is also evaluated at other resolutions (whole image
resized), reported in a second table.

Example (the run in README.md beside this file; two processes share the work)::

    OMP_NUM_THREADS=1 python -m projects.cpvt_ablations.cpvt_ablations \\
        --out-dir projects/cpvt_ablations/results --variants none le-clt le-gap peg-1-clt
    OMP_NUM_THREADS=1 python -m projects.cpvt_ablations.cpvt_ablations \\
        --out-dir projects/cpvt_ablations/results --variants peg0-clt peg0-5-clt peg0-5-gap
    python -m projects.cpvt_ablations.cpvt_ablations \\
        --out-dir projects/cpvt_ablations/results --report-only
"""
from projects.common import fmnist_study as fs

#: name -> (CPVT keyword arguments, label, paper's ImageNet top-1 of the tiny model)
VARIANTS = {
    'none': (dict(peg_positions=()), 'no PE, CLT', 68.2),
    'le-clt': (dict(peg_positions=(), with_pos_embed=True), 'DeiT (LE), CLT', 72.2),
    'le-gap': (dict(peg_positions=(), with_pos_embed=True, out_type='avg_featmap'),
               'DeiT (LE), GAP', 72.6),
    'peg-1-clt': (dict(peg_positions=(-1, )), 'PEG at -1, CLT', 70.6),
    'peg0-clt': (dict(peg_positions=(0, )), 'PEG at 0, CLT', 72.4),
    'peg0-5-clt': (dict(peg_positions=(0, 1, 2, 3, 4)), 'PEG at 0-5, CLT', 73.4),
    'peg0-5-gap': (dict(peg_positions=(0, 1, 2, 3, 4), out_type='avg_featmap'),
                   'PEG at 0-5, GAP', 74.9),
}

#: (claim, variant, reference, paper's difference in ImageNet top-1 points)
COMPARISONS = [
    ('Table 3: GAP > CLT for DeiT (LE)', 'le-gap', 'le-clt', 72.6 - 72.2),
    ('Table 3: GAP > CLT for CPVT (PEG 0-5)', 'peg0-5-gap', 'peg0-5-clt', 74.9 - 73.4),
    ('Table 6: PEG at 0 > PEG at -1', 'peg0-clt', 'peg-1-clt', 72.4 - 70.6),
    ('Table 6: PEG at -1 > no PE', 'peg-1-clt', 'none', 70.6 - 68.2),
    ('Table 6/7: PEG at 0 ≥ LE (CLT)', 'peg0-clt', 'le-clt', 72.4 - 72.2),
    ('Table 12: PEG at 0-5 > PEG at 0', 'peg0-5-clt', 'peg0-clt', 73.4 - 72.4),
    ('Table 3/4: CPVT-GAP (0-5) > DeiT CLT', 'peg0-5-gap', 'le-clt', 74.9 - 72.2),
]


def build_builders(args):
    from mmposenc.models.backbones import CPVT

    def build(kw):
        kw = {k: tuple(p for p in v if p < args.depth) if k == 'peg_positions' else v
              for k, v in kw.items()}
        net = CPVT(
            arch=dict(embed_dims=args.embed_dims, num_layers=args.depth, num_heads=args.heads,
                      feedforward_channels=args.mlp_ratio * args.embed_dims),
            img_size=args.train_res, patch_size=args.patch_size, in_channels=1, **kw)
        net.init_weights()
        return fs.Classifier(net, args.embed_dims)

    return fs.variant_builders(VARIANTS, build)


def parse_args(argv=None):
    p = fs.study_parser(__doc__, VARIANTS, eval_res=[20, 28, 36, 44],
                        out_dir='work_dirs/reproductions/cpvt_ablations')
    fs.add_vit_args(p, depth=6, embed_dims=48, heads=3)
    return fs.parse_study_args(p, argv, embed_dims=16, depth=2, heads=2, eval_res=[20, 28])


def report(runs, args) -> str:
    labels = fs.variant_labels(VARIANTS)
    return fs.standard_report(
        runs, args.out_dir, 'cpvt_ablations', labels,
        '\n' + fs.VIT_TITLE + ', at {st[train_res]} px',
        fs.paper_tables(runs, VARIANTS, 'paper top-1 (ImageNet, DeiT-tiny / CPVT-Ti)',
                        COMPARISONS, 'paper (ImageNet, tiny)', off_train=True) +
        ['Other resolutions (whole test image resized, no fine-tuning):\n\n' +
         fs.resolution_table(runs, labels=labels)])


def main(argv=None):
    args = parse_args(argv)
    return fs.run_and_report(build_builders(args), args, report, 'cpvt',
                             model_info=fs.vit_info(args, backbone='CPVT'))


if __name__ == '__main__':
    main()
