"""Cost of the padding-exact mode (issue 20, items 1 and 3): the same backbone, or the same
shipped detector / segmentor, with and without its padding-exact mode on the same padded
batches, in one process.

Models (``--models``): ``r50`` = :class:`~mmposenc.models.detectors.PaddingExactResNet` depth 50
(the DETR configs' ResNet-50: ``frozen_stages=1``, ``norm_eval=True``), ``pvt-s`` / ``pvt-t``
= :class:`~mmposenc.models.backbones.PVTPEG` small / tiny, ``swin-t`` =
:class:`~mmposenc.models.backbones.SwinPEG` tiny, all four stages out; ``pervit-t`` =
:class:`~mmposenc.models.backbones.PerViT` tiny as the shipped PerViT detection / segmentation
configs have it (four stages resampled to strides 4 / 8 / 16 / 32), ``cpvt-s+pyramid`` =
:class:`~mmposenc.models.backbones.CPVT` small with a
:class:`~mmposenc.models.necks.SimplePyramid` (layers 2, 5, 8, 11 to strides 4 / 8 / 16 / 32,
GroupNorm: configs/cpvt/fpn_cpvt-s_8xb4-40k_ade20k-512x512.py), the pyramid given the padding
masks of CPVT's maps in the exact mode. The batch: a
480 x 640 and a 640 x 426 image padded to 640 x 640 (the sizes of the tests' COCO128 pair;
random pixels: the cost does not depend on them), or ``--size H W`` for the first image and
3/4 of it for the second.

Timed, for each model, ``stock`` (no image sizes bound: the stock backbone) against ``exact``
(the sizes bound: masking on), interleaved (stock, exact, exact, stock, ...) with the ratio
``t(exact) / t(stock)`` taken within each repetition and its median reported:

- ``forward``: eval mode, no grad (inference);
- ``train``: train mode, forward + backward of the sum of the maps (a training step's backbone
  part, without optimizer);
- ``forward, new sizes`` (PerViT only): ``forward`` with the cached Phi_p of every block
  dropped before each call, as when every batch brings new image sizes (a dataset's test
  loop): stock PerViT computes Phi_p of the padded grid, the exact mode that of each image's
  own grid. (``forward`` keeps them cached: 8 grids per block here.)

``--configs CFG ...`` times whole shipped configs instead (item 3): each config is built with
its backbone's padding-exact mode available (mmdet's ``ResNet`` as
``mmposenc.PaddingExactResNet``; ``padding_exact=True`` on PVTPEG / SwinPEG / CPVT / others that
take it), its weights initialised as a training run's (``init_weights``, without fetching
``Pretrained`` checkpoints) and pointed at COCO128 (``--data-root``, default
``../shared/data/coco128``); the same
model is then timed with the switch off (``stock``: every ``padding_exact`` attribute False,
which is the host's model bit for bit) and on (``exact``), interleaved, on the same batches:

- ``train``: ``model.train_step`` (data preprocessor, forward, loss, backward, the config's
  optimizer step) on the first ``--batches`` batches of the config's own train dataloader
  (its pipeline and batch sampler, ``--batch-size`` images, not shuffled);
- ``predict``: ``model.test_step`` (eval mode, no grad) on the first ``--batches`` batches of
  the config's test pipeline, ``--batch-size`` consecutive COCO128 images per batch (portrait
  and landscape images mixed: the padded batches that the mode is for).

mmseg configs (``default_scope='mmseg'``) are pointed at the ADE20K sample instead
(``--data-root``, default ``../shared/data/ade20k_sample/sampleData``: ``images/`` and
``annotations/``), their ``EncoderDecoder`` built as ``mmposenc.PaddingExactEncoderDecoder``
with ``mmposenc.BatchPaddingSegDataPreprocessor`` (mmseg's refuses test batches of images of
different sizes: stock and exact then see the same padded batches; ``test_cfg``
``size_divisor=1`` where the config has none: a batch padded to its largest image), mmseg's ``ResNet`` as
``mmposenc.PaddingExactResNet`` (``norm_eval=False``: mmseg's default), a ``SimplePyramid`` in
the neck list with its ``padding_exact``; mmdet's ``Mask2Former`` as
``mmposenc.PaddingExactMask2Former``. Configs that already name these keep them.

The image sizes are bound around each call by this tool too
(:func:`~mmposenc.models.padding_exact.backbone_image_shapes`): for the detectors that
bind them themselves (mmposenc's, ``PaddingExactMixin``) the same binding is made twice; for a
host detector that does not bind them yet, the row is marked ``bound by the tool`` (it is the
cost the mode will have once the detector binds, not what the config does today).

Usage::

    OMP_NUM_THREADS=1 python tools/benchmark/padding_exact_cost.py --threads 1
    python tools/benchmark/padding_exact_cost.py --threads 1 --configs \
        configs/peg_detr/detr-peg_r50_16xb2-50e_coco.py --repeats 3 --out cost.md
    OMP_NUM_THREADS=1 python tools/benchmark/padding_exact_cost.py --threads 1 --clock cpu \
        --configs configs/pvt_peg/fpn_pvt-peg-s_8xb4-40k_ade20k-512x512.py --repeats 3
    python tools/benchmark/padding_exact_cost.py --configs ... --device cuda --repeats 10
    python tools/benchmark/padding_exact_cost.py --models pvt-s --repeats 10 --out cost.md
    python tools/benchmark/padding_exact_cost.py --quick   # seconds: small input, 2 repetitions
"""
import argparse
import os
import os.path as osp
import statistics
import sys
import time
from typing import Callable, Dict, List

