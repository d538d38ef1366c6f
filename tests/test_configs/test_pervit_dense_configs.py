"""configs/pervit detection and segmentation configs (RetinaNet, Mask R-CNN, Semantic FPN):
they build with their real widths, train and predict a step, the FPN gets the channels and
strides PerViT produces, the weight-decay ``custom_keys`` exclude exactly the position
encoding, and ``init_cfg=Pretrained(prefix='backbone.')`` loads an mmpretrain ImageClassifier
checkpoint into the dense backbone."""
import glob
import os.path as osp

import pytest
import torch

from conftest import REPO_ROOT

DIR = osp.join(REPO_ROOT, 'configs', 'pervit')
CONFIGS = sorted(glob.glob(osp.join(DIR, 'retinanet_*.py')) +
                 glob.glob(osp.join(DIR, 'mask-rcnn_*.py')) +
                 glob.glob(osp.join(DIR, 'fpn_*.py')))
IDS = [osp.basename(p) for p in CONFIGS]
SHALLOW = [1, 1, 1, 1]  # the arch's widths and heads, one block per stage (fast builds)


def _load(path):
    from mmengine.config import Config
    return Config.fromfile(path)


def _registry(scope):
    from mmengine.registry import init_default_scope
    init_default_scope(scope)
    if scope == 'mmdet':
        import mmdet.models  # noqa: F401
        from mmdet.registry import MODELS
    elif scope == 'mmseg':
        import mmseg.models  # noqa: F401
        from mmseg.registry import MODELS
    else:
        import mmpretrain.models  # noqa: F401
        from mmpretrain.registry import MODELS
    return MODELS


def _shallow(cfg):
    from mmposenc.models.backbones import PerViT
    arch = cfg.model.backbone.arch
    assert isinstance(arch, str) and arch in PerViT.arch_zoo
    cfg.model.backbone.arch = dict(PerViT.arch_zoo[arch], depths=SHALLOW)
    cfg.model.backbone.init_cfg = None  # no checkpoint file in the tests
    return cfg


def _build(path):
    cfg = _shallow(_load(path))
    return cfg, _registry(cfg.default_scope).build(cfg.model)


def _cheap_heads(cfg):
    """Mask R-CNN samples 64 RPN anchors, keeps 100 proposals and samples 32 RoIs per image
    in training (mmdet: 256, 1000 and 512): the same code paths, a fraction of the RoI work."""
    train_cfg = cfg.model.get('train_cfg') or {}
    if 'rcnn' in train_cfg:
        train_cfg.rpn.sampler.num = 64
        train_cfg.rpn_proposal.nms_pre = train_cfg.rpn_proposal.max_per_img = 100
        train_cfg.rcnn.sampler.num = 32
    return cfg


def _pe_parameter_names(model):
    """Names of the position-encoding parameters, found by module type (not by name)."""
    from mmposenc.models.backbones.pervit import PerViTBlock
    from mmposenc.models.layers import (PeripheralDistanceEmbedding,
                                        PeripheralPositionEncoding)
    names = set()
    for mod_name, mod in model.named_modules():
        if isinstance(mod, (PeripheralDistanceEmbedding, PeripheralPositionEncoding)):
            names |= {f'{mod_name}.{n}' for n, _ in mod.named_parameters()}
        elif isinstance(mod, PerViTBlock):
            names |= {f'{mod_name}.cpe.{n}' for n, _ in mod.cpe.named_parameters()}
    return names


def test_shipped_configs():
    names = set(IDS)
    for size in 'tsm':
        assert {f'retinanet_pervit-{size}_fpn_1x_coco.py',
                f'mask-rcnn_pervit-{size}_fpn_1x_coco.py',
                f'fpn_pervit-{size}_8xb4-80k_ade20k-512x512.py'} <= names


