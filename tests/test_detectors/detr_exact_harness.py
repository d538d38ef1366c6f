"""A shipped DETR-family config, alone vs batched, end to end (issue 20, item 2).

The config is loaded by path and built as it is, except (where asked) the backbone and the
widths: two real COCO128 images of different shapes (480 x 640 and 640 x 426) go through the
config's own test pipeline and data preprocessor, alone and as one padded batch, with random
weights and trained-like norms (random affine parameters, BatchNorm statistics measured on the
images, non-zero residual norms: freshly initialised norms keep the padding zero through a CNN
and hide the border effects). The final ``predict`` scores and boxes (pixels) are compared.

Run as a script for the full-size numbers::

    OMP_NUM_THREADS=1 python tests/test_detectors/detr_exact_harness.py CONFIG [--tiny]
        [--stock-backbone] [--double] [--scale W H]
"""
import copy
import os
import os.path as osp
import sys

import torch
from torch import nn

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
IMAGES = ('000000000009.jpg', '000000000404.jpg')  # 480 x 640 and 640 x 426


def load_cfg(path, exact_backbone=True, tiny=False, scale=None):
    """The config at ``path``, its backbone in padding-exact mode or not (``exact_backbone``;
    mmdet's ResNet becomes :class:`~mmposenc.models.detectors.PaddingExactResNet`, whose
    ``padding_exact=False`` is mmdet's ResNet); ``tiny`` shrinks the widths (a quarter-wide
    ResNet-18, PVTPEG of one block per stage and widths 32-256, one encoder and one decoder
    layer, FFNs of 64) keeping everything else; ``scale`` (``(w, h)``), if given, replaces
    the ``Resize`` scale of the test pipeline (``keep_ratio`` stays the config's)."""
    from mmengine.config import Config

    import mmposenc  # noqa: F401  (mmdet:: bases)
    cfg = Config.fromfile(path)
    if scale is not None:
        resizes = [t for t in cfg.test_dataloader.dataset.pipeline if t['type'] == 'Resize']
        if len(resizes) != 1:
            raise ValueError(f'{path}: --scale needs one Resize in the test pipeline, '
                             f'found {len(resizes)}; run without --scale')
        resizes[0]['scale'] = tuple(scale)
    model = cfg.model
    backbone = model.backbone
    backbone.pop('init_cfg', None)  # no pretrained download
    if backbone.type in ('ResNet', 'mmdet.ResNet'):
        backbone.type = 'mmposenc.PaddingExactResNet'  # padding_exact=False: mmdet's ResNet
    backbone.padding_exact = exact_backbone
    if tiny:
        if 'ResNet' in backbone.type:  # a quarter-wide ResNet-18
            backbone.update(depth=18, base_channels=16)
            widths = [16 * 2**i for i in range(4)]
        else:  # PVTPEG: one block per stage
            backbone.arch = dict(embed_dims=[32, 64, 128, 256], num_heads=[1, 2, 4, 8],
                                 mlp_ratios=[2, 2, 2, 2], depths=[1, 1, 1, 1],
                                 sr_ratios=[8, 4, 2, 1])
            widths = backbone.arch['embed_dims']
        out = backbone.out_indices
        model.neck.in_channels = [widths[i] for i in ((out, ) if isinstance(out, int) else out)]
        for part in ('encoder', 'decoder'):
            model[part].num_layers = 1
            model[part].layer_cfg.ffn_cfg.feedforward_channels = 64
    return cfg


def pack_images(cfg, root, names=IMAGES):
    """The images through the config's test pipeline (no annotations needed)."""
    from mmengine.dataset import Compose
    from mmengine.registry import init_default_scope
    init_default_scope('mmdet')
    pipeline = Compose(copy.deepcopy(cfg.test_dataloader.dataset.pipeline))
    return [
        pipeline(dict(img_path=osp.join(root, 'train2017', name), img_id=i, instances=[]))
        for i, name in enumerate(names)
    ]


def trained_like(model, inputs, samples, seed=0):
    """Random norm affine parameters, BatchNorm statistics measured on ``inputs`` then
    shifted, as training leaves them (see tests/test_backbones/test_padding_exact.py)."""
    gen = torch.Generator().manual_seed(seed)
    norms = (nn.BatchNorm2d, nn.LayerNorm, nn.GroupNorm)
    bns = [m for m in model.modules() if isinstance(m, nn.BatchNorm2d)]
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, norms) and m.weight is not None:
                m.weight.uniform_(0.5, 1.5, generator=gen)
                m.bias.normal_(0, 0.5, generator=gen)
        for m in bns:
            m.reset_running_stats()
            m.momentum = None
            m.train()
        if bns:
            model.extract_feat(inputs, samples)
        for m in bns:
            m.running_mean.add_(torch.randn(m.num_features, generator=gen) * 0.1)
            m.running_var.mul_(torch.empty(m.num_features).uniform_(0.8, 1.25, generator=gen))
    return model.eval()