import torch


REPO = osp.dirname(osp.dirname(osp.dirname(osp.realpath(__file__))))
# this checkout's mmposenc first (a tool of a clone imports the clone's, installed or not)
sys.path.insert(0, osp.dirname(osp.dirname(osp.dirname(osp.realpath(__file__)))))
from mmposenc.utils.tools.machine import machine  # noqa: E402
#: Where --configs finds the ADE20K sample for mmseg configs unless told otherwise.
DEFAULT_ADE20K = osp.join(
    os.environ.get('MMPOSENC_SHARED_DATA', osp.join(osp.dirname(REPO), 'shared', 'data')),
    'ade20k_sample', 'sampleData')

MODELS = ('r50', 'pvt-s', 'pvt-t', 'swin-t', 'pervit-t', 'cpvt-s+pyramid')
LABELS = {'r50': 'ResNet-50 (PaddingExactResNet)', 'pvt-s': 'PVTPEG-S', 'pvt-t': 'PVTPEG-T',
          'swin-t': 'SwinPEG-T', 'pervit-t': 'PerViT-T',
          'cpvt-s+pyramid': 'CPVT-S + SimplePyramid'}


class BackboneWithPyramid(torch.nn.Module):
    """A stride-16 ViT and its SimplePyramid as one module: with image sizes bound for it
    (``backbone_image_shapes``), the backbone gets them and the pyramid the padding masks of
    the backbone's maps (what PaddingExactMixin does in a detector)."""

    def __init__(self, backbone, neck):
        super().__init__()
        self.backbone, self.neck = backbone, neck

    def forward(self, x):
        from mmposenc.models.padding_exact import (backbone_image_shapes, bound_image_shapes,
                                                   feature_padding_masks)
        shapes = bound_image_shapes(self, x)
        with backbone_image_shapes(self.backbone, shapes):
            feats = self.backbone(x)
        masks = None if shapes is None else feature_padding_masks(
            shapes, x.shape[-2:], [f.shape[-2:] for f in feats], device=x.device)
        return self.neck(feats, padding_masks=masks)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--models', nargs='+', choices=MODELS, default=['r50', 'pvt-s', 'swin-t'])
    parser.add_argument('--size', type=int, nargs=2, default=None,
                        help='(h, w) of the first image; the second is 3/4 of it. Default: '
                        'the 480 x 640 + 640 x 426 pair')
    parser.add_argument('--repeats', type=int, default=6)
    parser.add_argument('--warmup', type=int, default=1)
    parser.add_argument('--threads', type=int, default=None)
    parser.add_argument('--device', default='cpu')
    parser.add_argument('--quick', action='store_true',
                        help='a smoke run: 96 x 128 input, 2 repetitions, no warm-up')
    parser.add_argument('--out', help='also write the markdown table to this file')
    parser.add_argument('--clock', choices=('wall', 'cpu'), default='wall',
                        help="'cpu': the process's CPU time instead of wall time (CPU only; "
                        'steadier on a loaded machine with --threads 1)')
    parser.add_argument('--configs', nargs='+', default=None,
                        help='time these shipped detection / segmentation configs (train step '
                        'and predict) instead of the bare backbones')
    parser.add_argument('--data-root', default=None,
                        help='COCO-layout tree for --configs (default: ../shared/data/coco128); '
                        'for mmseg configs an ADE20K-layout tree with images/ and annotations/ '
                        '(default: ../shared/data/ade20k_sample/sampleData)')
    from mmengine.config import DictAction
    parser.add_argument('--cfg-options', nargs='+', action=DictAction, default={},
                        metavar='KEY=VALUE',
                        help='--configs: override config keys (after the backbone\'s exact '
                        "mode), e.g. the exact detector / neck / head of a config that "
                        "ships without them: model.type=mmposenc.PaddingExactRetinaNet")
    parser.add_argument('--keep-data', action='store_true',
                        help="--configs: the configs' own data (e.g. the demo's shapes "
                        'configs, run where their data_root is) instead of --data-root')
    parser.add_argument('--batches', type=int, default=1,
                        help='batches per timed repetition with --configs')
    parser.add_argument('--batch-size', type=int, default=2,
                        help='images per batch with --configs')
    parser.add_argument('--stages', nargs='+', choices=('train', 'predict'),
                        default=['train', 'predict'], help='what --configs times')
    args = parser.parse_args(argv)
    if args.clock == 'cpu' and args.device != 'cpu':
        parser.error('--clock cpu times CPU runs only')
    if args.quick:
        args.size, args.repeats, args.warmup = [96, 128], 2, 0
    return args


