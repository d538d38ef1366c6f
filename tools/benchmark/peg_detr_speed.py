"""Speed of the PEG and CAPE encoder position encodings against the sine one in (Deformable-)DETR.

Builds the same detector with ``encoder_pos='sine'``, ``'peg'`` and ``'cape'`` (the sine
model's weights loaded into the others, so only the position encoding differs), feeds all of
them the same padded batch (two images, the second 3/4 of the first's size) and times

- ``encoder``: ``pre_transformer`` + ``forward_encoder`` in eval mode, no grad: the place where
  the PEG / CAPE replaces the sine computation;
- ``encoder train``: the same in train mode plus the backward of the memory (from fixed
  backbone features): the training cost of the position encoding without the backbone and
  decoder, whose time (the same for all models) buries it in the full step's noise;
- ``predict``: ``model.predict`` (backbone to boxes) in eval mode, no grad;
- ``train step``: ``model.loss`` + ``backward`` in train mode (no optimizer step).

Repetitions of the models are interleaved (sine, peg, cape, then peg, cape, sine, ...: the order
rotates so that none always runs first) and each ratio is the median over the repetitions of
``t(peg) / t(sine)`` within one repetition, so load that changes slower than one repetition
cancels; the times shown are medians. The issue's target is ``peg / sine <= 1.00`` (the PEG
replaces the sine computation); ``cape / sine`` is reported without a target.

Models (``--models``): ``detr`` = DETR-R50 of ``configs/peg_detr`` (CPVT setting, 100
queries, 6+6 layers), ``deformable-r50`` = Deformable-DETR-R50 of
``configs/peg_deformable_detr`` (4 levels, 6+6 layers), ``deformable`` = the demo's
Deformable-DETR (half-width ResNet-18, 2 levels, 2+2 layers of width 128); the R50 configs of
``configs/peg_conditional_detr`` (``conditional-detr``), ``configs/peg_dab_detr``
(``dab-detr``), ``configs/peg_dino`` (``dino``, 4 levels, 900 queries) and the COCO instance
Mask2Former of ``configs/peg_mask2former`` (``mask2former``; its "encoder" stages time the
pixel decoder, whose encoder the switch changes)::

    OMP_NUM_THREADS=1 python tools/benchmark/peg_detr_speed.py --threads 1 --out speed.md
    python tools/benchmark/peg_detr_speed.py --models deformable --repeats 20 --size 512 640
    python tools/benchmark/peg_detr_speed.py --quick   # seconds: tiny input, 2 repetitions

``--clock cpu`` times with the process CPU time instead of the wall clock (with one thread
this ignores the time the process waits for a core on a busy machine).
"""
import argparse
import copy
import os.path as osp
import statistics
import sys
import time
from typing import Callable, Dict, List, Optional, Sequence

import torch


