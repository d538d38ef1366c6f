"""UniViT pieces (CAPE Sec. 5.1.2-5.1.3): a random resolution per training batch and resolution
test-time augmentation, both resizing the *source* image at the drawn / view size.

The old implementation resized the already-cropped 224 x 224 batch tensor (a 320 batch was an
upsampled 224 crop, a 256 TTA view an upsampled 224 view). The real-image tests below show the
views now equal a direct resize of the source and carry more detail than the upsampled crop.
"""
import copy
import glob
import os.path as osp

import mmcv
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import SequentialSampler

from mmposenc.datasets import RandomResolutionBatchSampler, RandomResolutionDataset
from mmposenc.models.tta import ResolutionTTAClassifier
from mmposenc.models.tta.resolution_tta import resolution_tta_pipeline

pytest.importorskip('mmpretrain')

UNIVIT_CFG = osp.join(osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__)))), 'configs',
                      'cape', 'vit-base-p16_cape-univit_16xb64_in1k.py')


def detail(img: np.ndarray) -> float:
    """Mean absolute difference of neighbouring pixels (high-frequency content)."""
    img = img.astype(np.float64)
    return float(np.abs(np.diff(img, axis=0)).mean() + np.abs(np.diff(img, axis=1)).mean())


def upsample(img: np.ndarray, size: int) -> np.ndarray:
    """What the old tensor-level resize did: bilinear F.interpolate of the smaller view."""
    t = torch.from_numpy(img.astype(np.float32)).permute(2, 0, 1)[None]
    return F.interpolate(t, size=(size, size), mode='bilinear',
                         align_corners=False)[0].permute(1, 2, 0).numpy()


@pytest.fixture
def coco_dataset(coco128_root):
    """A few real COCO128 images as an unlabelled mmpretrain dataset with the DeiT train crop."""
    from mmengine.registry import init_default_scope
    from mmpretrain.datasets import CustomDataset
    init_default_scope('mmpretrain')
    pipeline = [dict(type='LoadImageFromFile'),
                dict(type='RandomResizedCrop', scale=224, backend='pillow',
                     interpolation='bicubic'),
                dict(type='PackInputs')]
    ds = CustomDataset(data_root=coco128_root, data_prefix='train2017', with_label=False,
                       pipeline=pipeline)
    ds.data_list = ds.data_list[:12]
    return ds


# ----------------------------------------------------------------- batch sampler
def test_batch_sampler_one_size_per_batch_seeded_and_per_epoch():
    from mmengine.dataset import DefaultSampler
    sampler = DefaultSampler(list(range(50)), shuffle=True, seed=0)
    bs = RandomResolutionBatchSampler(sampler, batch_size=4, seed=3)
    assert bs.sizes == (128, 160, 192, 224, 256, 288, 320)  # UniViT
    epoch0 = list(bs)
    assert len(epoch0) == len(bs) == 13
    for batch in epoch0:
        assert len({s for _, s in batch}) == 1  # one size per batch
    assert sorted(i for b in epoch0 for i, _ in b) == list(range(50))
    assert {b[0][1] for b in epoch0} >= {128, 320}  # the draws spread over the sizes
    assert list(bs) == epoch0  # reproducible
    sampler.set_epoch(1)
    assert [b[0][1] for b in bs] != [b[0][1] for b in epoch0]  # a new draw per epoch
    assert bs.last_size == list(bs)[-1][0][1]
    bs2 = RandomResolutionBatchSampler(SequentialSampler(range(5)), 2, drop_last=True, seed=0)
    assert [len(b) for b in bs2] == [2, 2]
    with pytest.raises(ValueError, match='sizes'):
        RandomResolutionBatchSampler(sampler, 4, sizes=[])