def build(name: str):
    import mmposenc.models.detectors  # noqa: F401  (PaddingExactResNet needs mmdet)
    from mmposenc.registry import MODELS as REGISTRY
    if name == 'r50':
        cfg = dict(type='mmposenc.PaddingExactResNet', depth=50, num_stages=4,
                   out_indices=(1, 2, 3), frozen_stages=1, norm_eval=True, style='pytorch',
                   norm_cfg=dict(type='BN', requires_grad=False))
    elif name == 'swin-t':
        cfg = dict(type='mmposenc.SwinPEG', arch='tiny', out_indices=(0, 1, 2, 3),
                   padding_exact=True)
    elif name == 'pervit-t':  # a Phi_p cache of 8 grids: the padded one and each image's
        cfg = dict(type='mmposenc.PerViT', arch='tiny', out_indices=(0, 1, 2, 3),
                   featmap_scales=(4, 2, 1, 0.5), ppe_cfg=dict(max_cache=8),
                   padding_exact=True)
    elif name == 'cpvt-s+pyramid':
        backbone = REGISTRY.build(dict(
            type='mmposenc.CPVT', arch='small', peg_positions=(0, 1, 2, 3, 4),
            out_type='featmap', out_indices=(2, 5, 8, 11), drop_path_rate=0.1,
            padding_exact=True))
        neck = REGISTRY.build(dict(type='mmposenc.SimplePyramid', in_channels=384,
                                   scales=(4, 2, 1, 0.5), padding_exact=True))
        return BackboneWithPyramid(backbone, neck)
    else:
        cfg = dict(type='mmposenc.PVTPEG', arch=name[-1], out_indices=(0, 1, 2, 3),
                   final_norm=False, padding_exact=True)
    return REGISTRY.build(cfg)


