"""A trained detector's COCO AP at other test scales, without fine-tuning.

The test pipeline's ``Resize`` is rewritten for every test scale
(:func:`mmposenc.utils.tools.scales.set_test_scale`: its ``scale_factor`` multiplied, or its
fixed ``scale=(W, H)`` scaled; an aspect change sets ``keep_ratio=False`` and is refused for a
fixed-size ``keep_ratio=True`` Resize) and the checkpoint is evaluated through mmengine's
``TestLoop`` with the config's evaluator (mmdet's ``CocoMetric``; predictions are mapped back to
the original image by the ``scale_factor`` the ``Resize`` records, so every scale is scored
against the same annotations). A scale is ``S`` (both sides times S) or ``SXxSY`` (width times
SX, height times SY: ``1x0.75`` keeps the width and squeezes the height).

Usage::

    python tools/analysis/detection_scales.py \\
        --config configs/peg_deformable_detr/deformable-detr-peg_r18-quarter_1xb4-2500i_shapes.py \\
        --checkpoint work_dirs/demo/peg/iter_2500.pth --out work_dirs/peg_scales.json

The study of detectors trained at one scale and tested at others, per encoder position
encoding, is ``projects/detection_resolution``.
"""
import sys
import argparse
import json
import os
import os.path as osp
from typing import List

# this checkout's mmposenc first (a tool of a clone imports the clone's, installed or not)
sys.path.insert(0, osp.dirname(osp.dirname(osp.dirname(osp.realpath(__file__)))))
from mmposenc.utils.tools.scales import (check_device, evaluate_scales,  # noqa: E402
                                         parse_scales, use_msda_pytorch)

DEFAULT_SCALES = ('0.5', '0.75', '1', '1.25', '1.5', '2', '1x0.75', '0.75x1', '1x1.5', '1.5x1')


def register_hosts() -> None:
    from mmdet.utils import register_all_modules
    register_all_modules(init_default_scope=False)
    import mmposenc.models  # noqa: F401


def evaluate_checkpoint(args) -> List[dict]:
    """``--config`` / ``--checkpoint``: the detector at every scale; JSON to ``--out``."""
    import mmposenc  # noqa: F401
    from mmengine.config import Config, DictAction
    from mmengine.runner import Runner
    check_device(args.device)
    register_hosts()
    msda = use_msda_pytorch(args.msda, args.device)
    cfg = Config.fromfile(args.config)
    if args.cfg_options:
        ns = argparse.Namespace()
        DictAction(option_strings=[], dest='o')(None, ns, list(args.cfg_options))
        cfg.merge_from_dict(ns.o)
    if cfg.get('test_dataloader') is None or cfg.get('test_evaluator') is None:
        raise SystemExit(f'{args.config} has no test_dataloader / test_evaluator')
    cfg.load_from = args.checkpoint
    cfg.work_dir = args.work_root
    cfg.launcher = 'none'
    for key in ('train_dataloader', 'train_cfg', 'optim_wrapper', 'param_scheduler',
                'val_dataloader', 'val_cfg', 'val_evaluator'):
        cfg[key] = None
    runner = Runner.from_cfg(cfg)
    runner.call_hook('before_run')  # as Runner.test: the hooks' log paths
    runner.load_or_resume()
    rows = evaluate_scales(runner, cfg, parse_scales(args.scales))
    runner.call_hook('after_run')
    lines = ['| test scale | mAP | mAP_50 | mAP_75 |', '|---|---:|---:|---:|']
    for r in rows:
        m = r['metrics']
        lines.append(f"| {r['scale']} | " + ' | '.join(
            f"{m.get(f'coco/bbox_{k}', float('nan')):.3f}" for k in ('mAP', 'mAP_50', 'mAP_75'))
            + ' |')
    print('\n'.join(lines))
    if args.out:
        os.makedirs(osp.dirname(osp.abspath(args.out)), exist_ok=True)
        with open(args.out, 'w') as f:
            json.dump(dict(config=args.config, checkpoint=args.checkpoint, msda=msda,
                           device=args.device, scales=rows), f, indent=1)
    return rows


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument('--config', required=True, help='the trained detector\'s config')
    p.add_argument('--checkpoint', required=True)
    p.add_argument('--out', help='JSON of the per-scale metrics')
    p.add_argument('--scales', nargs='+', default=list(DEFAULT_SCALES),
                   help='test scales: S or SXxSY (width x SX, height x SY); default: '
                   + ' '.join(DEFAULT_SCALES))
    p.add_argument('--device', default='cpu', help='cpu or cuda (default cpu)')
    p.add_argument('--msda', choices=('auto', 'cuda', 'pytorch'), default='auto',
                   help="mmcv MultiScaleDeformableAttention on CUDA: its kernel ('cuda'), its "
                   "PyTorch path ('pytorch', for an mmcv without CUDA ops), or 'auto' (the "
                   'kernel if it runs)')
    p.add_argument('--work-root', default=osp.join('work_dirs', 'detection_scales'),
                   help='the Runner\'s work dir (logs)')
    p.add_argument('--cfg-options', nargs='+', metavar='KEY=VALUE',
                   help='override config keys (DictAction syntax)')
    args = p.parse_args(argv)
    try:
        parse_scales(args.scales)
    except ValueError as e:
        p.error(str(e))
    args.work_root = osp.abspath(args.work_root)
    return args


def main(argv=None) -> List[dict]:
    return evaluate_checkpoint(parse_args(argv))


if __name__ == '__main__':
    main()