@pytest.mark.parametrize('path', CONFIGS, ids=IDS)
def test_fpn_strides_channels_and_no_weight_decay_on_the_position_encoding(path):
    cfg, model = _build(path)
    backbone = model.backbone
    assert list(cfg.model.neck.in_channels) == backbone.out_channels
    assert backbone.out_indices == [0, 1, 2, 3]
    if cfg.default_scope == 'mmdet':  # mmdet's default: 1333 x 800, batches padded to 32
        assert (1333, 800) in [tuple(t.get('scale', ())) for t in cfg.train_pipeline]
        assert cfg.model.data_preprocessor.pad_size_divisor == 32
    else:
        assert tuple(cfg.crop_size) == (512, 512)
    model.eval()
    x = torch.rand(1, 3, 128, 192)
    with torch.no_grad():
        feats = backbone(x)
    assert [tuple(f.shape[1:]) for f in feats] == [
        (c, 128 // s, 192 // s) for c, s in zip(backbone.out_channels, (4, 8, 16, 32))]

    # weight decay: the custom keys exclude exactly the position encoding
    from mmengine.optim import build_optim_wrapper
    names = [n for n, _ in model.named_parameters()]
    keys = cfg.optim_wrapper.paramwise_cfg.custom_keys
    for key in keys:
        assert any(key in n for n in names), f'custom key {key!r} matches no parameter'
    wrapper = build_optim_wrapper(model, cfg.optim_wrapper)
    id_to_name = {id(p): n for n, p in model.named_parameters()}
    decay = {id_to_name[id(p)]: g['weight_decay'] for g in wrapper.optimizer.param_groups
             for p in g['params']}
    pe = _pe_parameter_names(model)
    assert len(pe) == 2 + len(model.backbone.blocks) * (8 + 2)  # w_r/b_r; Phi_p 8; CPE 2
    assert {n for n in pe if decay[n] != 0} == set()
    base = cfg.optim_wrapper.optimizer.weight_decay
    assert decay['backbone.blocks.0.attn.qkv.weight'] == base > 0
    assert decay['backbone.blocks.0.mlp.fc1.weight'] == base
    # only the position encoding (and, in the Swin recipe, norms) loses its decay
    extra = {n for n, d in decay.items() if d == 0} - pe
    norm_key = 'norm' in keys
    assert all(norm_key and 'norm' in n for n in extra), sorted(extra)[:5]


@pytest.mark.parametrize('name', ['retinanet_pervit-t_fpn_1x_coco.py',
                                  'mask-rcnn_pervit-t_fpn_1x_coco.py'])
def test_detector_trains_and_predicts_on_images_of_different_sizes(name):
    from mmdet.structures import DetDataSample
    from mmdet.structures.bbox import HorizontalBoxes
    from mmengine.structures import InstanceData
    torch.manual_seed(0)
    cfg = _cheap_heads(_shallow(_load(osp.join(DIR, name))))
    model = _registry(cfg.default_scope).build(cfg.model)
    sizes = [(96, 150), (80, 100)]  # padded to 96 x 160 by the data preprocessor
    samples = []
    for h, w in sizes:
        s = DetDataSample(metainfo=dict(img_shape=(h, w), ori_shape=(h, w),
                                        scale_factor=(1., 1.)))
        s.gt_instances = InstanceData(
            bboxes=HorizontalBoxes(torch.tensor([[10., 12., 60., 70.]])),
            labels=torch.tensor([3]))
        if 'mask' in name:
            from mmdet.structures.mask import BitmapMasks
            m = torch.zeros(1, h, w, dtype=torch.uint8)
            m[:, 12:70, 10:60] = 1
            s.gt_instances.masks = BitmapMasks(m.numpy(), h, w)
        samples.append(s)
    data = dict(inputs=[torch.randint(0, 255, (3, h, w), dtype=torch.uint8) for h, w in sizes],
                data_samples=samples)
    model.train()
    batch = model.data_preprocessor(data, True)
    assert batch['inputs'].shape[-2:] == (96, 160)
    losses = model(**batch, mode='loss')
    total = sum(v.sum() for k, v in losses.items() if 'loss' in k and torch.is_tensor(v)) + \
        sum(sum(v) for k, v in losses.items() if 'loss' in k and isinstance(v, list))
    assert torch.isfinite(total) and total > 0
    total.backward()
    assert model.backbone.distance_embed.weight.grad.abs().sum() > 0
    model.eval()
    with torch.no_grad():
        preds = model(**model.data_preprocessor(data, False), mode='predict')
    assert len(preds) == 2 and preds[0].pred_instances.bboxes.shape[1] == 4


def test_semantic_fpn_trains_a_step():
    from mmengine.structures import PixelData
    from mmseg.structures import SegDataSample
    torch.manual_seed(0)
    cfg, model = _build(osp.join(DIR, 'fpn_pervit-t_8xb4-80k_ade20k-512x512.py'))
    model.train()
    samples = []
    for _ in range(2):
        s = SegDataSample(metainfo=dict(img_shape=(96, 128), ori_shape=(96, 128),
                                        pad_shape=(96, 128)))
        s.gt_sem_seg = PixelData(data=torch.randint(0, 150, (1, 96, 128)))
        samples.append(s)
    inputs = torch.rand(2, 3, 96, 128)
    losses = model.loss(inputs, samples)
    loss = sum(v for k, v in losses.items() if 'loss' in k)
    assert torch.isfinite(loss) and loss > 0
    loss.backward()


def test_pretrained_prefix_loads_an_image_classifier_checkpoint(tmp_path):
    """An mmpretrain ImageClassifier of pervit-tiny_8xb128_in1k.py (shallow), saved as a
    checkpoint, loads through the RetinaNet config's init_cfg (Pretrained, prefix
    'backbone.') into the dense backbone: every classifier backbone tensor arrives, the head
    does not, and what the classifier lacks (norm0-2, resamplers) keeps its init."""
    from mmposenc.models.backbones import PerViT
    torch.manual_seed(0)
    cls_cfg = _load(osp.join(DIR, 'pervit-tiny_8xb128_in1k.py'))
    cls_cfg.model.backbone.arch = dict(PerViT.arch_zoo['tiny'], depths=SHALLOW)
    classifier = _registry('mmpretrain').build(cls_cfg.model)
    with torch.no_grad():  # weights that no initialisation produces
        for p in classifier.parameters():
            p.add_(torch.randn_like(p))
        for name, b in classifier.named_buffers():
            if b.is_floating_point():
                b.add_(torch.rand_like(b))
    ckpt = tmp_path / 'pervit-tiny_in1k.pth'
    torch.save(dict(state_dict=classifier.state_dict(), meta=dict()), str(ckpt))

    det_cfg = _load(osp.join(DIR, 'retinanet_pervit-t_fpn_1x_coco.py'))
    init_cfg = det_cfg.model.backbone.init_cfg
    assert init_cfg.type == 'Pretrained' and init_cfg.prefix == 'backbone.'
    det_cfg.model.backbone.arch = dict(PerViT.arch_zoo['tiny'], depths=SHALLOW)
    det_cfg.model.backbone.init_cfg.checkpoint = str(ckpt)
    detector = _registry('mmdet').build(det_cfg.model)
    fresh = {k: v.clone() for k, v in detector.backbone.state_dict().items()}
    detector.init_weights()

    dense = detector.backbone.state_dict()
    source = {k[len('backbone.'):]: v for k, v in classifier.state_dict().items()
              if k.startswith('backbone.')}
    assert len(source) > 100
    for k, v in source.items():
        assert k in dense, k
        torch.testing.assert_close(dense[k], v, rtol=0, atol=0, msg=k)
    missing = set(dense) - set(source)
    assert missing and all(k.startswith(('norm0.', 'norm1.', 'norm2.', 'resamplers.'))
                           for k in missing), sorted(missing)
    assert not torch.equal(dense['blocks.0.attn.ppe.proj1.weight'],
                           fresh['blocks.0.attn.ppe.proj1.weight'])


@pytest.mark.parametrize('path', [p for p in CONFIGS if osp.basename(p).startswith('fpn_')],
                         ids=[i for i in IDS if i.startswith('fpn_')])
def test_semantic_fpn_lr_decays(path):
    """Poly (power 0.9) from 1e-4 down to 0 over the 80k iterations; the inherited mmseg
    schedule's eta_min=1e-4 (its base lr) would keep it constant."""
    from mmengine.optim.scheduler import PolyLR
    cfg = _load(path)
    assert cfg.train_cfg.max_iters == 80000
    (sched, ) = cfg.param_scheduler
    opt = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))],
                            lr=cfg.optim_wrapper.optimizer.lr)
    kwargs = {k: v for k, v in sched.items() if k not in ('type', '_scope_')}
    assert sched.type == 'PolyLR'
    poly = PolyLR(opt, **kwargs)
    lrs = {}
    for it in range(80000):
        if it in (0, 20000, 40000, 79999):
            lrs[it] = opt.param_groups[0]['lr']
        poly.step()
    assert lrs[0] == pytest.approx(1e-4)
    assert lrs[40000] == pytest.approx(1e-4 * 0.5**0.9, rel=1e-3)
    assert lrs[0] > lrs[20000] > lrs[40000] > lrs[79999] and lrs[79999] < 1e-8
