"""The pinned OpenMMLab stack imports, with compiled mmcv ops, and mmposenc plugs into it
(that `import mmposenc.models` imports no host: test_registry.py, in its fresh interpreter)."""
import importlib
import os.path as osp

import pytest
import torch

from conftest import REPO_ROOT


def _pins():
    pins = {}
    with open(osp.join(REPO_ROOT, 'requirements', 'pins.txt')) as f:
        for line in f:
            line = line.split('#')[0].strip()
            if '==' in line and not line.startswith('@'):
                name, version = line.split('==')
                pins[name.strip()] = version.strip()
    return pins


@pytest.mark.parametrize('module', [
    'mmcv.ops', 'mmdet.models', 'mmseg.models', 'mmpretrain.models', 'torchvision.ops',
    'mmposenc', 'mmposenc.models', 'mmposenc.engine'
])
def test_imports(module):
    importlib.import_module(module)


def test_versions_match_pins():
    import mmcv
    import mmdet
    import mmengine
    import mmpretrain
    import mmseg
    import torchvision
    pins = _pins()
    found = {
        'torch': torch.__version__.split('+')[0],
        'torchvision': torchvision.__version__.split('+')[0],
        'mmcv': mmcv.__version__,
        'mmengine': mmengine.__version__,
        'mmdet': mmdet.__version__,
        'mmsegmentation': mmseg.__version__,
        'mmpretrain': mmpretrain.__version__,
    }
    assert found == {k: pins[k] for k in found}


def test_mmcv_ops_are_compiled_and_run():
    """A compiled op (not a Python fallback) runs on CPU and gives the known answer."""
    from mmcv.ops import nms, roi_align
    from mmcv.utils import ext_loader
    ext = ext_loader.load_ext('_ext', ['nms', 'roi_align_forward'])
    assert hasattr(ext, 'nms')
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

