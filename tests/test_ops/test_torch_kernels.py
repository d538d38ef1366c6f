"""mmposenc's PyTorch kernels for mmcv (the ops-free route, mmposenc/ops/mmcv_ext.py) against
mmcv's compiled kernels and mmcv's / mmdet's own PyTorch code, through mmcv's own wrappers.

- NMS and RoIAlign (forward and backward) against mmcv's compiled CPU kernels, where this
  environment has them (``make test-hosts ROUTE=compiled``; elsewhere these skip with that
  reason), bit for bit, score ties included;
- multi-scale deformable attention: the kernels equal mmcv's ``multi_scale_deformable_attn_pytorch``
  and their backward its autograd (mmcv has no CPU kernel to compare with);
- sigmoid / softmax focal loss: mmdet's ``py_sigmoid_focal_loss`` and the autograd of the same
  loss written with ``torch.nn.functional``;
- a kernel the route lacks is refused in one line: an op module (``DeformConv2d``) when it is
  built, a function (``soft_nms``) when it is called.
"""
import importlib.util
import subprocess
import sys

import pytest
import torch

from mmposenc.ops import mmcv_route
from mmposenc.ops.ext_finder import KERNELS_FILE


def _load_kernels():
    spec = importlib.util.spec_from_file_location('_mmposenc_kernels_under_test', KERNELS_FILE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


KERNELS = _load_kernels()


def _compiled():
    import mmcv.ops  # noqa: F401
    if mmcv_route() != 'compiled':
        pytest.skip('this mmcv has no compiled ops (mmcv._ext is mmposenc\'s PyTorch kernels): '
                    'the comparison runs where they are, `make test-hosts ROUTE=compiled`')
    return sys.modules['mmcv._ext']


def _boxes(n, seed, ties=False):
    g = torch.Generator().manual_seed(seed)
    xy = torch.rand(n, 2, generator=g) * 200
    wh = torch.rand(n, 2, generator=g) * 60 + 1
    scores = torch.rand(n, generator=g)
    if ties:  # many exactly equal scores: the order among them decides what is kept
        scores = (scores * 8).round() / 8
    return torch.cat([xy, xy + wh], 1), scores


def index_ordered(scores):
    """Distinct scores in the order of ``scores``, equal scores ordered by index (lower
    first): what NMS keeps depends on the order of the scores alone."""
    order = scores.sort(descending=True, stable=True).indices
    ranked = torch.empty_like(scores)
    ranked[order] = -torch.arange(len(scores), dtype=scores.dtype)
    return ranked


@pytest.mark.parametrize('iou', [0.3, 0.5, 0.7])
def test_nms_equals_the_compiled_kernel(iou):
    """Distinct scores: the same boxes kept, in the same order."""
    ext = _compiled()
    for seed in range(5):
        boxes, scores = _boxes(400, seed)
        assert len(scores.unique()) == len(scores)
        ours = KERNELS.nms(boxes, scores, iou_threshold=iou, offset=0)
        theirs = ext.nms(boxes, scores, iou_threshold=iou, offset=0)
        assert torch.equal(ours, theirs), (seed, len(ours), len(theirs))


@pytest.mark.parametrize('iou', [0.3, 0.5, 0.7])
def test_nms_breaks_score_ties_by_index(iou):
    """Equal scores: the PyTorch kernel keeps the lower index first, whatever the batch; it
    equals the compiled kernel given the same order as distinct scores. The compiled kernel
    itself sorts unstably: on ties it keeps other boxes (checked, so that this test shows a
    difference, not a coincidence)."""
    ext = _compiled()
    differs = False
    for seed in range(5):
        boxes, scores = _boxes(400, seed, ties=True)
        ours = KERNELS.nms(boxes, scores, iou_threshold=iou, offset=0)
        pinned = ext.nms(boxes, index_ordered(scores), iou_threshold=iou, offset=0)
        assert torch.equal(ours, pinned), (seed, len(ours), len(pinned))
        differs |= not torch.equal(ours, ext.nms(boxes, scores, iou_threshold=iou, offset=0))
    assert differs, 'the compiled kernel broke every tie by index: nothing shown'


def test_batched_nms_equals_the_compiled_route(monkeypatch):
    """mmcv's batched_nms (class offsets, mmdet's test_cfg path) on either kernels."""
    _compiled()
    from mmcv.ops import batched_nms
    nms_module = sys.modules['mmcv.ops.nms']
    boxes, scores = _boxes(600, 7)
    idxs = torch.randint(0, 5, (600,), generator=torch.Generator().manual_seed(0))
    cfg = dict(type='nms', iou_threshold=0.5)
    dets_c, keep_c = batched_nms(boxes, scores, idxs, cfg)
    monkeypatch.setattr(nms_module, 'ext_module', KERNELS)
    dets_t, keep_t = batched_nms(boxes, scores, idxs, cfg)
    assert torch.equal(keep_c, keep_t) and torch.equal(dets_c, dets_t)


def test_nms_offset_one_keeps_what_the_compiled_kernel_keeps():
    ext = _compiled()
    for seed in range(5):
        boxes, scores = _boxes(300, seed)
        boxes = boxes.round()  # integer pixel boxes, the legacy convention
        assert torch.equal(KERNELS.nms(boxes, scores, 0.5, offset=1),
                           ext.nms(boxes, scores, iou_threshold=0.5, offset=1))


def test_nms_of_nothing():
    assert KERNELS.nms(torch.zeros(0, 4), torch.zeros(0), 0.5).shape == (0,)


def _rois(k, seed, batch=2, size=(37, 53), scale=0.25):
    g = torch.Generator().manual_seed(seed)
    h, w = size[0] / scale, size[1] / scale
    x1 = torch.rand(k, generator=g) * w * 0.8 - 4
    y1 = torch.rand(k, generator=g) * h * 0.8 - 4
    x2 = x1 + torch.rand(k, generator=g) * w * 0.5 + 0.2
    y2 = y1 + torch.rand(k, generator=g) * h * 0.5 + 0.2
    idx = torch.randint(0, batch, (k,), generator=g).float()
    return torch.stack([idx, x1, y1, x2, y2], 1)


@pytest.mark.parametrize('aligned', [True, False])
@pytest.mark.parametrize('sampling_ratio', [0, 2])
def test_roi_align_equals_the_compiled_kernel(aligned, sampling_ratio, monkeypatch):
    """mmcv's RoIAlign (mmdet's RoI extractors) forward and backward on either kernels, on a
    non-square map, RoIs partly outside it, a stride-4 scale."""
    _compiled()
    from mmcv.ops import RoIAlign
    roi_module = sys.modules['mmcv.ops.roi_align']
    g = torch.Generator().manual_seed(3)
    feat = torch.randn(2, 5, 37, 53, generator=g)
    rois = _rois(40, 1)
    layer = RoIAlign((7, 7), spatial_scale=0.25, sampling_ratio=sampling_ratio,
                     aligned=aligned, use_torchvision=False)
    grad_out = torch.randn(40, 5, 7, 7, generator=g)

    def run():
        x = feat.clone().requires_grad_()
        out = layer(x, rois)
        out.backward(grad_out)
        return out.detach(), x.grad

    out_c, grad_c = run()
    monkeypatch.setattr(roi_module, 'ext_module', KERNELS)
    out_t, grad_t = run()
    torch.testing.assert_close(out_t, out_c, rtol=0, atol=0)
    # the backward accumulates bilinear weights into the same cells, in the same order
    torch.testing.assert_close(grad_t, grad_c, rtol=1e-6, atol=1e-6)


def test_roi_align_max_pooling_is_refused_in_one_line():
    out = torch.zeros(1, 1, 2, 2)
    with pytest.raises(KERNELS.OpsFreeRouteError, match=r"pool_mode='max'.*ROUTE=compiled"):
        KERNELS.roi_align_forward(torch.zeros(1, 1, 4, 4), torch.zeros(1, 5), out, out, out,
                                  2, 2, 1.0, 0, 0, True)


def _msda_inputs(seed, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    shapes = torch.tensor([[9, 13], [5, 7]])
    n_keys = int((shapes[:, 0] * shapes[:, 1]).sum())
    value = torch.randn(2, n_keys, 4, 8, generator=g, dtype=dtype)
    loc = torch.rand(2, 11, 4, 2, 3, 2, generator=g, dtype=dtype) * 1.2 - 0.1  # some outside
    weights = torch.rand(2, 11, 4, 2, 3, generator=g, dtype=dtype)
    weights = weights / weights.sum((-1, -2), keepdim=True)
    start = torch.cat([shapes.new_zeros(1), (shapes[:, 0] * shapes[:, 1]).cumsum(0)[:-1]])
    return value, shapes, start, loc, weights


def test_multi_scale_deformable_attention_kernels_are_mmcvs_pytorch_function():
    """What mmcv's ``MultiScaleDeformableAttnFunction`` (its CUDA path) gets from the kernels:
    the output of mmcv's own PyTorch function, and the gradients of its autograd."""
    from mmcv.ops.multi_scale_deform_attn import (MultiScaleDeformableAttnFunction,
                                                  multi_scale_deformable_attn_pytorch)
    msda_module = sys.modules['mmcv.ops.multi_scale_deform_attn']
    value, shapes, start, loc, weights = _msda_inputs(0, torch.float64)
    ref_in = [t.clone().requires_grad_() for t in (value, loc, weights)]
    ref = multi_scale_deformable_attn_pytorch(ref_in[0], shapes, ref_in[1], ref_in[2])
    grad_out = torch.randn_like(ref)
    ref.backward(grad_out)
    saved = msda_module.ext_module
    msda_module.ext_module = KERNELS
    try:
        ins = [t.clone().requires_grad_() for t in (value, loc, weights)]
        out = MultiScaleDeformableAttnFunction.apply(ins[0], shapes, start, ins[1], ins[2], 64)
        out.backward(grad_out)
    finally:
        msda_module.ext_module = saved
    torch.testing.assert_close(out, ref, rtol=0, atol=0)
    for a, b in zip(ins, ref_in):
        torch.testing.assert_close(a.grad, b.grad, rtol=0, atol=0)


def _focal_inputs(seed, n=23, c=7):
    g = torch.Generator().manual_seed(seed)
    pred = torch.randn(n, c, generator=g, dtype=torch.float64) * 3
    target = torch.randint(0, c + 1, (n,), generator=g)  # c: background
    return pred, target


@pytest.mark.parametrize('gamma,alpha', [(2.0, 0.25), (1.5, 0.5)])
def test_sigmoid_focal_loss_kernels_equal_mmdets_pytorch_loss(gamma, alpha, monkeypatch):
    """mmcv's ``sigmoid_focal_loss`` (mmdet's FocalLoss on CUDA) on the kernels against
    mmdet's ``py_sigmoid_focal_loss`` (its CPU path): loss and gradient, float64."""
    from mmcv.ops.focal_loss import sigmoid_focal_loss
    from mmdet.models.losses.focal_loss import py_sigmoid_focal_loss
    monkeypatch.setattr(sys.modules['mmcv.ops.focal_loss'], 'ext_module', KERNELS)
    pred, target = _focal_inputs(0)
    a, b = pred.clone().requires_grad_(), pred.clone().requires_grad_()
    ours = sigmoid_focal_loss(a, target, gamma, alpha, None, 'none')
    onehot = torch.nn.functional.one_hot(target, pred.size(1) + 1)[:, :-1].to(pred)
    ref = py_sigmoid_focal_loss(b, onehot, None, gamma, alpha, 'none')
    torch.testing.assert_close(ours, ref, rtol=1e-10, atol=1e-12)
    grad = torch.randn_like(ours)
    ours.backward(grad)
    ref.backward(grad)
    torch.testing.assert_close(a.grad, b.grad, rtol=1e-10, atol=1e-12)


def test_softmax_focal_loss_kernels_equal_autograd(monkeypatch):
    from mmcv.ops.focal_loss import softmax_focal_loss
    monkeypatch.setattr(sys.modules['mmcv.ops.focal_loss'], 'ext_module', KERNELS)
    pred, target = _focal_inputs(1)
    target = target.clamp(max=pred.size(1) - 1)
    weight = torch.rand(pred.size(1), dtype=torch.float64)
    a, b = pred.clone().requires_grad_(), pred.clone().requires_grad_()
    # 'sum': mmcv's backward multiplies (N, C) by the (N,) gradient of 'none' and fails
    ours = softmax_focal_loss(a, target, 2.0, 0.25, weight, 'sum')
    p = b.softmax(1).gather(1, target[:, None])[:, 0]
    ref = (-0.25 * (1 - p) ** 2 * p.log() * weight[target]).sum()
    torch.testing.assert_close(ours, ref, rtol=1e-10, atol=1e-12)
    ours.backward()
    ref.backward()
    torch.testing.assert_close(a.grad, b.grad, rtol=1e-10, atol=1e-12)


REFUSAL = r'''
import sys
import mmposenc, mmcv.ops
from mmposenc.ops import mmcv_route
assert mmcv_route() == 'ops-free', mmcv_route()
what = sys.argv[1]
try:
    if what == 'module':
        mmcv.ops.DeformConv2d(4, 4, 3)
    elif what == 'config':
        from mmdet.registry import MODELS
        from mmengine.registry import init_default_scope
        init_default_scope('mmdet')
        MODELS.build(dict(type='ResNet', depth=50, dcn=dict(type='DCN', deform_groups=1),
                          stage_with_dcn=(False, True, False, False)))
    else:
        import torch
        mmcv.ops.soft_nms(torch.rand(3, 4), torch.rand(3))
except Exception as exc:
    print(type(exc).__name__ + ': ' + str(exc))
    sys.exit(0)
sys.exit('not refused')
'''


@pytest.mark.parametrize('what', ['module', 'config', 'function'])
def test_a_missing_kernel_is_refused_in_one_line(what):
    """With the PyTorch kernels (forced in a fresh interpreter where mmcv has compiled ops):
    an op module without kernels fails when the model is built (an mmdet ResNet with DCN
    included), a function when called; one line that names the kernels and the way out."""
    import os
    env = dict(os.environ, MMPOSENC_MMCV_OPS='torch')
    res = subprocess.run([sys.executable, '-W', 'ignore', '-c', REFUSAL, what], env=env,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr[-3000:]
    line, = res.stdout.strip().splitlines()
    assert line.startswith('OpsFreeRouteError: ')
    kernel = 'softnms' if what == 'function' else 'deform_conv_forward'
    assert kernel in line and 'make setup ROUTE=compiled' in line, line
