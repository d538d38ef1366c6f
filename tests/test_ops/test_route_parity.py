"""The ops-free route predicts what the compiled route predicts: per config family, the same
model and inputs with mmcv's compiled kernels and with mmposenc's PyTorch kernels swapped in
(every loaded ``mmcv.ops`` module's ``ext_module``), on CPU, bit for bit. The one difference
between the routes, the order in which NMS takes boxes of equal scores (mmcv's compiled sort:
arbitrary; the PyTorch kernel: lower index first), is pinned to index order on the compiled side
(:class:`TiesByIndex`).

Families, from the shipped configs narrowed as the exactness tests narrow them, on real
images through each config's test pipeline and data preprocessor, batched:

- Mask R-CNN (CPVT-S; NMS in the RPN and per class, RoIAlign for boxes and masks) and
  RetinaNet (Swin-PEG; NMS), two COCO128 images;
- Mask2Former (instance; multi-scale deformable attention in the pixel decoder), the same
  images;
- Deformable-DETR and DINO with PEG (multi-scale deformable attention; DINO's query selection),
  the tiny DETR-family configs of the DETR exactness tests, a padded batch.

Runs where mmcv has compiled ops (``make test-hosts ROUTE=compiled``); elsewhere it skips with
that reason (the other route is not installed).
"""
import contextlib
import copy
import os
import sys

import pytest
import torch

pytest.importorskip('mmdet')
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                'test_detectors'))
import mmposenc.models.detectors  # noqa: E402,F401
from mmposenc.ops import mmcv_route  # noqa: E402
from test_padding_exact_dense import packed  # noqa: E402,F401  (fixture: two COCO128 images)
from test_padding_exact_mask2former import det  # noqa: E402,F401  (fixture)
from test_torch_kernels import KERNELS, index_ordered  # noqa: E402


@pytest.fixture(autouse=True, scope='module')
def compiled_route():
    import mmcv.ops  # noqa: F401
    if mmcv_route() != 'compiled':
        pytest.skip('this mmcv has no compiled ops: the comparison of the two routes runs where '
                    'it has them, `make test-hosts ROUTE=compiled`')


class TiesByIndex:
    """mmcv's compiled kernels, its NMS given equal scores in index order (as distinct
    scores): its own sort orders ties arbitrarily, the PyTorch kernel by index (see
    test_torch_kernels.test_nms_breaks_score_ties_by_index); random weights give ties."""

    def __init__(self, ext):
        self.ext = ext

    def nms(self, boxes, scores, iou_threshold, offset):
        return self.ext.nms(boxes, index_ordered(scores), iou_threshold=iou_threshold,
                            offset=offset)

    def __getattr__(self, name):
        return getattr(self.ext, name)


@contextlib.contextmanager
def kernels(ext):
    """Every loaded ``mmcv.ops`` module runs on ``ext``."""
    swapped = [(m, m.ext_module) for name, m in list(sys.modules.items())
               if name.startswith('mmcv.ops.') and hasattr(m, 'ext_module')]
    assert swapped
    try:
        for module, _ in swapped:
            module.ext_module = ext
        yield
    finally:
        for module, saved in swapped:
            module.ext_module = saved


def both_routes(fn):
    with torch.no_grad():
        with kernels(TiesByIndex(sys.modules['mmcv._ext'])):
            compiled = fn()
        with kernels(KERNELS):
            ops_free = fn()
    return compiled, ops_free


def assert_same_instances(compiled, ops_free):
    assert len(compiled) == len(ops_free)
    n = 0
    for a, b in zip(compiled, ops_free):
        a, b = a.pred_instances, b.pred_instances
        n += len(a)
        for key in a.keys():
            assert torch.equal(a[key], b[key]), key
    assert n > 0, 'no detections: nothing compared'


@pytest.mark.parametrize('family', ['mask_rcnn', 'retinanet'])
def test_dense_detectors_predict_the_same_on_both_routes(family, packed):
    from test_padding_exact_dense import ALL, MASK_RCNN, RETINANET, build, narrowed, predict
    model = build(narrowed({'mask_rcnn': MASK_RCNN, 'retinanet': RETINANET}[family], ALL))
    (compiled, compiled_props), (ops_free, ops_free_props) = both_routes(
        lambda: predict(model, packed))
    assert_same_instances(compiled, ops_free)
    for a, b in zip(compiled_props or [], ops_free_props or []):
        assert torch.equal(a.bboxes, b.bboxes) and torch.equal(a.scores, b.scores)


def test_mask2former_predicts_the_same_on_both_routes(det):
    from test_padding_exact_mask2former import det_predict
    model, items = det
    compiled, ops_free = both_routes(lambda: det_predict(model, items))
    assert_same_instances(compiled, ops_free)


@pytest.mark.parametrize('kind', ['deformable_detr', 'dino'])
def test_detr_family_predicts_the_same_on_both_routes(kind):
    import tiny_detr_cfgs as tiny
    if kind == 'dino':
        cfg = tiny.dino_cfg(type='mmposenc.PEGDINO')
    else:
        cfg = tiny.deformable_detr_cfg(type='mmposenc.PEGDeformableDETR')
    model = tiny.randomise_pegs(tiny.build(cfg)).eval()
    batch = tiny.packed_inputs([(3, 96, 80), (3, 64, 112)])

    def run():
        data = model.data_preprocessor(copy.deepcopy(batch), False)
        return model.predict(data['inputs'], data['data_samples'])
    compiled, ops_free = both_routes(run)
    assert_same_instances(compiled, ops_free)
