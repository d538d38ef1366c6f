"""PerViT analysis (Sec. 4.1): impact Psi, nonlocality Omega, peripheral regions, Fig. 4/5/7/8.

Runs a PerViT over a folder of images (e.g. ``../shared/data/coco128/train2017``) through the
ImageNet test pipeline of the configs (short side 256, bicubic; centre crop 224; the model's
data preprocessor), and reports per layer and head, averaged over the images:

* Psi_p, Psi_c (Eq. 12), Omega_p, Omega_c, Omega_a (Eq. 13);
* the peripheral region of each head (Eq. 11, radii of Eq. 38): the region with the largest
  mean Phi_p over its (q, k) pairs (``--normalize mean``, the default; the text of Sec. 4.1),
  or with the largest sum divided by |P|^2 (``--normalize eq11``, Eq. 11 as printed, which
  ranks the regions by total attention mass), with the CPE and the FFN counted as central for
  the proportions of Fig. 5;

and writes ``measures.json`` and the PNGs ``fig4_phi_p.png``, ``fig5_regions.png``,
``fig7_impact.png``, ``fig8_nonlocality.png`` to ``--out-dir``. Without ``--images`` only the
image-independent part is computed (Omega_p, regions, Fig. 4 and 5) on a ``--hw`` grid.

The model is built from a config (an mmpretrain ``ImageClassifier`` such as
``configs/pervit/pervit-tiny_8xb128_in1k.py``, or any config whose ``model.backbone`` is a
PerViT) or from ``--arch``, optionally with a checkpoint (mmposenc layout, e.g. from
``pervit_official_to_mmposenc.py``). Without a checkpoint the weights are the initial ones.

Usage:
    python tools/analysis/pervit_analysis.py configs/pervit/pervit-tiny_8xb128_in1k.py \
        --checkpoint pervit-t.pth --images ../shared/data/coco128/train2017 \
        --num-images 128 --out-dir work_dirs/pervit_analysis
    python tools/analysis/pervit_analysis.py --arch tiny --hw 14 14
"""
import argparse
import glob
import json
import os
import os.path as osp
import sys

import torch


# this checkout's mmposenc first (a tool of a clone imports the clone's, installed or not)
sys.path.insert(0, osp.dirname(osp.dirname(osp.dirname(osp.realpath(__file__)))))
from mmposenc.analysis import (NORMALIZE_MODES, attention_measures,  # noqa: E402
                               classify_heads, collect_phi_p, nonlocality, plot_impact,
                               plot_nonlocality, plot_phi_p, plot_regions, region_radii,
                               region_scores)

#: the test pipeline of configs/pervit/*_in1k.py (mmpretrain's imagenet_bs64_swin_224)
DEFAULT_PIPELINE = [
    dict(type='LoadImageFromFile'),
    dict(type='ResizeEdge', scale=256, edge='short', backend='pillow',
         interpolation='bicubic'),
    dict(type='CenterCrop', crop_size=224),
    dict(type='PackInputs'),
]
DEFAULT_PREPROCESSOR = dict(type='ClsDataPreprocessor', mean=[123.675, 116.28, 103.53],
                            std=[58.395, 57.12, 57.375], to_rgb=True)
IMAGE_EXTS = ('.jpg', '.jpeg', '.png', '.bmp')


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('config', nargs='?', default=None)
    parser.add_argument('--arch', default='tiny', help='PerViT arch without a config')
    parser.add_argument('--checkpoint', default=None)
    parser.add_argument('--images', nargs='*', default=None,
                        help='image files or folders (searched recursively)')
    parser.add_argument('--num-images', type=int, default=None,
                        help='use the first N images (sorted by path)')
    parser.add_argument('--batch-size', type=int, default=8)
    parser.add_argument('--hw', type=int, nargs=2, default=(14, 14),
                        help='token grid without --images')
    parser.add_argument('--query', type=int, nargs=2, default=None,
                        help='query (row, col) of Fig. 4; defaults to the centre')
    parser.add_argument('--normalize', choices=list(NORMALIZE_MODES), default='mean',
                        help="region score of the head classification: 'mean' (default) is "
                        'the mean Phi_p over the (q, k) pairs whose distance falls in the '
                        "region (the text of Sec. 4.1: 'the average of its attention scores "
                        "which fall in visual region p'); 'eq11' is Eq. 11 / 36 as printed, "
                        'the sum divided by the constant |P|^2, so it picks the region with '
                        'the most attention mass and favours the regions with the most pairs')
    parser.add_argument('--out-dir', default='work_dirs/pervit_analysis')
    return parser.parse_args(argv)


