"""Speed of the masked PEG against the sine encoding inside DETR / Deformable-DETR.

Builds the same detector twice, ``encoder_pos='peg'`` and ``encoder_pos='sine'`` (shared
weights where both have them), feeds both the same padded batch and reports, measured in this
one process, the median time of

- the encoder path: ``pre_transformer`` + ``forward_encoder`` (no grad), which is where the
  PEG replaces the sine computation;
- a full training step: forward with losses, backward (no optimizer step).

as ``peg / sine`` ratios (< 1 means the PEG model is faster)::

    python tools/benchmark/peg_detr_speed.py                      # both detectors
    python tools/benchmark/peg_detr_speed.py --model deformable --repeats 20 --size 512 640
"""
import argparse
import copy
import os.path as osp
import statistics
import time

import torch

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
CONFIGS = {
    # the demo's small Deformable-DETR (half-width ResNet-18, width 128, 2+2 layers)
    'deformable': osp.join(REPO, 'configs', 'peg_deformable_detr',
                           'deformable-detr-sine_r18-half_1xb4-400i_shapes.py'),
    # the paper's DETR-R50 setting
    'detr': osp.join(REPO, 'configs', 'peg_detr', 'detr-sine_r50_16xb2-50e_coco.py'),
}


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--model', choices=['detr', 'deformable', 'both'], default='both')
    parser.add_argument('--size', type=int, nargs=2, default=[384, 480],
                        help='(h, w) of the larger image; the other is 3/4 of it (padded)')
    parser.add_argument('--repeats', type=int, default=10)
    parser.add_argument('--warmup', type=int, default=2)
    parser.add_argument('--threads', type=int, default=None)
    return parser.parse_args()


def build_pair(config):
    from mmengine.config import Config
    from mmengine.registry import init_default_scope

    import mmposenc.models.detectors  # noqa: F401
    from mmposenc.registry import MODELS
    init_default_scope('mmdet')
    cfg = Config.fromfile(config)
    cfg.model.backbone.init_cfg = None
    models = {}
    for pe in ('sine', 'peg'):
        mcfg = copy.deepcopy(cfg.model)
        mcfg.encoder_pos = pe
        torch.manual_seed(0)
        models[pe] = MODELS.build(mcfg)
        models[pe].init_weights()
    models['peg'].load_state_dict(models['sine'].state_dict(), strict=False)
    return models


def make_batch(model, size):
    from mmdet.testing import demo_mm_inputs
    h, w = size
    packed = demo_mm_inputs(2, image_shapes=[(3, h, w), (3, h * 3 // 4, w * 3 // 4)],
                            num_items=[3, 2], num_classes=3)
    return model.data_preprocessor(packed, True)


def timeit(fn, repeats, warmup):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def bench(name, config, args):
    models = build_pair(config)
    data = make_batch(models['sine'], args.size)
    results = {}
    for pe, model in models.items():
        model.train()
        with torch.no_grad():
            feats = model.extract_feat(data['inputs'])

        def encoder(model=model, feats=feats):
            with torch.no_grad():
                enc, _ = model.pre_transformer(feats, data['data_samples'])
                model.forward_encoder(**enc)

        def train_step(model=model):
            model.zero_grad(set_to_none=True)
            losses = model.loss(data['inputs'], copy.deepcopy(data['data_samples']))
            sum(v for k, v in losses.items() if 'loss' in k).backward()

        results[pe] = (timeit(encoder, args.repeats, args.warmup),
                       timeit(train_step, max(3, args.repeats // 2), 1))
    (enc_s, step_s), (enc_p, step_p) = results['sine'], results['peg']
    print(f'{name:>10} | encoder sine {enc_s * 1e3:8.1f} ms  peg {enc_p * 1e3:8.1f} ms  '
          f'ratio {enc_p / enc_s:5.3f} | train step sine {step_s * 1e3:8.1f} ms  '
          f'peg {step_p * 1e3:8.1f} ms  ratio {step_p / step_s:5.3f}')
    return results


def main():
    args = parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f'batch: 2 images, {tuple(args.size)} and 3/4 of it (padded); '
          f'median of {args.repeats}; torch {torch.__version__}, '
          f'{torch.get_num_threads()} threads')
    names = ['detr', 'deformable'] if args.model == 'both' else [args.model]
    for name in names:
        bench(name, CONFIGS[name], args)


if __name__ == '__main__':
    main()
