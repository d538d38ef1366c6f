"""RetinaNet and Mask R-CNN exact end to end on padded batches (issue 20, items 2 and 3).

The shipped configs, loaded by path and narrowed (widths, depths: CPU time), on two COCO128
images through the config's test pipeline (800 x 1067 and 1202 x 800, batched to 1216 x 1088):

- shipped exact (on by default): ``configs/swin_peg/retinanet_swin-peg-t-p4-w7_fpn_1x_coco.py``
  and ``configs/cpvt/mask-rcnn_cpvt-s_fpn_1x_coco.py``, as they are (the narrowing changes no
  class): each image gets the same boxes, scores, labels (and masks) alone and batched; with
  mmdet's classes it does not, each exact part left out breaks it, and the user's one line
  ``model = dict(padding_exact=False)`` is mmdet's classes bit for bit;
- shipped with mmdet's classes (their cost is above 3 %):
  ``configs/pvt_peg/retinanet_pvt-peg-t_fpn_1x_coco.py`` and
  ``configs/swin_peg/mask-rcnn_swin-peg-t-p4-w7_fpn_1x_coco.py`` with the exact classes their
  READMEs give: the same alone and batched.
"""
import copy

import pytest
import torch
from norm_utils import config_types
from torch import nn

pytest.importorskip('mmdet')

import mmposenc.models.detectors  # noqa: E402,F401  (the exact classes)

#: on by default (the switch's tests run on these)
RETINANET = 'configs/swin_peg/retinanet_swin-peg-t-p4-w7_fpn_1x_coco.py'
MASK_RCNN = 'configs/cpvt/mask-rcnn_cpvt-s_fpn_1x_coco.py'
#: off by default, turned on as their READMEs say
RETINANET_PVT = 'configs/pvt_peg/retinanet_pvt-peg-t_fpn_1x_coco.py'
MASK_RCNN_SWIN = 'configs/swin_peg/mask-rcnn_swin-peg-t-p4-w7_fpn_1x_coco.py'
COCO_IMAGES = ('000000000009.jpg', '000000000404.jpg')  # 480 x 640, 640 x 426
DIMS = 32
#: per detector: (the exact class, mmdet's), per part {exact: mmdet's}
CLASSES = dict(
    retinanet=dict(type=('mmposenc.PaddingExactRetinaNet', 'RetinaNet'),
                   neck=('mmposenc.MaskedFPN', 'FPN'),
                   head=('mmposenc.PaddingExactRetinaHead', 'RetinaHead')),
    mask_rcnn=dict(type=('mmposenc.PaddingExactMaskRCNN', 'MaskRCNN'),
                   neck=('mmposenc.MaskedFPN', 'FPN'),
                   head=('mmposenc.PaddingExactRPNHead', 'RPNHead')))