REPO = osp.dirname(osp.dirname(osp.dirname(osp.realpath(__file__))))
# this checkout's mmposenc first (a tool of a clone imports the clone's, installed or not)
sys.path.insert(0, osp.dirname(osp.dirname(osp.dirname(osp.realpath(__file__)))))
from mmposenc.utils.tools.machine import machine  # noqa: E402
CONFIGS = {
    # the paper's DETR-R50 setting
    'detr': osp.join(REPO, 'configs', 'peg_detr', 'detr-sine_r50_16xb2-50e_coco.py'),
    # the paper's Deformable-DETR-R50 setting (4 levels)
    'deformable-r50': osp.join(REPO, 'configs', 'peg_deformable_detr',
                               'deformable-detr-sine_r50_16xb2-50e_coco.py'),
    # the demo's small Deformable-DETR (half-width ResNet-18, width 128, 2+2 layers)
    'deformable': osp.join(REPO, 'configs', 'peg_deformable_detr',
                           'deformable-detr-sine_r18-half_1xb4-400i_shapes.py'),
    # the host models of issue 12, their mmdet model zoo settings
    'conditional-detr': osp.join(REPO, 'configs', 'peg_conditional_detr',
                                 'conditional-detr-sine_r50_8xb2-50e_coco.py'),
    'dab-detr': osp.join(REPO, 'configs', 'peg_dab_detr', 'dab-detr-sine_r50_8xb2-50e_coco.py'),
    'dino': osp.join(REPO, 'configs', 'peg_dino', 'dino-4scale-sine_r50_8xb2-12e_coco.py'),
    'mask2former': osp.join(REPO, 'configs', 'peg_mask2former',
                            'mask2former-sine_r50_8xb2-lsj-50e_coco.py'),
}
LABELS = {
    'detr': 'DETR-R50',
    'deformable-r50': 'Deformable-DETR-R50',
    'deformable': 'Deformable-DETR demo (R18-half)',
    'conditional-detr': 'Conditional-DETR-R50',
    'dab-detr': 'DAB-DETR-R50',
    'dino': 'DINO-4scale-R50',
    'mask2former': 'Mask2Former-R50 (COCO instance)',
}
#: the smallest input of a model: DINO selects its 900 queries among the encoder tokens (top-k),
#: so it needs at least 900 (the four levels, strides 8-64, of a 224 x 288 input have 1,343)
MIN_SIZE = {'dino': (224, 288)}
ENCODER_POS = ('sine', 'peg', 'cape')
STAGES = ('encoder', 'encoder train', 'predict', 'train step')
TARGET = 1.00  # peg / sine


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--models', nargs='+', choices=list(CONFIGS),
                        default=['detr', 'deformable-r50', 'deformable'])
    parser.add_argument('--size', type=int, nargs=2, default=[384, 480],
                        help='(h, w) of the larger image; the other is 3/4 of it (padded)')
    parser.add_argument('--repeats', type=int, default=10,
                        help='interleaved repetitions of encoder / predict (train step: half)')
    parser.add_argument('--warmup', type=int, default=1)
    parser.add_argument('--threads', type=int, default=None)
    parser.add_argument('--clock', choices=['wall', 'cpu'], default='wall')
    parser.add_argument('--quick', action='store_true',
                        help='a smoke run: 64x96 input, 2 repetitions, no warm-up')
    parser.add_argument('--out', help='also write the markdown table to this file')
    args = parser.parse_args(argv)
    if args.quick:
        args.size, args.repeats, args.warmup = [64, 96], 2, 0
    return args


def build_models(config: str, encoder_pos: Sequence[str] = ENCODER_POS) -> Dict[str, object]:
    """The detector of ``config`` once per ``encoder_pos``, all with the weights of the first
    (parameters only some of them have, the PEGs, keep their own initialisation)."""
    from mmengine.config import Config
    from mmengine.logging import MMLogger
    from mmengine.registry import init_default_scope

    import mmposenc.models.detectors  # noqa: F401
    from mmposenc.registry import MODELS
    init_default_scope('mmdet')
    cfg = Config.fromfile(config)
    cfg.model.backbone.init_cfg = None
    logger = MMLogger.get_current_instance()
    level = logger.level
    logger.setLevel('WARNING')  # mmengine logs every parameter's initialisation
    models = {}
    try:
        for pe in encoder_pos:
            mcfg = copy.deepcopy(cfg.model)
            switch_cfg(mcfg).encoder_pos = pe
            torch.manual_seed(0)
            models[pe] = MODELS.build(mcfg)
            models[pe].init_weights()
    finally:
        logger.setLevel(level)
    first = models[encoder_pos[0]]
    for pe in encoder_pos[1:]:
        models[pe].load_state_dict(first.state_dict(), strict=False)
    return models


def input_size(name: str, size: Sequence[int]) -> List[int]:
    """``size``, raised to the model's :data:`MIN_SIZE` where it is smaller."""
    low = MIN_SIZE.get(name, (0, 0))
    return [max(a, b) for a, b in zip(size, low)]


