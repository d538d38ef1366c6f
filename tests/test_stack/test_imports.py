"""The pinned OpenMMLab stack (upstream or onedl) imports, mmcv.ops runs on the route asked for
(compiled ops or mmposenc's PyTorch kernels), and mmposenc plugs into it (that
`import mmposenc.models` imports no host: test_registry.py, in its fresh interpreter)."""
import importlib

import pytest
import torch

from stack_info import DISTRIBUTIONS, EXPECTED_ROUTE, STACK, mmcv_distribution, pins


@pytest.mark.parametrize('module', [
    'mmcv.ops', 'mmdet.models', 'mmseg.models', 'mmpretrain.models', 'torchvision.ops',
    'mmposenc', 'mmposenc.models', 'mmposenc.engine', 'mmposenc.models.detectors'
])
def test_imports(module):
    importlib.import_module(module)


def test_versions_match_the_stacks_pins():
    """Every host is the version requirements/<stack>.txt pins, under that stack's names."""
    import torchvision
    found = {'torch': torch.__version__.split('+')[0],
             'torchvision': torchvision.__version__.split('+')[0]}
    for module, dists in DISTRIBUTIONS.items():
        found[dists[STACK]] = importlib.import_module(module).__version__
    pinned = pins()
    mmcv_dist = mmcv_distribution()
    if mmcv_dist == 'mmcv-lite':  # the upstream ops-free route: the same version, other name
        pinned['mmcv'] = pinned['mmcv-lite']
    assert found == {k: pinned[k] for k in found}


def test_mmcv_ops_run_on_the_route_asked_for():
    """mmcv.ops runs on the route `make` asked for (compiled ops, or mmposenc's PyTorch
    kernels where mmcv has none) and gives the known answers on CPU."""
    import importlib.util

    from mmcv.ops import nms, roi_align

    from mmposenc.ops import mmcv_route
    from mmposenc.ops.ext_finder import KERNELS_FILE
    route = mmcv_route()
    spec = importlib.util.find_spec('mmcv._ext')
    assert (route == 'ops-free') == (spec.origin == KERNELS_FILE)
    if EXPECTED_ROUTE:
        assert route == EXPECTED_ROUTE
    boxes = torch.tensor([[0., 0., 10., 10.], [1., 1., 10., 10.], [20., 20., 30., 30.]])
    scores = torch.tensor([0.9, 0.8, 0.7])
    _, keep = nms(boxes, scores, iou_threshold=0.5)
    assert keep.tolist() == [0, 2]
    feat = torch.arange(16.).view(1, 1, 4, 4)
    rois = torch.tensor([[0., 0., 0., 3., 3.]])
    out = roi_align(feat, rois, (1, 1), 1.0, 1, 'avg', True)
    # the mean of the 4x4 ramp sampled at the centre of [0, 3]^2 (aligned: pixel centres)
    assert torch.allclose(out.flatten(), torch.tensor([5.0]))


def test_torchvision_ops_match_torch():
    """torchvision's C++ ops load against this torch (a +cpu torch with PyPI torchvision
    fails right here)."""
    from torchvision.ops import nms
    keep = nms(torch.tensor([[0., 0., 10., 10.], [1., 1., 10., 10.]]), torch.tensor([.9, .8]),
               0.5)
    assert keep.tolist() == [0]