# ------------------------------------------------------------------ dataset wrapper
def test_view_at_the_drawn_size_is_a_direct_resize_of_the_source(coco_dataset):
    """The 320 view is RandomResizedCrop's crop box resized from the source at 320: equal to
    mmcv's crop + resize of the original image, and with more detail than the 224 view of the
    same box upsampled to 320 (the old behaviour)."""
    ds = RandomResolutionDataset(coco_dataset)
    crop = ds._resizers[0]
    for idx in range(3):
        np.random.seed(idx)
        big = ds[(idx, 320)]['inputs'].permute(1, 2, 0).numpy()
        assert crop.scale == (224, 224)  # restored after an item at another size
        np.random.seed(idx)
        small = ds[(idx, 224)]['inputs'].permute(1, 2, 0).numpy()
        assert big.shape == (320, 320, 3) and small.shape == (224, 224, 3)
        src = mmcv.imread(ds.get_data_info(idx)['img_path'])
        np.random.seed(idx)
        oh, ow, th, tw = crop.rand_crop_params(src)  # the same box as both views
        patch = mmcv.imcrop(src, np.array([ow, oh, ow + tw - 1, oh + th - 1]))
        direct = mmcv.imresize(patch, (320, 320), interpolation='bicubic', backend='pillow')
        np.testing.assert_array_equal(big, direct)
        up = upsample(small, 320)
        assert np.abs(big - up).mean() > 1.0
        assert detail(big) > 1.1 * detail(up), (detail(big), detail(up))
    # a plain index is the wrapped dataset's item; len / metainfo pass through
    assert ds[0]['inputs'].shape[-2:] == (224, 224)
    assert len(ds) == len(coco_dataset) and ds.metainfo == coco_dataset.metainfo


def test_dataset_wrapper_needs_a_resizing_transform(coco_dataset):
    ds = copy.copy(coco_dataset)
    from mmengine.dataset import Compose
    ds.pipeline = Compose([dict(type='LoadImageFromFile'), dict(type='PackInputs')])
    with pytest.raises(ValueError, match='RandomResizedCrop'):
        RandomResolutionDataset(ds)


@pytest.mark.parametrize('num_workers,sampler', [(0, 'DefaultSampler'), (2, 'DefaultSampler'),
                                                 (0, 'RepeatAugSampler')])
def test_dataloader_batches_have_the_drawn_size(coco_dataset, num_workers, sampler):
    """Through mmengine's Runner.build_dataloader (the config path), with worker processes
    and with the CAPE configs' RepeatAugSampler too: every batch is one tensor at the size the
    sampler drew for it."""
    from mmengine.runner import Runner
    cfg = dict(batch_size=3, num_workers=num_workers,
               sampler=dict(type=sampler, shuffle=False),
               batch_sampler=dict(type='mmposenc.RandomResolutionBatchSampler',
                                  sizes=[64, 96, 128], seed=1),
               dataset=dict(type='mmposenc.RandomResolutionDataset', dataset=coco_dataset))
    loader = Runner.build_dataloader(cfg, seed=0)
    expected = [b[0][1] for b in loader.batch_sampler]
    seen = []
    for batch in loader:
        sizes = {tuple(img.shape) for img in batch['inputs']}
        assert len(sizes) == 1
        seen.append(sizes.pop()[-1])
    assert seen == expected and len(set(seen)) > 1


# ------------------------------------------------------------------ resolution TTA
def _tta_views(cfg_pipeline, img_path):
    from mmengine.dataset import Compose
    from mmengine.registry import init_default_scope
    init_default_scope('mmpretrain')
    return Compose(copy.deepcopy(cfg_pipeline))(dict(img_path=img_path))


def test_tta_views_are_resized_from_the_source(coco128_root):
    """The UniViT config's tta_pipeline: three views at 192 / 224 / 256, each the DeiT test
    transform at its own size applied to the source (ResizeEdge to size * 256 / 224, centre
    crop); the 256 view has more detail than the 224 view upsampled (the old TTA)."""
    from mmengine.config import Config
    from mmpretrain.registry import TRANSFORMS
    cfg = Config.fromfile(UNIVIT_CFG)
    assert cfg.tta_pipeline == resolution_tta_pipeline((192, 224, 256))
    paths = sorted(glob.glob(osp.join(coco128_root, 'train2017', '*.jpg')))[:3]
    for path in paths:
        views = _tta_views(cfg.tta_pipeline, path)['inputs']
        assert [tuple(v.shape) for v in views] == [(3, s, s) for s in (192, 224, 256)]
        src = mmcv.imread(path)
        for v, s in zip(views, (192, 224, 256)):  # the host's test transforms at size s
            resize = TRANSFORMS.build(dict(type='ResizeEdge', scale=int(s * 256 / 224),
                                           edge='short', backend='pillow',
                                           interpolation='bicubic'))
            crop = TRANSFORMS.build(dict(type='CenterCrop', crop_size=s))
            direct = crop(resize(dict(img=src.copy())))['img']
            assert min(resize(dict(img=src.copy()))['img'].shape[:2]) == int(s * 256 / 224)
            np.testing.assert_array_equal(v.permute(1, 2, 0).numpy(), direct)
        big = views[2].permute(1, 2, 0).numpy()
        up = upsample(views[1].permute(1, 2, 0).numpy(), 256)
        assert detail(big) > 1.1 * detail(up), (detail(big), detail(up))


