"""Top-1 accuracy of a trained classifier at several test resolutions, without fine-tuning.

The protocol of CPVT's Table 2 (train at 224, test at 160 ... 384 as is): the config's test
pipeline is rewritten for every resolution ``r`` and the checkpoint evaluated with the model's
``predict`` on the config's test dataset:

- ``CenterCrop`` -> ``crop_size=r``, and a ``ResizeEdge`` before it scales with it
  (``scale * r / crop``: DeiT's 256 -> 224 ratio is kept);
- ``Resize`` (no crop) -> ``scale=(r, r)``;
- ``RandomResizedCrop`` / ``ResizeEdge`` alone -> ``scale=r``.

A pipeline with none of these is an error (the resolution would not change). Prints a
markdown table and writes a PNG (accuracy vs resolution) and a JSON beside it.

Usage::

    python tools/analysis/resolution_sweep.py configs/cpvt/cpvt-tiny_4xb256_in1k.py cpvt.pth \\
        --resolutions 160 224 288 384 --data-root data/imagenet --max-samples 5000 \\
        --out work_dirs/cpvt_resolution_sweep.png
"""
import argparse
import copy
import json
import os
import os.path as osp
import sys
from typing import Dict, List, Optional, Sequence

import torch

# this checkout's mmposenc first (a tool of a clone imports the clone's, installed or not)
sys.path.insert(0, osp.dirname(osp.dirname(osp.dirname(osp.realpath(__file__)))))


RESIZE_TYPES = ('Resize', 'ResizeEdge', 'CenterCrop', 'RandomResizedCrop')


def _type(step: dict) -> str:
    return str(step.get('type', '')).split('.')[-1]


def set_resolution(pipeline: Sequence[dict], resolution: int) -> List[dict]:
    """A copy of a test ``pipeline`` that feeds the model ``resolution x resolution`` images.

    Raises:
        ValueError: for a non-positive resolution or a pipeline without a resize/crop step.
    """
    if not isinstance(resolution, int) or resolution <= 0:
        raise ValueError(f'resolutions must be positive integers, got {resolution!r}')
    pipeline = copy.deepcopy(list(pipeline))
    types = [_type(s) for s in pipeline]
    if not any(t in RESIZE_TYPES for t in types):
        raise ValueError(f'the test pipeline {types} has no {"/".join(RESIZE_TYPES)} step: '
                         'cannot change its resolution')
    crop = next((s for s in pipeline if _type(s) == 'CenterCrop'), None)
    for step in pipeline:
        t = _type(step)
        if t == 'CenterCrop':
            step['crop_size'] = resolution
        elif t == 'ResizeEdge':
            if crop is not None:
                base = crop['crop_size']
                base = base if isinstance(base, int) else base[0]
                step['scale'] = int(round(step['scale'] * resolution / base))
            else:
                step['scale'] = resolution
        elif t == 'Resize':
            step.pop('scale_factor', None)
            step['scale'] = (resolution, resolution)
        elif t == 'RandomResizedCrop':
            step['scale'] = resolution
    return pipeline


def build_model(cfg, checkpoint: str) -> torch.nn.Module:
    """The classifier of ``cfg`` as the Runner builds it, with the weights of ``checkpoint``."""
    from mmengine.registry import DefaultScope
    from mmengine.runner import load_checkpoint

    from mmposenc.registry import MODELS
    model_cfg = copy.deepcopy(cfg.model)
    model_cfg.get('backbone', {}).pop('init_cfg', None)  # the checkpoint has every weight
    if cfg.get('data_preprocessor', None) is not None:
        # as the Runner builds it: mmpretrain configs keep the normalisation, BGR -> RGB and
        # num_classes in a top-level data_preprocessor
        model_cfg.setdefault('data_preprocessor', copy.deepcopy(cfg.data_preprocessor))
    with DefaultScope.overwrite_default_scope(cfg.get('default_scope', 'mmpretrain')):
        model = MODELS.build(model_cfg)
    load_checkpoint(model, checkpoint, map_location='cpu', strict=True,
                    logger='silent')
    return model.eval()


