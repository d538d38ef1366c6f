"""GPU check, configs: one train step and one predict step of every shipped DETR-family and
Mask2Former config on CUDA, on the mmcv route this environment has (``make test-gpu``, once per
route: ``make gpu-check`` runs both).

Each config as shipped (ImageNet checkpoints dropped: the machine may be offline), a batch of
two images of different sizes (mmdet's / mmseg's demo inputs), SGD: the losses are finite, the
step changes the parameters, and the predictions of the stepped model are finite, one per
image. ``MMPOSENC_GPU_TEST_DEVICE=cpu`` runs the same on the CPU (a dry run of the test code).
"""
import glob
import os
import os.path as osp

import pytest
import torch

from conftest import REPO_ROOT

pytest.importorskip('mmdet')
pytestmark = pytest.mark.cuda

DEVICE = os.environ.get('MMPOSENC_GPU_TEST_DEVICE', 'cuda')
FAMILIES = ('peg_detr', 'peg_conditional_detr', 'peg_dab_detr', 'peg_deformable_detr',
            'peg_dino', 'peg_mask2former')
CONFIGS = sorted(osp.relpath(p, REPO_ROOT) for f in FAMILIES
                 for p in glob.glob(osp.join(REPO_ROOT, 'configs', f, '*.py')))
# DINO selects 900 queries from the encoder tokens: images with more than 900 tokens
SHAPES = [(3, 256, 320), (3, 224, 296)]


@pytest.fixture(scope='module')
def device():
    dev = torch.device(DEVICE)
    if dev.type == 'cuda' and not torch.cuda.is_available():
        pytest.skip('no CUDA device: torch.cuda.is_available() is False (dry run on the CPU: '
                    'MMPOSENC_GPU_TEST_DEVICE=cpu)')
    return dev


def _drop_pretrained(model_cfg):
    """mmposenc.utils.tools.runner.drop_pretrained (the tools'): every Pretrained init_cfg of
    the model removed."""
    from mmposenc.utils.tools.runner import drop_pretrained
    drop_pretrained(model_cfg)


def _batch(cfg):
    if cfg.default_scope == 'mmseg':
        from mmengine.structures import PixelData
        from mmseg.structures import SegDataSample
        g = torch.Generator().manual_seed(0)
        inputs, samples = [], []
        for c, h, w in [SHAPES[0]] * 2:  # mmseg's test batches are of one size
            inputs.append(torch.randint(0, 256, (c, h, w), dtype=torch.uint8, generator=g))
            sample = SegDataSample(metainfo=dict(img_shape=(h, w), ori_shape=(h, w)))
            sample.gt_sem_seg = PixelData(
                data=torch.randint(0, 150, (1, h, w), generator=g))
            samples.append(sample)
        return dict(inputs=inputs, data_samples=samples)
    from mmdet.testing import demo_mm_inputs
    panoptic = 'panoptic' in str(cfg.get('dataset_type', '')).lower()
    # labels 1 (demo_mm_inputs draws from [1, num_classes)): a class of every head
    return demo_mm_inputs(2, image_shapes=SHAPES, num_items=[3, 1], num_classes=2,
                          with_mask='mask2former' in cfg.model.type.lower() or panoptic,
                          with_semantic=panoptic)


@pytest.mark.parametrize('path', CONFIGS)
def test_train_and_predict_step(path, device):
    from mmengine.config import Config
    from mmengine.optim import build_optim_wrapper
    from mmengine.registry import init_default_scope

    from mmposenc.registry import MODELS
    cfg = Config.fromfile(osp.join(REPO_ROOT, path))
    _drop_pretrained(cfg.model)
    init_default_scope(cfg.default_scope)
    torch.manual_seed(0)
    model = MODELS.build(cfg.model)
    model.init_weights()
    model.to(device)
    wrapper = build_optim_wrapper(model, dict(optimizer=dict(type='SGD', lr=1e-3)))
    before = [p.detach().clone() for p in model.parameters() if p.requires_grad]
    model.train()
    losses = model.train_step(_batch(cfg), wrapper)
    assert losses and all(torch.isfinite(v).all() for v in losses.values()), losses
    after = [p.detach() for p in model.parameters() if p.requires_grad]
    assert any(not torch.equal(a, b) for a, b in zip(after, before))
    model.eval()
    with torch.no_grad():
        out = model.test_step(_batch(cfg))
    assert len(out) == 2
    for sample in out:
        result = sample.pred_instances if 'pred_instances' in sample else sample.pred_sem_seg
        for value in result.values():
            if torch.is_tensor(value) and value.is_floating_point():
                assert torch.isfinite(value).all()
        assert next((v.device for v in result.values() if torch.is_tensor(v)),
                    device).type == device.type or cfg.default_scope == 'mmseg'