def batch(size, device):
    if size is None:
        shapes = [(480, 640), (640, 426)]
    else:
        h, w = size
        shapes = [(h, w), (h * 3 // 4, w * 3 // 4)]
    H, W = max(s[0] for s in shapes), max(s[1] for s in shapes)
    x = torch.zeros(len(shapes), 3, H, W, device=device)
    for i, (h, w) in enumerate(shapes):
        x[i, :, :h, :w] = torch.randn(3, h, w, device=device)
    return x, shapes


def timer(device, clock: str = 'wall') -> Callable[[Callable], float]:
    """Seconds ``fn()`` takes: wall time (CUDA synchronised), or with ``clock='cpu'`` the
    process's CPU time (CPU runs on a shared machine: other jobs' load stretches wall time,
    much less the CPU time of a one-thread run)."""
    now = time.process_time if clock == 'cpu' else time.perf_counter

    def run(fn):
        if device != 'cpu':
            torch.cuda.synchronize()
        t = now()
        fn()
        if device != 'cpu':
            torch.cuda.synchronize()
        return now() - t
    return run


def measure(name: str, args) -> Dict[str, Dict[str, float]]:
    from mmposenc.models.padding_exact import backbone_image_shapes
    model = build(name).to(args.device)
    x, shapes = batch(args.size, args.device)
    clock = timer(args.device, args.clock)

    phi_p = [m for m in model.modules() if hasattr(m, 'clear_cache')]  # PerViT's

    def call(exact: bool, train: bool, fresh: bool = False):
        def fn():
            for m in phi_p if fresh else ():
                m.clear_cache()
            with backbone_image_shapes(model, shapes if exact else None):
                if train:
                    model.train()
                    sum(o.sum() for o in model(x)).backward()
                else:
                    model.eval()
                    with torch.no_grad():
                        model(x)
        return fn

    results = {}
    stages = [('forward', False, False), ('train', True, False)]
    if phi_p:
        stages.insert(1, ('forward, new sizes', False, True))
    for stage, train, fresh in stages:
        for _ in range(args.warmup):
            call(False, train, fresh)()
            call(True, train, fresh)()
        times = {'stock': [], 'exact': []}
        ratios = []
        for r in range(args.repeats):
            order = ('stock', 'exact') if r % 2 == 0 else ('exact', 'stock')
            t = {k: clock(call(k == 'exact', train, fresh)) for k in order}
            for k in order:
                times[k].append(t[k])
            ratios.append(t['exact'] / t['stock'])
        results[stage] = dict(stock=statistics.median(times['stock']),
                              exact=statistics.median(times['exact']),
                              ratio=statistics.median(ratios))
    return results


def table(all_results, args) -> str:
    size = ('480x640 + 640x426 in 640x640' if args.size is None else
            f'{args.size[0]}x{args.size[1]} + 3/4 of it')
    lines = [f'Padding-exact backbones vs stock, batch of 2 ({size}), {args.device}; '
             f'{machine()}; median of {args.repeats} interleaved repetitions', '',
             '| backbone | stage | stock (s) | exact (s) | exact / stock |',
             '|---|---|---|---|---|']
    for name, res in all_results.items():
        for stage, r in res.items():
            lines.append(f'| {LABELS[name]} | {stage} | {r["stock"]:.3f} | {r["exact"]:.3f} '
                         f'| {r["ratio"]:.3f} |')
    return '\n'.join(lines)


#: mmdet's dense detectors and the exact classes they are timed with
#: (mmposenc/models/detectors/padding_exact_dense.py): ``(detector, {head key: exact head})``.
EXACT_DENSE = {
    'RetinaNet': ('mmposenc.PaddingExactRetinaNet',
                  {'bbox_head': 'mmposenc.PaddingExactRetinaHead'}),
    'MaskRCNN': ('mmposenc.PaddingExactMaskRCNN', {'rpn_head': 'mmposenc.PaddingExactRPNHead'}),
}


def _host_type(type_: str) -> str:
    return type_.split('.', 1)[1] if type_.startswith('mmdet.') else type_


#: mmseg's segmentor and mmdet's Mask2Former and the classes that bind the image sizes for
#: them (mmposenc/models/detectors/padding_exact_hosts.py).
EXACT_SEG = {'EncoderDecoder': 'mmposenc.PaddingExactEncoderDecoder',
             'mmseg.EncoderDecoder': 'mmposenc.PaddingExactEncoderDecoder',
             'Mask2Former': 'mmposenc.PaddingExactMask2Former',
             'mmdet.Mask2Former': 'mmposenc.PaddingExactMask2Former'}


def is_seg(cfg) -> bool:
    """An mmseg config (its data: the ADE20K layout)."""
    return cfg.get('default_scope', None) == 'mmseg'


def seg_exact_options(cfg) -> dict:
    """The part of :func:`exact_options` for mmseg's segmentors and mmdet's Mask2Former: the
    model class of :data:`EXACT_SEG`, mmseg's data preprocessor as
    ``mmposenc.BatchPaddingSegDataPreprocessor``, mmseg's ResNet keeping its
    ``norm_eval=False``, a ``SimplePyramid`` in a neck list with ``padding_exact=True``."""
    options = {}
    model = cfg.model
    if model['type'] in EXACT_SEG:
        options['model.type'] = EXACT_SEG[model['type']]
    if (model.get('data_preprocessor') or {}).get('type') in ('SegDataPreProcessor',
                                                             'mmseg.SegDataPreProcessor'):
        options['model.data_preprocessor.type'] = 'mmposenc.BatchPaddingSegDataPreprocessor'
        if not model.data_preprocessor.get('test_cfg', None):
            # a mixed batch padded to its largest image; one image stays unpadded (as mmseg's
            # without test_cfg): what the shipped exact FPN configs set
            options['model.data_preprocessor.test_cfg'] = dict(size_divisor=1)
    if is_seg(cfg) and model.backbone['type'] in ('ResNet', 'mmseg.ResNet') \
            and 'norm_eval' not in model.backbone:
        options['model.backbone.norm_eval'] = False  # mmseg's ResNet default
    necks = model.get('neck', None)
    for i, neck in enumerate(necks if isinstance(necks, (list, tuple)) else []):
        if neck['type'] in ('mmposenc.SimplePyramid', 'SimplePyramid'):
            options[f'model.neck.{i}.padding_exact'] = True
    return options


def ade_options(cfg, data_root: str) -> dict:
    """``--cfg-options`` pointing an mmseg config's train / val / test datasets at an
    ADE20K-layout tree (``images/``, ``annotations/``: the ADE20K sample).

    Raises:
        FileNotFoundError: ``data_root`` lacks ``images/`` (one line, with the path).
    """
    if not osp.isdir(osp.join(data_root, 'images')):
        raise FileNotFoundError(f'{data_root}/images not found: pass --data-root, an ADE20K '
                                'tree with images/ and annotations/ (e.g. '
                                '../shared/data/ade20k_sample/sampleData)')
    options = {}
    for name in ('train_dataloader', 'val_dataloader', 'test_dataloader'):
        if not cfg.get(name, None):
            continue
        key, ds = f'{name}.dataset', cfg[name]['dataset']
        while 'dataset' in ds:  # wrappers
            key, ds = f'{key}.dataset', ds['dataset']
        options[f'{key}.data_root'] = data_root
        options[f'{key}.data_prefix'] = dict(img_path='images', seg_map_path='annotations')
    return options


def exact_options(cfg) -> dict:
    """``--cfg-options`` giving the config's model its padding-exact mode (built on; the
    timing switches it off and on): mmdet's ResNet becomes ``mmposenc.PaddingExactResNet``
    (same parameters and state dict), other backbones get ``padding_exact=True``; an mmdet
    ``RetinaNet`` / ``MaskRCNN`` (a config that does not ship the exact classes) becomes
    ``mmposenc.PaddingExactRetinaNet`` / ``PaddingExactMaskRCNN`` with ``mmposenc.MaskedFPN``
    (in a list ``neck=[...]``: the FPN, and a ``SimplePyramid`` before it with
    ``padding_exact=True``) and the exact dense head (same state dicts)."""
    backbone = cfg.model.get('backbone', None)
    if backbone is None:
        raise ValueError('the config has no model.backbone')
    if backbone['type'] in ('ResNet', 'mmdet.ResNet', 'mmposenc.PaddingExactResNet'):
        options = {'model.backbone.type': 'mmposenc.PaddingExactResNet',
                   'model.backbone.padding_exact': True}
    else:
        options = {'model.backbone.padding_exact': True}
    options.update(seg_exact_options(cfg))
    dense = EXACT_DENSE.get(_host_type(cfg.model['type']))
    if dense is None:
        return options
    options['model.type'], heads = dense
    for key, head in heads.items():
        options[f'model.{key}.type'] = head
    necks = cfg.model.get('neck', None)
    necks = [dict(n) for n in (necks if isinstance(necks, (list, tuple)) else [necks])]
    for neck in necks:
        if _host_type(neck['type']) == 'FPN':
            neck['type'] = 'mmposenc.MaskedFPN'
        elif neck['type'] == 'mmposenc.SimplePyramid':
            neck['padding_exact'] = True
    options['model.neck'] = necks if isinstance(cfg.model['neck'], (list, tuple)) else necks[0]
    return options


def first_batches(runner, loader_cfg, n: int, batch_size: int, mixed: bool) -> list:
    """The first ``n`` batches of the loader: not shuffled, no workers; ``mixed`` drops the
    config's batch sampler (consecutive images, portrait and landscape in one batch)."""
    import copy
    cfg = copy.deepcopy(loader_cfg)
    cfg.update(batch_size=batch_size, num_workers=0, persistent_workers=False,
               sampler=dict(type='DefaultSampler', shuffle=False))
    if mixed:
        cfg.pop('batch_sampler', None)
    loader = runner.build_dataloader(cfg, seed=0)
    out = []
    for data in loader:
        out.append(data)
        if len(out) == n:
            break
    return out


def init_weights_offline(model: torch.nn.Module) -> List[str]:
    """``model.init_weights()`` with every ``'Pretrained'`` ``init_cfg`` dropped first (nothing
    is downloaded; the timings do not depend on the weights). Without it some hosts' weights are
    uninitialised memory: mmdet's Deformable-DETR makes ``level_embed`` with ``torch.Tensor``
    and fills it only in ``init_weights``, so it could hold NaN and the loss with it.

    Returns:
        list[str]: The checkpoints that were dropped.
    """
    from mmposenc.utils.tools.runner import drop_pretrained
    from mmengine.model import BaseModule
    dropped = []
    for module in model.modules():
        if isinstance(module, BaseModule) and module.init_cfg:
            holder = dict(init_cfg=module.init_cfg)
            dropped += drop_pretrained(holder)
            module.init_cfg = holder['init_cfg']
    model.init_weights()
    bad = [n for n, p in model.named_parameters() if not torch.isfinite(p).all()]
    if bad:
        raise RuntimeError(f'non-finite weights after init_weights: {bad[:5]}')
    return dropped


def measure_config(config: str, args) -> Dict[str, Dict[str, float]]:
    """Train step and predict of one shipped config, padding-exact off vs on (module doc)."""
    import tempfile
    from mmposenc.utils.tools.coco128 import DEFAULT_COCO128, load_runner, set_padding_exact
    from mmposenc.utils.tools.runner import load_config
    from mmposenc.models.padding_exact import backbone_image_shapes

    cfg = load_config(config)
    options = exact_options(cfg)
    if options.get('model.type', '').startswith('mmposenc.PaddingExact'):
        import mmposenc.models.detectors  # noqa: F401  (the exact classes; needs mmdet)
    data_root = None if args.keep_data else args.data_root or DEFAULT_COCO128
    if is_seg(cfg):  # pointed at the ADE20K sample by the options
        if not args.keep_data:
            options.update(ade_options(cfg, args.data_root or DEFAULT_ADE20K))
        data_root = None
    options.update(args.cfg_options)
    with tempfile.TemporaryDirectory() as tmp:
        runner = load_runner(config, tmp, data_root, cfg_options=options, device=args.device)
    model = runner.model
    init_weights_offline(model)
    # PaddingExactMixin and PaddingExactEncoderDecoder bind the image sizes themselves
    binds = hasattr(model, 'feature_padding_masks') or hasattr(model, '_image_shapes')
    clock = timer(args.device, args.clock)
    results = {}
    for stage in args.stages:
        train = stage == 'train'
        torch.manual_seed(0)
        loader_cfg = runner.cfg.train_dataloader if train else runner.cfg.test_dataloader
        batches = first_batches(runner, loader_cfg, args.batches, args.batch_size,
                                mixed=not train)
        padded = sum(
            any(tuple(s.img_shape[:2]) != tuple(d['inputs'].shape[-2:])
                for s in d['data_samples'])
            for d in (model.data_preprocessor(b, train) for b in batches))
        optim_wrapper = runner.build_optim_wrapper(runner.cfg.optim_wrapper) if train else None

        def call(exact: bool):
            def fn():
                set_padding_exact(model, exact)
                for data in batches:
                    # the sizes the detector binds itself (or does not yet: marked)
                    shapes = [s.img_shape[:2] for s in data['data_samples']]
                    with backbone_image_shapes(model.backbone, shapes if exact else None):
                        if train:
                            model.train()
                            model.train_step(data, optim_wrapper)
                        else:
                            model.eval()
                            with torch.no_grad():
                                model.test_step(data)
            return fn

        for _ in range(args.warmup):
            call(False)()
            call(True)()
        times = {'stock': [], 'exact': []}
        ratios = []
        for r in range(args.repeats):
            order = ('stock', 'exact') if r % 2 == 0 else ('exact', 'stock')
            t = {k: clock(call(k == 'exact')) for k in order}
            for k in order:
                times[k].append(t[k])
            ratios.append(t['exact'] / t['stock'])
        sizes = sorted({tuple(s.img_shape[:2]) for b in batches
                        for s in model.data_preprocessor(b, train)['data_samples']})
        results[stage] = dict(stock=statistics.median(times['stock']),
                              exact=statistics.median(times['exact']),
                              ratio=statistics.median(ratios), bound_by_tool=not binds,
                              padded=f'{padded}/{len(batches)}', sizes=sizes, ratios=ratios)
    set_padding_exact(model, True)
    return results


def config_table(all_results, args) -> str:
    lines = [f'Shipped configs, padding-exact off (stock) vs on, {args.batches} batch(es) of '
             f'{args.batch_size} images per repetition, {args.device}, {args.clock} time; '
             f'{machine()}; median of {args.repeats} interleaved repetitions', '',
             '| config | stage | padded batches | stock (s) | exact (s) | exact / stock | '
             'image sizes | per repetition |', '|---|---|---|---|---|---|---|---|']
    for config, res in all_results.items():
        name = osp.splitext(osp.basename(config))[0]
        for stage, r in res.items():
            mark = ' (bound by the tool)' if r['bound_by_tool'] else ''
            sizes = ', '.join(f'{h}x{w}' for h, w in r['sizes'])
            lines.append(f'| {name}{mark} | {stage} | {r["padded"]} | {r["stock"]:.3f} | '
                         f'{r["exact"]:.3f} | {r["ratio"]:.3f} | {sizes} | '
                         f'{" ".join(f"{x:.3f}" for x in r["ratios"])} |')
    return '\n'.join(lines)


def main(argv=None) -> List[str]:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    if args.configs:
        results = {}
        for config in args.configs:
            results[config] = measure_config(config, args)
            print(config_table({config: results[config]}, args).splitlines()[-1], flush=True)
        text = config_table(results, args)
    else:
        results = {name: measure(name, args) for name in args.models}
        text = table(results, args)
    print(text)
    if args.out:
        with open(args.out, 'w') as f:
            f.write(text + '\n')
    return text


if __name__ == '__main__':
    main()