def build_model(cfg, packed, seed=0, dtype=torch.float32):
    """The config's model (random weights, trained-like norms) and its preprocessor."""
    import logging

    from mmdet.registry import MODELS
    from mmengine.logging import MMLogger
    torch.manual_seed(seed)
    model = MODELS.build(cfg.model)
    logger = MMLogger.get_current_instance()
    level = logger.level
    logger.setLevel(logging.WARNING)  # init_weights logs every parameter
    try:
        model.init_weights()
    finally:
        logger.setLevel(level)
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():  # mmdet zero-initialises the deformable sampling offsets and
        for p in model.parameters():  # attention weights and the last box layers: make them
            if p.dim() > 1 and not p.any():  # matter (else every box is its anchor)
                p.normal_(0, 0.01, generator=gen)
    data = preprocess(model, packed)
    trained_like(model, data['inputs'], data['data_samples'], seed)
    return model.to(dtype)


def preprocess(model, packed):
    return model.data_preprocessor(
        dict(inputs=[p['inputs'] for p in packed],
             data_samples=[copy.deepcopy(p['data_samples']) for p in packed]), False)


def predict(model, packed, dtype=torch.float32):
    data = preprocess(model, packed)
    with torch.no_grad():
        return model.predict(data['inputs'].to(dtype), data['data_samples'])


def compare(alone, batched, tol=1e-4):
    """Largest score difference (sorted scores) and largest box difference (pixels) between
    two ``pred_instances``: each detection of ``alone`` above the last kept score (+ ``tol``:
    detections at the top-k border may swap in or out) is matched to the detection of
    ``batched`` with its label, a score within ``tol`` and the nearest box."""
    sa, sb = alone.scores.double(), batched.scores.double()
    scores = (sa - sb).abs().max().item()
    keep = sa > max(sa[-1].item(), sb[-1].item()) + tol
    close = ((sa[keep, None] - sb[None]).abs() <= tol) & (
        alone.labels[keep, None] == batched.labels[None])
    dist = (alone.bboxes[keep, None].double() - batched.bboxes[None].double()).abs().amax(-1)
    dist = dist.masked_fill(~close, float('inf'))
    boxes = dist.min(1).values.max().item() if keep.any() else 0.
    return scores, boxes


def predict_alone(model, packed, dtype=torch.float32):
    """Each image's predictions alone (a batch of one: nothing padded)."""
    return [predict(model, [p], dtype)[0] for p in packed]


def alone_vs_batched(model, packed, dtype=torch.float32, alone=None):
    """(largest score difference, largest box difference in pixels) over the images;
    ``alone``: the images' predictions alone, if already computed (:func:`predict_alone`)."""
    batched = predict(model, packed, dtype)
    alone = predict_alone(model, packed, dtype) if alone is None else alone
    diffs = [compare(a.pred_instances, b.pred_instances) for a, b in zip(alone, batched)]
    return max(d[0] for d in diffs), max(d[1] for d in diffs)


def main(argv):
    import argparse
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('config')
    parser.add_argument('--tiny', action='store_true')
    parser.add_argument('--stock-backbone', action='store_true')
    parser.add_argument('--double', action='store_true')
    parser.add_argument('--scale', type=int, nargs=2, metavar=('W', 'H'),
                        help="the test pipeline's Resize scale (default: the config's)")
    parser.add_argument('--root', default=os.environ.get(
        'COCO128', osp.join(osp.dirname(REPO), 'shared', 'data', 'coco128')))
    args = parser.parse_args(argv)
    cfg = load_cfg(args.config, exact_backbone=not args.stock_backbone, tiny=args.tiny,
                   scale=args.scale)
    packed = pack_images(cfg, args.root)
    dtype = torch.float64 if args.double else torch.float32
    model = build_model(cfg, packed, dtype=dtype)
    shapes = [tuple(p['data_samples'].img_shape) for p in packed]
    scores, boxes = alone_vs_batched(model, packed, dtype)
    print(f'{osp.basename(args.config)} {shapes} scores {scores:.3g} boxes {boxes:.3g} px')


if __name__ == '__main__':
    main(sys.argv[1:])
