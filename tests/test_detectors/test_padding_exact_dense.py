"""RetinaNet and Mask R-CNN exact end to end on padded batches (issue 20, item 2).

The shipped ``configs/pvt_peg/retinanet_pvt-peg-t_fpn_1x_coco.py`` and
``configs/swin_peg/mask-rcnn_swin-peg-t-p4-w7_fpn_1x_coco.py``, loaded by path and narrowed
(widths, depths: CPU time), switched to mmposenc's exact classes (padding-exact backbone,
PaddingExactRetinaNet / PaddingExactMaskRCNN, MaskedFPN, PaddingExactRetinaHead /
PaddingExactRPNHead), on two COCO128 images through the config's test pipeline (800 x 1067 and
1202 x 800, batched to 1216 x 1088): each image gets the same boxes, scores, labels (and masks)
alone and batched; as shipped (mmdet's classes) it does not, and each exact part left out
breaks it.
"""
import copy

import pytest
import torch
from torch import nn

pytest.importorskip('mmdet')

import mmposenc.models.detectors  # noqa: E402,F401  (the exact classes)

RETINANET = 'configs/pvt_peg/retinanet_pvt-peg-t_fpn_1x_coco.py'
MASK_RCNN = 'configs/swin_peg/mask-rcnn_swin-peg-t-p4-w7_fpn_1x_coco.py'
COCO_IMAGES = ('000000000009.jpg', '000000000404.jpg')  # 480 x 640, 640 x 426
DIMS = 32
EXACT = dict(
    retinanet=dict(type='mmposenc.PaddingExactRetinaNet',
                   neck=dict(type='mmposenc.MaskedFPN'),
                   bbox_head=dict(type='mmposenc.PaddingExactRetinaHead')),
    mask_rcnn=dict(type='mmposenc.PaddingExactMaskRCNN',
                   neck=dict(type='mmposenc.MaskedFPN'),
                   rpn_head=dict(type='mmposenc.PaddingExactRPNHead')))


def narrowed(path, exact):
    """The shipped config, narrowed; ``exact``: the exact parts to switch on (``'backbone'``,
    ``'host'``, ``'neck'``, ``'head'``, ``'roi'``: Mask R-CNN's edge-padded RoI reads)."""
    from mmengine.config import Config
    cfg = Config.fromfile(path)
    model = cfg.model
    model.backbone.init_cfg = None
    if model.backbone.type == 'mmposenc.PVTPEG':
        model.backbone.arch = dict(embed_dims=[16, 32, 64, 128], num_heads=[1, 2, 4, 8],
                                   mlp_ratios=[2, 2, 2, 2], depths=[1, 1, 1, 1],
                                   sr_ratios=[8, 4, 2, 1])
    else:
        model.backbone.arch = dict(embed_dims=16, depths=[2, 2, 2, 2], num_heads=[1, 1, 2, 2])
    model.backbone.padding_exact = 'backbone' in exact
    model.neck.update(in_channels=[16, 32, 64, 128], out_channels=DIMS)
    if 'bbox_head' in model:  # RetinaNet
        model.bbox_head.update(in_channels=DIMS, feat_channels=DIMS, stacked_convs=2,
                               num_classes=8)
        kind = 'retinanet'
    else:
        model.rpn_head.update(in_channels=DIMS, feat_channels=DIMS)
        roi = model.roi_head
        roi.bbox_roi_extractor.out_channels = DIMS
        roi.bbox_head.update(in_channels=DIMS, fc_out_channels=2 * DIMS)
        roi.mask_roi_extractor.out_channels = DIMS
        roi.mask_head.update(in_channels=DIMS, conv_out_channels=DIMS, num_convs=2)
        kind = 'mask_rcnn'
    parts = EXACT[kind]
    if 'host' in exact:
        model.type = parts['type']
    if 'neck' in exact:
        model.neck.update(parts['neck'])
    if 'head' in exact:
        head = 'bbox_head' if kind == 'retinanet' else 'rpn_head'
        model[head].update(parts[head])
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
    """The detections, and for Mask R-CNN the RPN's proposals, of the batch of ``items``."""
    data = model.data_preprocessor(
        dict(inputs=[p['inputs'] for p in items],
             data_samples=[copy.deepcopy(p['data_samples']) for p in items]), False)
    inputs, samples = data['inputs'], data['data_samples']
    with torch.no_grad():
        proposals = None
        if hasattr(model, 'rpn_head'):
            if hasattr(model, '_samples_for_neck'):
                with model._samples_for_neck(samples):
                    feats = model.extract_feat(inputs)
            else:
                feats = model.extract_feat(inputs)
            proposals = model.rpn_head.predict(feats, samples, rescale=False)
        return model.predict(inputs, samples), proposals


def by_score(instances):
    return instances[instances.scores.argsort(descending=True)]


