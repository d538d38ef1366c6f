"""One optimizer step of every PEG backbone (CPVT, PVTPEG, SwinPEG) under every dense host
(RetinaNet and Mask R-CNN in mmdet, Semantic FPN in mmseg), built from the shipped configs
with shrunken depth: the losses are finite and the step moves every PEG weight (so gradients
reach the PEGs through the whole detector / segmentor, and the PEGs are in the optimizer)."""
import os.path as osp

import pytest
import torch

from conftest import REPO_ROOT
from peg_config_utils import build

DENSE = {  # (backbone, host): shipped config
    ('CPVT', 'RetinaNet'): 'cpvt/retinanet_cpvt-s_fpn_1x_coco.py',
    ('CPVT', 'MaskRCNN'): 'cpvt/mask-rcnn_cpvt-s_fpn_1x_coco.py',
    ('CPVT', 'SemanticFPN'): 'cpvt/fpn_cpvt-s_8xb4-40k_ade20k-512x512.py',
    ('PVTPEG', 'RetinaNet'): 'pvt_peg/retinanet_pvt-peg-t_fpn_ms-3x_coco.py',
    ('PVTPEG', 'MaskRCNN'): 'pvt_peg/mask-rcnn_pvt-peg-t_fpn_1x_coco.py',
    ('PVTPEG', 'SemanticFPN'): 'pvt_peg/fpn_pvt-peg-t_8xb4-40k_ade20k-512x512.py',
    ('SwinPEG', 'RetinaNet'): 'swin_peg/retinanet_swin-peg-t-p4-w7_fpn_1x_coco.py',
    ('SwinPEG', 'MaskRCNN'): 'swin_peg/mask-rcnn_swin-peg-t-p4-w7_fpn_1x_coco.py',
    ('SwinPEG', 'SemanticFPN'): 'swin_peg/fpn_swin-peg-t_8xb4-40k_ade20k-512x512.py',
}
H, W = 96, 128


def _det_batch(with_mask):
    from mmdet.testing import demo_mm_inputs
    return demo_mm_inputs(batch_size=2, image_shapes=[(3, H, W), (3, H - 32, W)],
                          num_items=[3, 1], num_classes=80, with_mask=with_mask)


def _seg_batch():
    from mmengine.structures import PixelData
    from mmseg.structures import SegDataSample
    g = torch.Generator().manual_seed(0)
    inputs, samples = [], []
    for _ in range(2):
        inputs.append(torch.randint(0, 256, (3, H, W), dtype=torch.uint8, generator=g))
        sample = SegDataSample(metainfo=dict(img_shape=(H, W), ori_shape=(H, W)))
        labels = torch.randint(0, 150, (1, H // 8, W // 8), generator=g)
        sample.gt_sem_seg = PixelData(data=labels.repeat_interleave(8, 1).repeat_interleave(8, 2))
        samples.append(sample)
    return dict(inputs=inputs, data_samples=samples)


def _cheap_heads(cfg):
    """Fewer sampled RoIs and proposals: the same code paths, a fraction of the work."""
    train_cfg = cfg.model.get('train_cfg') or {}
    if 'rcnn' in train_cfg:
        train_cfg.rpn.sampler.num = 64
        train_cfg.rpn_proposal.nms_pre = train_cfg.rpn_proposal.max_per_img = 100
        train_cfg.rcnn.sampler.num = 32
    if cfg.default_scope == 'mmseg':
        cfg.model.data_preprocessor.size = (H, W)


@pytest.mark.parametrize('key', list(DENSE), ids=['-'.join(k) for k in DENSE])
def test_one_train_step_moves_every_peg_weight(key):
    from mmengine.config import Config
    from mmengine.optim import build_optim_wrapper
    from mmengine.registry import init_default_scope
    from peg_config_utils import host_models, shrink_depth
    torch.manual_seed(0)
    cfg = Config.fromfile(osp.join(REPO_ROOT, 'configs', DENSE[key]))
    init_default_scope(cfg.default_scope)
    shrink_depth(cfg.model.backbone)
    cfg.model.backbone.init_cfg = None  # the ImageNet checkpoint it names is not here
    _cheap_heads(cfg)
    model = host_models(cfg.default_scope).build(cfg.model)
    model.init_weights()
    assert type(model.backbone).__name__ == key[0]
    host = {'RetinaNet': 'RetinaNet', 'MaskRCNN': 'MaskRCNN',
            'SemanticFPN': 'EncoderDecoder'}[key[1]]
    # the host's class, or mmposenc's padding-exact subclass of it (issue 20)
    assert host in [c.__name__ for c in type(model).__mro__], type(model).__mro__

    optim_wrapper = build_optim_wrapper(model, cfg.optim_wrapper)
    pegs = {n: p.detach().clone() for n, p in model.backbone.pegs.named_parameters()}
    assert pegs
    if cfg.default_scope == 'mmseg':
        data = _seg_batch()
    else:
        data = _det_batch(with_mask=key[1] == 'MaskRCNN')
    model.train()
    log_vars = model.train_step(data, optim_wrapper)

    expected = {'RetinaNet': ('loss_cls', 'loss_bbox'),
                'MaskRCNN': ('loss_rpn_cls', 'loss_cls', 'loss_bbox', 'loss_mask'),
                'SemanticFPN': ('decode.loss_ce', )}[key[1]]
    for name in expected + ('loss', ):
        assert name in log_vars, f'{name} missing from {sorted(log_vars)}'
        assert torch.isfinite(torch.as_tensor(log_vars[name])), (name, log_vars[name])
    assert log_vars['loss'] > 0
    after = dict(model.backbone.pegs.named_parameters())
    unchanged = [n for n, p in pegs.items() if torch.equal(p, after[n].detach())]
    assert not unchanged, f'PEG weights not updated by the step: {unchanged}'
