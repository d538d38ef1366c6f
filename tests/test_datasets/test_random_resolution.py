"""RandomResolutionDataset sets the drawn size on the resizing transforms for one item only: the
configured scale is back after an item at another size, after a failing pipeline and after a
refetch. (Real-image views: tests/test_models/test_univit.py.)"""
import numpy as np
import pytest

from mmposenc.datasets import RandomResolutionDataset

CONFIGURED = (224, 224)


class RandomResizedCrop:
    """Stands for mmpretrain's transform: the wrapper finds it by class name and sets ``scale``."""

    def __init__(self, scale):
        self.scale = scale


class Pipeline:
    """Records the crop's scale at each call; ``fail`` / ``none`` items raise / give None."""

    def __init__(self, fail=(), none=()):
        self.crop = RandomResizedCrop(CONFIGURED)
        self.transforms = [object(), self.crop]
        self.fail, self.none, self.seen = set(fail), set(none), []

    def __call__(self, info):
        self.seen.append((info['idx'], self.crop.scale))
        if info['idx'] in self.fail:
            raise RuntimeError('broken image')
        if info['idx'] in self.none:
            return None
        return dict(idx=info['idx'], scale=self.crop.scale)


class Dataset:
    metainfo = dict(classes=('a', ))

    def __init__(self, n=4, **kwargs):
        self.n, self.pipeline, self.max_refetch = n, Pipeline(**kwargs), 3

    def __len__(self):
        return self.n

    def get_data_info(self, idx):
        return dict(idx=idx)

    def __getitem__(self, idx):
        return self.pipeline(self.get_data_info(idx))


@pytest.mark.parametrize('size', [320, 128])
def test_scale_is_restored_after_an_item_at_another_size(size):
    ds = RandomResolutionDataset(Dataset())
    crop = ds.dataset.pipeline.crop
    item = ds[(1, size)]
    assert item == dict(idx=1, scale=(size, size))  # the pipeline ran at the drawn size
    assert crop.scale == CONFIGURED  # and the configured size is back
    assert ds[2] == dict(idx=2, scale=CONFIGURED)  # a plain index: the configured size
    assert ds[(3, 224)]['scale'] == (224, 224) and crop.scale == CONFIGURED


def test_scale_is_restored_after_a_failing_pipeline():
    ds = RandomResolutionDataset(Dataset(fail={0}))
    with pytest.raises(RuntimeError, match='broken image'):
        ds[(0, 320)]
    assert ds.dataset.pipeline.crop.scale == CONFIGURED


def test_refetch_uses_the_drawn_size_and_restores_it():
    """An item whose pipeline gives None is replaced by another, at the same drawn size."""
    ds = RandomResolutionDataset(Dataset(n=4, none={0}))
    np.random.seed(0)
    item = ds[(0, 288)]
    assert item['idx'] != 0 and item['scale'] == (288, 288)
    assert all(scale == (288, 288) for _, scale in ds.dataset.pipeline.seen)
    assert ds.dataset.pipeline.crop.scale == CONFIGURED


def test_scale_is_restored_on_mmpretrains_transform():
    """The same with mmpretrain's RandomResizedCrop in an mmengine Compose."""
    pytest.importorskip('mmpretrain')
    from mmengine.dataset import Compose
    from mmpretrain.datasets.transforms import RandomResizedCrop as Crop

    class Images(Dataset):
        def __init__(self):
            super().__init__()
            self.pipeline = Compose([Crop(scale=224)])

        def get_data_info(self, idx):
            rng = np.random.default_rng(idx)
            return dict(img=rng.integers(0, 255, (60, 80, 3), dtype=np.uint8))

    ds = RandomResolutionDataset(Images())
    crop = ds.dataset.pipeline.transforms[0]
    configured = crop.scale
    assert ds[(0, 96)]['img'].shape == (96, 96, 3)
    assert crop.scale == configured
    assert ds[0]['img'].shape[:2] == tuple(configured)