def _tiny_classifier():
    from mmpretrain.models import ImageClassifier
    torch.manual_seed(0)
    return ImageClassifier(
        backbone=dict(type='mmposenc.PEViT', arch=dict(embed_dims=32, num_layers=1,
                                                       num_heads=2, feedforward_channels=64),
                      img_size=224, patch_size=32, pos_encoding=dict(type='mmposenc.CAPE2d')),
        head=dict(type='LinearClsHead', num_classes=3, in_channels=32),
        data_preprocessor=dict(type='ClsDataPreprocessor', num_classes=3,
                               mean=[123.675, 116.28, 103.53], std=[58.395, 57.12, 57.375],
                               to_rgb=True)).eval()


@pytest.mark.parametrize('collate', ['pseudo_collate', 'default_collate'])
def test_resolution_tta_averages_the_logits_of_the_views(coco128_root, collate):
    """A batch of two real images through the tta_pipeline and the dataloader's collate:
    the prediction is the softmax of the mean of the classifier's logits on each view."""
    from mmengine.dataset import default_collate, pseudo_collate
    from mmengine.registry import init_default_scope
    init_default_scope('mmpretrain')
    clf = _tiny_classifier()
    tta = ResolutionTTAClassifier(clf)
    paths = sorted(glob.glob(osp.join(coco128_root, 'train2017', '*.jpg')))[:2]
    pipeline = resolution_tta_pipeline((192, 224, 256))
    items = []
    for p in paths:
        item = _tta_views(pipeline, p)
        for s in item['data_samples']:
            s.set_gt_label(1)
        items.append(item)
    data = (pseudo_collate if collate == 'pseudo_collate' else default_collate)(items)
    preds = tta.test_step(data)
    with torch.no_grad():
        ref = sum(clf(clf.data_preprocessor(dict(inputs=[it['inputs'][v] for it in items]),
                                            False)['inputs'], mode='tensor')
                  for v in range(3)) / 3
    assert len(preds) == 2
    for p, r in zip(preds, ref):
        torch.testing.assert_close(p.pred_score, r.softmax(-1), atol=1e-5, rtol=1e-5)
        assert p.gt_label.item() == 1
    # mmengine's BaseTTAModel path (per-view predictions, merge_preds) gives the same scores,
    # and a checkpoint of the classifier loads into the wrapper (BaseTTAModel keys)
    from mmengine.model import BaseTTAModel
    from mmengine.runner.checkpoint import load_state_dict
    scores = [p.pred_score.clone() for p in preds]  # the next call reuses the samples
    merged = BaseTTAModel.test_step(tta, data)
    for p, r in zip(merged, scores):
        torch.testing.assert_close(p.pred_score, r, atol=1e-5, rtol=1e-4)
        assert p.pred_label == r.argmax()
    other = ResolutionTTAClassifier(_tiny_classifier())
    with torch.no_grad():
        for prm in other.parameters():
            prm.add_(1.)
    load_state_dict(other, clf.state_dict(), strict=True)
    assert all(torch.equal(a, b) for a, b in zip(other.module.state_dict().values(),
                                                  clf.state_dict().values()))
    # a plain test batch is refused with a hint
    plain = pseudo_collate([dict(inputs=it['inputs'][1], data_samples=it['data_samples'][1])
                            for it in items])
    with pytest.raises(ValueError, match='--tta'):
        tta.test_step(plain)


# tools/test.py --tta end to end, on the shipped CAPE / UniViT configs (whose tta_model is this
# ResolutionTTAClassifier): tests/test_tools/test_train_test_tools.py
# ::test_test_tool_tta_on_a_shipped_config


def test_test_tool_tta_needs_tta_model_and_pipeline():
    import importlib.util
    from mmengine.config import Config
    from conftest import REPO_ROOT
    spec = importlib.util.spec_from_file_location('mmposenc_test_tool',
                                                  osp.join(REPO_ROOT, 'tools', 'test.py'))
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    cfg = Config.fromfile(UNIVIT_CFG)
    tool.apply_tta(cfg)
    assert cfg.model.type == 'mmposenc.ResolutionTTAClassifier'
    assert cfg.model.module.backbone.type == 'mmposenc.PEViT'
    assert cfg.test_dataloader.dataset.pipeline == cfg.tta_pipeline
    plain = Config(dict(model=dict(type='X'), tta_pipeline=[]))
    with pytest.raises(ValueError, match='tta_model'):
        tool.apply_tta(plain)