def narrowed(path, exact):
    """The shipped config, narrowed; ``exact``: the exact parts, each set on or to mmdet's
    class whatever the config ships (``'backbone'``: its ``padding_exact``, and a
    SimplePyramid's; ``'host'``: the detector; ``'neck'``: the FPN; ``'head'``: the dense
    head; ``'roi'``: Mask R-CNN's edge-padded RoI reads)."""
    from mmengine.config import Config
    cfg = Config.fromfile(path)
    model = cfg.model
    model.backbone.init_cfg = None
    necks = model.neck if isinstance(model.neck, list) else [model.neck]
    fpn = necks[-1]
    if model.backbone.type == 'mmposenc.PVTPEG':
        model.backbone.arch = dict(embed_dims=[16, 32, 64, 128], num_heads=[1, 2, 4, 8],
                                   mlp_ratios=[2, 2, 2, 2], depths=[1, 1, 1, 1],
                                   sr_ratios=[8, 4, 2, 1])
        fpn.in_channels = [16, 32, 64, 128]
    elif model.backbone.type == 'mmposenc.SwinPEG':
        model.backbone.arch = dict(embed_dims=16, depths=[2, 2, 2, 2], num_heads=[1, 1, 2, 2])
        fpn.in_channels = [16, 32, 64, 128][-len(fpn.in_channels):]
    else:  # CPVT (+ SimplePyramid): four layers, each one output
        model.backbone.update(arch=dict(embed_dims=DIMS, num_layers=4, num_heads=2,
                                        feedforward_channels=2 * DIMS),
                              out_indices=(0, 1, 2, 3), peg_positions=(0, 1, 2, 3))
        necks[0].in_channels = DIMS
        fpn.in_channels = [DIMS] * 4
    fpn.out_channels = DIMS
    if 'bbox_head' in model:  # RetinaNet
        kind, head = 'retinanet', model.bbox_head
        head.update(in_channels=DIMS, feat_channels=DIMS, stacked_convs=2, num_classes=8)
    else:
        kind, head = 'mask_rcnn', model.rpn_head
        head.update(in_channels=DIMS, feat_channels=DIMS)
        roi = model.roi_head
        roi.bbox_roi_extractor.out_channels = DIMS
        roi.bbox_head.update(in_channels=DIMS, fc_out_channels=2 * DIMS)
        roi.mask_roi_extractor.out_channels = DIMS
        roi.mask_head.update(in_channels=DIMS, conv_out_channels=DIMS, num_convs=2)
    classes = CLASSES[kind]
    model.backbone.padding_exact = 'backbone' in exact
    for neck in necks[:-1]:  # SimplePyramid: the backbone's stride-16 maps to a pyramid
        neck.padding_exact = 'backbone' in exact
    model.type = classes['type']['host' not in exact]
    fpn.type = classes['neck']['neck' not in exact]
    head.type = classes['head']['head' not in exact]
    if kind == 'mask_rcnn' and 'host' in exact:
        model.edge_pad_rois = 'roi' in exact
    return cfg


def build(cfg):
    from mmdet.registry import MODELS
    from mmengine.registry import init_default_scope
    init_default_scope('mmdet')
    torch.manual_seed(0)
    model = MODELS.build(cfg.model)
    model.init_weights()
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():  # trained-like: random norm affine parameters and conv biases
        for m in model.modules():
            if isinstance(m, (nn.LayerNorm, nn.GroupNorm, nn.BatchNorm2d)):
                m.weight.uniform_(0.5, 1.5, generator=gen)
                m.bias.normal_(0, 0.5, generator=gen)
            elif isinstance(m, nn.Conv2d) and m.bias is not None:
                m.bias.normal_(0, 0.1, generator=gen)
        if hasattr(model, 'roi_head'):  # decisive class scores: detections above score_thr
            model.roi_head.bbox_head.fc_cls.weight.normal_(0, 0.3, generator=gen)
    return model.eval()


@pytest.fixture(scope='module')
def packed(coco128_root):
    from mmengine.config import Config
    from mmengine.dataset import Compose
    from mmengine.registry import init_default_scope
    init_default_scope('mmdet')
    cfg = Config.fromfile(RETINANET)
    pipeline = Compose([t for t in cfg.test_pipeline if t['type'] != 'LoadAnnotations'])
    out = [pipeline(dict(img_path=f'{coco128_root}/train2017/{name}', img_id=i))
           for i, name in enumerate(COCO_IMAGES)]
    assert [tuple(p['data_samples'].img_shape) for p in out] == [(800, 1067), (1202, 800)]
    return out


def predict(model, items):
    """The detections, and for Mask R-CNN the RPN's proposals (those its ``predict`` passes
    to the RoI heads, kept on the way), of the batch of ``items``."""
    data = model.data_preprocessor(
        dict(inputs=[p['inputs'] for p in items],
             data_samples=[copy.deepcopy(p['data_samples']) for p in items]), False)
    if not hasattr(model, 'rpn_head'):
        with torch.no_grad():
            return model.predict(data['inputs'], data['data_samples']), None
    rpn_predict, proposals = model.rpn_head.predict, []

    def keep(*args, **kwargs):
        proposals.append(rpn_predict(*args, **kwargs))
        return proposals[-1]
    model.rpn_head.predict = keep
    try:
        with torch.no_grad():
            results = model.predict(data['inputs'], data['data_samples'])
    finally:
        del model.rpn_head.predict
    assert len(proposals) == 1
    return results, [p.clone() for p in proposals[0]]