@torch.no_grad()
def evaluate(model, cfg, resolution: int, data_root: Optional[str] = None,
             max_samples: Optional[int] = None, batch_size: Optional[int] = None) -> Dict:
    """Top-1 accuracy (in [0, 1]) of ``model`` on the config's test set at ``resolution``."""
    from mmengine.registry import DefaultScope
    from mmengine.runner import Runner
    dl_cfg = copy.deepcopy(cfg.test_dataloader)
    ds = dl_cfg.dataset
    if data_root is not None:
        ds.data_root = data_root
    if max_samples is not None:
        ds.indices = int(max_samples)
    if batch_size is not None:
        dl_cfg.batch_size = batch_size
    dl_cfg.num_workers = 0
    dl_cfg.persistent_workers = False
    ds.pipeline = set_resolution(ds.pipeline, resolution)
    with DefaultScope.overwrite_default_scope(cfg.get('default_scope', 'mmpretrain')):
        loader = Runner.build_dataloader(dl_cfg, seed=0)
    correct = total = 0
    shape = None
    for batch in loader:
        data = model.data_preprocessor(batch, False)
        shape = tuple(data['inputs'].shape[-2:])
        for sample in model(**data, mode='predict'):
            correct += int(sample.pred_label.item() == sample.gt_label.item())
            total += 1
    if total == 0:
        raise RuntimeError('the test dataset is empty')
    return dict(resolution=resolution, input_shape=shape, samples=total,
                accuracy=correct / total)


def plot(rows: Sequence[Dict], out_file: str, title: str = '',
         train_resolution: Optional[int] = None) -> str:
    """PNG of accuracy vs resolution."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(5, 3.5))
    xs = [r['resolution'] for r in rows]
    ys = [100 * r['accuracy'] for r in rows]
    ax.plot(xs, ys, 'o-')
    if train_resolution is not None:
        ax.axvline(train_resolution, color='gray', ls='--', lw=1, label='train resolution')
        ax.legend(loc='lower right', fontsize=8)
    ax.set_xlabel('test resolution (px)')
    ax.set_ylabel('top-1 accuracy (%)')
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    os.makedirs(osp.dirname(osp.abspath(out_file)), exist_ok=True)
    fig.savefig(out_file, dpi=100)
    plt.close(fig)
    return out_file


def to_markdown(rows: Sequence[Dict]) -> str:
    lines = ['| resolution | input (H x W) | samples | top-1 (%) |', '|---:|---:|---:|---:|']
    for r in rows:
        h, w = r['input_shape']
        lines.append(f'| {r["resolution"]} | {h} x {w} | {r["samples"]} | '
                     f'{100 * r["accuracy"]:.2f} |')
    return '\n'.join(lines)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('config')
    parser.add_argument('checkpoint')
    parser.add_argument('--resolutions', type=int, nargs='+', default=[160, 224, 288, 384])
    parser.add_argument('--data-root', default=None, help="override the test set's data_root")
    parser.add_argument('--max-samples', type=int, default=None,
                        help='evaluate the first N test images only')
    parser.add_argument('--batch-size', type=int, default=None)
    parser.add_argument('--train-resolution', type=int, default=None,
                        help='marked in the plot')
    parser.add_argument('--out', default=None, help='PNG path (default: work_dirs/'
                        '<config>_resolution_sweep.png); a .json is written beside it')
    parser.add_argument('--cfg-options', nargs='+', default=None, help='key=value overrides')
    return parser.parse_args(argv)


def main(argv=None) -> List[Dict]:
    args = parse_args(argv)
    import mmposenc  # noqa: F401  (before parsing: `_base_ = 'mmposenc::...'` configs)
    from mmengine.config import Config, DictAction
    bad = [r for r in args.resolutions if r <= 0]
    if bad:
        raise SystemExit(f'--resolutions must be positive, got {bad}')
    if args.max_samples is not None and args.max_samples <= 0:
        raise SystemExit(f'--max-samples must be positive, got {args.max_samples}')
    cfg = Config.fromfile(args.config)
    if args.cfg_options:
        ns = argparse.Namespace()
        DictAction(option_strings=[], dest='o')(None, ns, args.cfg_options)
        cfg.merge_from_dict(ns.o)
    if cfg.get('custom_imports'):
        from mmengine.utils import import_modules_from_strings
        import_modules_from_strings(**cfg.custom_imports)
    from mmpretrain.utils import register_all_modules
    register_all_modules(init_default_scope=False)
    import mmposenc.models  # noqa: F401
    if cfg.get('test_dataloader') is None:
        raise SystemExit(f'{args.config} has no test_dataloader')
    model = build_model(cfg, args.checkpoint)
    rows = []
    for res in args.resolutions:
        rows.append(evaluate(model, cfg, res, args.data_root, args.max_samples,
                             args.batch_size))
        print(f'{res}: top-1 {100 * rows[-1]["accuracy"]:.2f} % on {rows[-1]["samples"]}',
              flush=True)
    print(to_markdown(rows))
    name = osp.splitext(osp.basename(args.config))[0]
    out = args.out or osp.join('work_dirs', f'{name}_resolution_sweep.png')
    plot(rows, out, title=f'{name} (no fine-tuning)', train_resolution=args.train_resolution)
    with open(osp.splitext(out)[0] + '.json', 'w') as f:
        json.dump(dict(config=args.config, checkpoint=args.checkpoint, rows=rows), f, indent=2)
    print(f'plot: {out}')
    return rows


if __name__ == '__main__':
    main()