def switch_cfg(model_cfg):
    """The part of a model config that holds ``encoder_pos``: the detector, or the pixel
    decoder of a Mask2Former."""
    for head in ('panoptic_head', 'decode_head'):
        if head in model_cfg:
            return model_cfg[head].pixel_decoder
    return model_cfg


def is_mask2former(model) -> bool:
    return hasattr(model, 'panoptic_head')


def build_pair(config: str) -> Dict[str, object]:
    """``{'sine': model, 'peg': model}`` with shared weights (see :func:`build_models`)."""
    return build_models(config, ('sine', 'peg'))


def make_batch(model, size: Sequence[int]) -> dict:
    """A preprocessed batch of two images, ``size`` and 3/4 of it (so one is padded)."""
    import numpy as np
    from mmdet.testing import demo_mm_inputs
    h, w = size
    torch.manual_seed(0)
    np.random.seed(0)
    masks = is_mask2former(model)  # instance masks (and semantic maps) for its losses
    packed = demo_mm_inputs(2, image_shapes=[(3, h, w), (3, h * 3 // 4, w * 3 // 4)],
                            num_items=[3, 2], num_classes=3, with_mask=masks,
                            with_semantic=masks)
    if masks:  # the batch as it is, not padded to the 1024 x 1024 of large-scale jitter
        model.data_preprocessor.batch_augments = None
    return model.data_preprocessor(packed, True)


def stage_fns(model, data: dict) -> Dict[str, Callable[[], None]]:
    """The timed functions of one model on one batch."""
    if is_mask2former(model):
        return mask2former_stage_fns(model, data)
    with torch.no_grad():
        model.eval()
        feats = model.extract_feat(data['inputs'])
    leaf_feats = tuple(f.detach().requires_grad_() for f in feats)

    def encoder():
        model.eval()
        with torch.no_grad():
            enc, _ = model.pre_transformer(feats, data['data_samples'])
            model.forward_encoder(**enc)

    def encoder_train():
        model.train()
        model.zero_grad(set_to_none=True)
        for f in leaf_feats:
            f.grad = None
        enc, _ = model.pre_transformer(leaf_feats, data['data_samples'])
        model.forward_encoder(**enc)['memory'].sum().backward()

    def predict():
        model.eval()
        with torch.no_grad():
            model.predict(data['inputs'], copy.deepcopy(data['data_samples']))

    def train_step():
        model.train()
        model.zero_grad(set_to_none=True)
        losses = model.loss(data['inputs'], copy.deepcopy(data['data_samples']))
        sum(v for k, v in losses.items() if 'loss' in k).backward()

    return {'encoder': encoder, 'encoder train': encoder_train, 'predict': predict,
            'train step': train_step}


def mask2former_stage_fns(model, data: dict) -> Dict[str, Callable[[], None]]:
    """As :func:`stage_fns`, the "encoder" stages timing the pixel decoder (with the image
    shapes of the batch, as in the head) on fixed backbone features."""
    decoder = model.panoptic_head.pixel_decoder
    shapes = [s.img_shape for s in data['data_samples']]
    with torch.no_grad():
        model.eval()
        feats = model.extract_feat(data['inputs'])
    leaf_feats = [f.detach().requires_grad_() for f in feats]

    def run(x):
        if hasattr(decoder, 'image_shapes'):
            with decoder.image_shapes(shapes):
                return decoder(x)
        return decoder(x)

    def encoder():
        model.eval()
        with torch.no_grad():
            run(feats)

    def encoder_train():
        model.train()
        model.zero_grad(set_to_none=True)
        for f in leaf_feats:
            f.grad = None
        mask_feature, outs = run(leaf_feats)
        (mask_feature.sum() + sum(o.sum() for o in outs)).backward()

    def predict():
        model.eval()
        with torch.no_grad():
            model.predict(data['inputs'], copy.deepcopy(data['data_samples']))

    def train_step():
        model.train()
        model.zero_grad(set_to_none=True)
        torch.manual_seed(0)  # the same sampled mask points for every model
        losses = model.loss(data['inputs'], copy.deepcopy(data['data_samples']))
        sum(v for k, v in losses.items() if 'loss' in k).backward()

    return {'encoder': encoder, 'encoder train': encoder_train, 'predict': predict,
            'train step': train_step}


def interleaved(fns: Dict[str, Callable[[], None]], repeats: int, warmup: int,
                clock: Callable[[], float] = time.perf_counter) -> Dict[str, List[float]]:
    """Times of every function over ``repeats`` rounds; within a round each function runs once,
    the order rotating from round to round. ``warmup`` untimed rounds first."""
    names = list(fns)
    times = {name: [] for name in names}
    for r in range(warmup + repeats):
        shift = r % len(names)
        for name in names[shift:] + names[:shift]:
            t0 = clock()
            fns[name]()
            if r >= warmup:
                times[name].append(clock() - t0)
    return times


def paired_ratio(ours: Sequence[float], base: Sequence[float]) -> float:
    """Median over rounds of ``ours / base`` measured in the same round."""
    return statistics.median(a / b for a, b in zip(ours, base))


def bench(name: str, args) -> List[dict]:
    """Rows (one per stage) of the table for detector ``name``."""
    models = build_models(CONFIGS[name])
    size = input_size(name, args.size)
    data = make_batch(models['sine'], size)
    clock = time.process_time if args.clock == 'cpu' else time.perf_counter
    all_fns = {pe: stage_fns(model, data) for pe, model in models.items()}
    rows = []
    for stage in STAGES:
        fns = {pe: all_fns[pe][stage] for pe in models}
        repeats = max(2, args.repeats // 2) if stage == 'train step' else args.repeats
        times = interleaved(fns, repeats, args.warmup, clock)
        row = dict(model=LABELS[name], stage=stage, repeats=repeats, size=tuple(size))
        for pe in ENCODER_POS:
            row[pe] = statistics.median(times[pe]) * 1e3
        for pe in ENCODER_POS[1:]:
            row[f'{pe}/sine'] = paired_ratio(times[pe], times['sine'])
        rows.append(row)
        print(f"{row['model']:>32} {stage:>13}: " + '  '.join(
            f'{pe} {row[pe]:8.1f} ms' for pe in ENCODER_POS) +
            f"  peg/sine {row['peg/sine']:.3f}  cape/sine {row['cape/sine']:.3f}", flush=True)
    return rows


def markdown(rows: List[dict], args, argv: Optional[Sequence[str]] = None) -> str:
    h, w = args.size
    lines = [
        f'Batch: 2 images, {h}x{w} and {h * 3 // 4}x{w * 3 // 4} (padded; larger where a '
        f'model needs it: {MIN_SIZE}); {args.clock} clock; '
        'times are medians, ratios medians of per-round ratios (rounds interleave the models).',
        f'Machine: {machine()}.',
        'Command: `python tools/benchmark/peg_detr_speed.py '
        + ' '.join(argv if argv is not None else sys.argv[1:]) + '`',
        '',
        '| Model | Stage | sine (ms) | PEG (ms) | CAPE (ms) | PEG / sine | CAPE / sine '
        f'| PEG target <= {TARGET:.2f} |',
        '| :---- | :---- | --------: | -------: | --------: | ---------: | ----------: '
        '| :------: |',
    ]
    for r in rows:
        met = 'yes' if r['peg/sine'] <= TARGET else 'no'
        lines.append(f"| {r['model']} | {r['stage']} | {r['sine']:.1f} | {r['peg']:.1f} | "
                     f"{r['cape']:.1f} | {r['peg/sine']:.3f} | {r['cape/sine']:.3f} | {met} |")
    return '\n'.join(lines) + '\n'


def main(argv: Optional[Sequence[str]] = None) -> List[dict]:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    rows = []
    for name in args.models:
        rows += bench(name, args)
    table = markdown(rows, args, argv)
    print('\n' + table)
    if args.out:
        with open(args.out, 'w') as f:
            f.write(table)
    return rows


if __name__ == '__main__':
    main()