def by_score(instances):
    return instances[instances.scores.argsort(descending=True, stable=True)]


def aligned(a, b, score_tol=1e-4):
    """``b`` reordered to pair each detection of ``a`` (by descending score) with the unpaired
    detection of ``b`` of the same label, a score within ``score_tol`` and the nearest box; None
    where one has no partner.

    "The same detections" are the same set: two detections whose scores differ by float
    rounding (measured on AVX2 kernels: 0.74586499 / 0.74586445 alone, 0.74586517 /
    0.74586439 batched, boxes 127 px apart) may come in either order, so matching by rank
    alone would compare each with the other.
    """
    a, free = by_score(a), list(range(len(b)))
    if len(a) != len(b):
        return a, None
    order = []
    for i in range(len(a)):
        cands = [j for j in free if b.labels[j] == a.labels[i]
                 and abs(float(b.scores[j] - a.scores[i])) <= score_tol]
        if not cands:
            return a, None
        j = min(cands, key=lambda j: float((b.bboxes[j] - a.bboxes[i]).abs().max()))
        free.remove(j)
        order.append(j)
    return a, b[order]


def set_distance(a, b):
    """The largest |coordinate difference| (px) between a box of ``a`` and the nearest box of
    ``b``, both ways: the RPN's proposals as a set (among proposals of equal scores their
    order is arbitrary; random weights give many)."""
    dist = torch.cdist(a, b, p=float('inf'))
    return max(dist.min(1).values.max().item(), dist.min(0).values.max().item())


def proposal_distance(a, b, score_tol=1e-4):
    """:func:`set_distance` of two images' RPN proposals above their cut: the RPN keeps its
    top ``max_per_img`` after NMS, and proposals whose scores lie within ``score_tol`` of the
    lowest kept one may fall either side of that cut when scores differ by float rounding
    (measured with one thread on AVX2 kernels: 4 px as sets, detections unchanged)."""
    cut = max(float(a.scores.min()), float(b.scores.min())) + score_tol
    return set_distance(a.bboxes[a.scores > cut], b.bboxes[b.scores > cut])


def alone_vs_batched(model, items, batched=None):
    """Largest |score| and |box| (px) differences and number of differing mask pixels of the
    detections (paired as sets, :func:`aligned`), and the :func:`set_distance` of the RPN's
    proposals (Mask R-CNN), alone vs batched (``batched``: ``predict(model, items)`` if
    already computed); inf where the detections differ."""
    batched, batched_proposals = batched or predict(model, items)
    scores = boxes = pixels = proposals = 0.
    for i in range(len(items)):
        alone, alone_proposals = predict(model, items[i:i + 1])
        a, b = aligned(alone[0].pred_instances, batched[i].pred_instances)
        assert len(a) > 0, 'no detections: nothing compared'
        if b is None:
            return float('inf'), float('inf'), float('inf'), float('inf')
        scores = max(scores, (a.scores - b.scores).abs().max().item())
        boxes = max(boxes, (a.bboxes - b.bboxes).abs().max().item())
        if 'masks' in a:
            pixels += (a.masks != b.masks).sum().item()
        if alone_proposals is not None:
            proposals = max(proposals, proposal_distance(alone_proposals[0],
                                                         batched_proposals[i]))
    return scores, boxes, pixels, proposals


ALL = ('backbone', 'host', 'neck', 'head', 'roi')


@pytest.fixture(scope='module')
def stock(packed):
    """path -> (the narrowed config's model with mmdet's classes, the backbone (and pyramid)
    stock; its predictions on the batch), built on first use: the 'all' case of
    test_fails_without_each_part and the reference of test_model_switch_off_is_mmdet_bit_for_bit
    share it."""
    cache = {}

    def get(path):
        if path not in cache:
            model = build(narrowed(path, ()))
            cache[path] = model, predict(model, packed)
        return cache[path]
    return get


