"""PerViT analysis: nonlocality Omega, peripheral region of every head, and Phi_p plots.

Works on any model holding PeripheralPositionEncoding modules (PerViT, PEViT + PeripheralPE):
built from a config (``model.backbone`` is enough) or from ``--arch``, optionally with a
checkpoint (mmposenc layout, e.g. from ``pervit_official_to_mmposenc.py``).

Usage:
    python tools/analysis/pervit_analysis.py --arch tiny --checkpoint pervit-t.pth \
        --hw 14 14 --out-dir work_dirs/pervit_analysis
    python tools/analysis/pervit_analysis.py configs/pervit/pervit-tiny_8xb128_in1k.py \
        --hw 50 84 --query 10 20
"""
import argparse
import json
import os
import os.path as osp
import sys

import torch

sys.path.insert(0, osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__)))))

from mmposenc.analysis import (classify_heads, collect_phi_p, nonlocality,  # noqa: E402
                               peripheral_radii, plot_phi_p)


def build_model(args):
    from mmposenc.registry import MODELS
    import mmposenc.models  # noqa: F401
    if args.config:
        from mmengine.config import Config
        cfg = Config.fromfile(args.config)
        model_cfg = cfg.model.get('backbone', cfg.model)
        model = MODELS.build(model_cfg)
    else:
        from mmposenc.models.backbones import PerViT
        model = PerViT(arch=args.arch)
    if args.checkpoint:
        state = torch.load(args.checkpoint, map_location='cpu', weights_only=False)
        state = state.get('state_dict', state)
        if any(k.startswith('backbone.') for k in state):
            state = {k[len('backbone.'):]: v for k, v in state.items()
                     if k.startswith('backbone.')}
        missing, unexpected = model.load_state_dict(state, strict=False)
        ppe_missing = [k for k in missing if '.ppe.' in k or 'distance_embed' in k]
        if ppe_missing or unexpected:
            raise RuntimeError(f'checkpoint does not fit: missing {ppe_missing}, '
                               f'unexpected {unexpected}')
    return model.eval()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('config', nargs='?', default=None)
    parser.add_argument('--arch', default='tiny')
    parser.add_argument('--checkpoint', default=None)
    parser.add_argument('--hw', type=int, nargs=2, default=(14, 14))
    parser.add_argument('--query', type=int, nargs=2, default=None,
                        help='query (row, col) of the plots; defaults to the centre')
    parser.add_argument('--out-dir', default='work_dirs/pervit_analysis')
    args = parser.parse_args()

    hw = tuple(args.hw)
    model = build_model(args)
    phis = collect_phi_p(model, hw)
    if not phis:
        raise SystemExit('the model has no PeripheralPositionEncoding')
    os.makedirs(args.out_dir, exist_ok=True)
    report = dict(hw_shape=list(hw), radii=peripheral_radii(hw), layers=[])
    for i, phi in enumerate(phis):
        omega = nonlocality(phi, hw)
        regions = classify_heads(phi, hw)
        report['layers'].append(dict(layer=i, nonlocality=omega.tolist(), regions=regions))
        print(f'layer {i:2d}  Omega ' + ' '.join(f'{v:.3f}' for v in omega.tolist()) +
              '  ' + ', '.join(regions))
    png = plot_phi_p(phis, hw, osp.join(args.out_dir, f'phi_p_{hw[0]}x{hw[1]}.png'),
                     query=args.query)
    with open(osp.join(args.out_dir, f'analysis_{hw[0]}x{hw[1]}.json'), 'w') as f:
        json.dump(report, f, indent=2)
    print(f'plot: {png}')


if __name__ == '__main__':
    main()