def alone_vs_batched(model, items, batched=None):
    """Largest |score| and |box| (px) differences and number of differing mask pixels of the
    detections (sorted by score), and the largest |box| difference of the RPN's proposals
    (Mask R-CNN), alone vs batched (``batched``: ``predict(model, items)`` if already
    computed); inf where the detections differ."""
    batched, batched_proposals = batched or predict(model, items)
    scores = boxes = pixels = proposals = 0.
    for i in range(len(items)):
        alone, alone_proposals = predict(model, items[i:i + 1])
        a, b = by_score(alone[0].pred_instances), by_score(batched[i].pred_instances)
        assert len(a) > 0, 'no detections: nothing compared'
        if len(a) != len(b) or not torch.equal(a.labels, b.labels):
            return float('inf'), float('inf'), float('inf'), float('inf')
        scores = max(scores, (a.scores - b.scores).abs().max().item())
        boxes = max(boxes, (a.bboxes - b.bboxes).abs().max().item())
        if 'masks' in a:
            pixels += (a.masks != b.masks).sum().item()
        if alone_proposals is not None:
            pa, pb = by_score(alone_proposals[0]), by_score(batched_proposals[i])
            proposals = max(proposals, float('inf') if len(pa) != len(pb) else
                            (pa.bboxes - pb.bboxes).abs().max().item())
    return scores, boxes, pixels, proposals


ALL = ('backbone', 'host', 'neck', 'head', 'roi')


@pytest.fixture(scope='module')
def as_shipped(packed):
    """path -> (the narrowed config's model with mmdet's classes, the backbone stock; its
    predictions on the batch), built on first use: the 'all' case of
    test_fails_without_each_part and the reference of test_model_switch_off_is_mmdet_bit_for_bit
    share it."""
    cache = {}

    def get(path):
        if path not in cache:
            model = build(narrowed(path, ()))
            cache[path] = model, predict(model, packed)
        return cache[path]
    return get


@pytest.mark.parametrize('path', [RETINANET, MASK_RCNN], ids=['retinanet', 'mask_rcnn'])
def test_alone_equals_batched(packed, path):
    """Scores <= 1e-4 (measured 0 and 1.1e-6), boxes <= 0.01 px (measured 0 and 3e-5 px),
    masks equal, proposals <= 0.01 px (6e-5 px)."""
    scores, boxes, pixels, proposals = alone_vs_batched(build(narrowed(path, ALL)), packed)
    assert scores <= 1e-4 and boxes <= 1e-2 and pixels == 0 and proposals <= 1e-2, (
        scores, boxes, pixels, proposals)


@pytest.mark.parametrize('path,missing', [
    (RETINANET, 'all'), (RETINANET, 'neck'), (RETINANET, 'head'),
    (MASK_RCNN, 'all'), (MASK_RCNN, 'neck'), (MASK_RCNN, 'head'), (MASK_RCNN, 'roi')])
def test_fails_without_each_part(packed, as_shipped, path, missing):
    """As shipped ('all': mmdet's classes, the backbone stock) and with one exact part left
    out (the backbone's own mode: tests/test_backbones/test_padding_exact.py)."""
    if missing == 'all':
        model, batched = as_shipped(path)
    else:
        model, batched = build(narrowed(path, tuple(p for p in ALL if p != missing))), None
    scores, boxes, pixels, proposals = alone_vs_batched(model, packed, batched)
    print(path, missing, scores, boxes, pixels, proposals)
    assert scores > 1e-3 or boxes > 0.1 or pixels > 0 or proposals > 0.1, (
        scores, boxes, pixels, proposals)


@pytest.mark.parametrize('path', [RETINANET, MASK_RCNN], ids=['retinanet', 'mask_rcnn'])
def test_model_switch_off_is_mmdet_bit_for_bit(packed, as_shipped, path):
    """``model = dict(padding_exact=False)`` turns every exact part off (backbone, MaskedFPN,
    the dense head, Mask R-CNN's edge-replicated RoI reads): on a padded batch, mmdet's
    classes with the same weights (built at the same seed: the same state dict), bit for
    bit."""
    cfg = narrowed(path, ALL)
    cfg.model.padding_exact = False
    off = build(cfg)
    stock, (stock_preds, _) = as_shipped(path)
    weights, stock_weights = off.state_dict(), stock.state_dict()
    assert list(weights) == list(stock_weights)
    assert all(torch.equal(v, stock_weights[k]) for k, v in weights.items())
    for a, b in zip(predict(off, packed)[0], stock_preds):
        a, b = a.pred_instances, b.pred_instances
        assert torch.equal(a.bboxes, b.bboxes) and torch.equal(a.scores, b.scores)
        assert 'masks' not in a or torch.equal(a.masks, b.masks)