@pytest.mark.parametrize('path', [RETINANET, MASK_RCNN, RETINANET_PVT, MASK_RCNN_SWIN],
                         ids=['retinanet', 'mask_rcnn', 'retinanet_pvt', 'mask_rcnn_swin'])
def test_alone_equals_batched(packed, path):
    """Scores <= 1e-4, boxes <= 0.01 px, masks equal, proposals <= 0.01 px (measured
    2026-12-07 with -s: scores <= 1.6e-6 on AVX-512 and 2.5e-6 on AVX2 kernels, boxes and
    proposals <= 1.2e-4 px, masks equal).
    The configs shipped exact run as shipped: the narrowing changes no class."""
    from mmengine.config import Config
    cfg = narrowed(path, ALL)
    if path in (RETINANET, MASK_RCNN):
        shipped = Config.fromfile(path)
        shipped.model.backbone.init_cfg = None
        assert sorted(filter(None, config_types(cfg.model))) == sorted(
            filter(None, config_types(shipped.model)))
    scores, boxes, pixels, proposals = alone_vs_batched(build(cfg), packed)
    print(path, scores, boxes, pixels, proposals)
    assert scores <= 1e-4 and boxes <= 1e-2 and pixels == 0 and proposals <= 1e-2, (
        scores, boxes, pixels, proposals)


@pytest.mark.parametrize('path,missing', [
    (RETINANET_PVT, 'all'), (RETINANET_PVT, 'neck'), (RETINANET_PVT, 'head'),
    (MASK_RCNN, 'all'), (MASK_RCNN, 'neck'), (MASK_RCNN, 'roi')])
def test_fails_without_each_part(packed, stock, path, missing):
    """With mmdet's classes ('all': the backbone stock too) and with one exact part left
    out (the backbone's own mode: tests/test_backbones/test_padding_exact.py). The dense
    heads' mixin is shown needed on RetinaHead (its stacked 3x3 convolutions read what the
    previous one left in the padding: scores 9e-4, boxes 246 px apart as sets). Mask R-CNN's
    RPNHead left stock changes nothing measurable on these images (detections 3e-7, proposals
    6e-5 px as sets, Swin and CPVT alike): its one 3x3 convolution reads the zeros MaskedFPN
    leaves in the padding, and no anchor over the padding reaches the proposals here."""
    if missing == 'all':
        model, batched = stock(path)
    else:
        model, batched = build(narrowed(path, tuple(p for p in ALL if p != missing))), None
    scores, boxes, pixels, proposals = alone_vs_batched(model, packed, batched)
    print(path, missing, scores, boxes, pixels, proposals)
    # outside the bounds test_alone_equals_batched asserts (RetinaNet-PVT without MaskedFPN,
    # as sets: scores 2.7e-5, boxes 0.031 px on AVX2 kernels)
    assert scores > 1e-4 or boxes > 1e-2 or pixels > 0 or proposals > 1e-2, (
        scores, boxes, pixels, proposals)


@pytest.mark.parametrize('path', [RETINANET_PVT, MASK_RCNN], ids=['retinanet_pvt', 'mask_rcnn'])
def test_model_switch_off_is_mmdet_bit_for_bit(packed, stock, path):
    """The user's ``model = dict(padding_exact=False)`` on the shipped config turns every
    exact part off (backbone, SimplePyramid, MaskedFPN, the dense head, Mask R-CNN's
    edge-replicated RoI reads): on a padded batch, mmdet's classes with the same weights (built
    at the same seed: the same state dict), bit for bit."""
    cfg = narrowed(path, ALL)
    cfg.model.padding_exact = False
    off = build(cfg)
    stock, (stock_preds, _) = stock(path)
    weights, stock_weights = off.state_dict(), stock.state_dict()
    assert list(weights) == list(stock_weights)
    assert all(torch.equal(v, stock_weights[k]) for k, v in weights.items())
    for a, b in zip(predict(off, packed)[0], stock_preds):
        a, b = a.pred_instances, b.pred_instances
        assert torch.equal(a.bboxes, b.bboxes) and torch.equal(a.scores, b.scores)
        assert 'masks' not in a or torch.equal(a.masks, b.masks)