def build(args):
    """``(model, pipeline cfg, data preprocessor)``; the model is an ImageClassifier or a
    PerViT backbone."""
    from mmengine.registry import init_default_scope
    init_default_scope('mmpretrain')
    import mmposenc.models  # noqa: F401
    from mmpretrain.registry import MODELS
    pipeline, preprocessor = DEFAULT_PIPELINE, DEFAULT_PREPROCESSOR
    if args.config:
        from mmengine.config import Config
        cfg = Config.fromfile(args.config)
        if cfg.model.get('type') == 'ImageClassifier':
            model_cfg = cfg.model.copy()
            if cfg.get('data_preprocessor'):  # what mmengine's Runner does
                model_cfg.setdefault('data_preprocessor', cfg.data_preprocessor)
            model = MODELS.build(model_cfg)
            preprocessor = model.data_preprocessor
        else:
            model = MODELS.build(cfg.model.backbone)
        pipeline = cfg.get('test_dataloader', {}).get('dataset', {}).get('pipeline', pipeline)
    else:
        model = MODELS.build(dict(type='mmposenc.PerViT', arch=args.arch))
    from mmposenc.engine import init_weights_quietly, load_local_checkpoint
    init_weights_quietly(model)
    if args.checkpoint:
        state = load_local_checkpoint(args.checkpoint, map_location='cpu')  # weights_only
        state = state.get('state_dict', state)
        target = model
        if not hasattr(model, 'backbone') and any(k.startswith('backbone.') for k in state):
            state = {k[len('backbone.'):]: v for k, v in state.items()
                     if k.startswith('backbone.')}
        missing, unexpected = target.load_state_dict(state, strict=False)
        ppe_missing = [k for k in missing if '.ppe.' in k or 'distance_embed' in k]
        if ppe_missing or unexpected:
            raise RuntimeError(f'checkpoint does not fit: missing {ppe_missing}, '
                               f'unexpected {unexpected}')
    return model.eval(), pipeline, preprocessor


def image_paths(sources, limit=None):
    paths = []
    for src in sources:
        if osp.isdir(src):
            paths += [p for p in glob.glob(osp.join(src, '**', '*'), recursive=True)
                      if p.lower().endswith(IMAGE_EXTS)]
        else:
            paths.append(src)
    paths = sorted(paths)
    if not paths:
        raise SystemExit(f'no images in {sources}')
    return paths[:limit] if limit else paths


def image_batches(paths, pipeline_cfg, preprocessor_cfg, batch_size):
    """Batches ``(B, 3, H, W)`` through the pipeline and the data preprocessor."""
    from mmengine.dataset import Compose
    from mmpretrain.registry import MODELS
    pipeline = Compose(pipeline_cfg)
    preprocessor = preprocessor_cfg if isinstance(preprocessor_cfg, torch.nn.Module) else \
        MODELS.build(preprocessor_cfg)
    for i in range(0, len(paths), batch_size):
        data = [pipeline(dict(img_path=p)) for p in paths[i:i + batch_size]]
        batch = preprocessor(dict(inputs=[d['inputs'] for d in data],
                                  data_samples=[d['data_samples'] for d in data]), False)
        yield batch['inputs']


def main(argv=None):
    args = parse_args(argv)
    model, pipeline, preprocessor = build(args)
    os.makedirs(args.out_dir, exist_ok=True)
    written = []
    if args.images:
        paths = image_paths(args.images, args.num_images)
        result = attention_measures(
            model, image_batches(paths, pipeline, preprocessor, args.batch_size),
            normalize=args.normalize)
        result['images'] = paths
        hw = tuple(result['hw_shape'])
        written += [plot_impact(result, osp.join(args.out_dir, 'fig7_impact.png')),
                    plot_nonlocality(result, osp.join(args.out_dir, 'fig8_nonlocality.png'))]
    else:  # Phi_p only: it does not depend on the images
        hw = tuple(args.hw)
        backbone = getattr(model, 'backbone', model)
        phis = collect_phi_p(backbone, hw)
        if not phis:
            raise SystemExit('the model has no PeripheralPositionEncoding')
        blocks = list(getattr(backbone, 'blocks', [None] * len(phis)))
        layers = []
        for phi, blk in zip(phis, blocks):
            scores = region_scores(phi.double(), hw, normalize=args.normalize)
            cpe = int(getattr(blk, 'cpe', None) is not None)
            layers.append(dict(omega_p=nonlocality(phi, hw).tolist(),
                               region_scores=scores.tolist(),
                               regions=classify_heads(phi, hw, normalize=args.normalize),
                               central_transforms=cpe + 2))  # + the FFN's two linears
        result = dict(hw_shape=list(hw), radii=region_radii(hw), normalize=args.normalize,
                      layers=layers)
    phis = collect_phi_p(getattr(model, 'backbone', model), hw)
    if phis:
        written.append(plot_phi_p(phis, hw, osp.join(args.out_dir, 'fig4_phi_p.png'),
                                  query=args.query))
    if all(layer.get('regions') for layer in result['layers']):
        written.append(plot_regions(result, osp.join(args.out_dir, 'fig5_regions.png')))
    print(f"token grid {hw[0]}x{hw[1]}, radii (Eq. 38) " +
          ' / '.join(f'{r:.2f}' for r in result['radii']) +
          (f", {result['num_images']} images" if 'num_images' in result else ''))

    def fmt(values):
        return '-' if values is None else ' '.join(f'{v:.3g}' for v in values)

    for i, layer in enumerate(result['layers']):
        print(f'layer {i + 1:2d}  Omega_p {fmt(layer.get("omega_p"))} | '
              f'Omega_c {fmt(layer.get("omega_c"))} | Omega_a {fmt(layer.get("omega_a"))} | '
              f'Psi_p {fmt(layer.get("psi_p"))} | Psi_c {fmt(layer.get("psi_c"))} | '
              + ', '.join(layer.get('regions') or []))
    out_json = osp.join(args.out_dir, 'measures.json')
    with open(out_json, 'w') as f:
        json.dump(result, f, indent=1)
    for path in [out_json] + written:
        print(f'wrote {path}')
    return result


if __name__ == '__main__':
    main()
