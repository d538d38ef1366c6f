"""UniViT's random training resolution (CAPE, Sec. 5.1.2), applied in the data pipeline.

"During training we resize all images in the same batch to a randomly chosen size, uniformly
sampled in the range [128, 320]^2 with a step of 32^2." Two pieces do it where the pixels are
still those of the source image:

- :class:`RandomResolutionBatchSampler` draws one size per batch and hands it out with every
  index of the batch, as ``(index, size)``;
- :class:`RandomResolutionDataset` wraps the training dataset and runs its pipeline with the
  resizing transform (``RandomResizedCrop`` in the DeiT pipeline) set to that size, so a batch
  drawn at 320 is cropped and resized from the source image at 320, not upsampled from 224.

Config (the UniViT config of ``configs/cape`` does exactly this)::

    train_dataloader = dict(
        batch_sampler=dict(type='mmposenc.RandomResolutionBatchSampler',
                           sizes=[128, 160, 192, 224, 256, 288, 320]),
        dataset=dict(_delete_=True, type='mmposenc.RandomResolutionDataset',
                     dataset={{_base_.train_dataloader.dataset}}))
"""
import copy
from typing import Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch
from torch.utils.data import BatchSampler, Sampler

from mmposenc.registry import DATA_SAMPLERS, DATASETS

UNIVIT_SIZES = tuple(range(128, 321, 32))


@DATA_SAMPLERS.register_module()
class RandomResolutionBatchSampler(BatchSampler):
    """Batches of ``(index, size)`` with one ``size`` drawn per batch.

    Use it with :class:`RandomResolutionDataset`, which reads the size. The draws come from a
    private generator seeded with ``seed + epoch`` (the epoch of the wrapped sampler, which
    the runner sets), so they are reproducible, differ between epochs and, with the same
    ``seed`` on every rank (the default, as mmengine's ``DefaultSampler``), agree across ranks.

    Args:
        sampler (Sampler): The index sampler (the runner passes the config's ``sampler``).
        batch_size (int): Images per batch (the runner passes the dataloader's).
        sizes (Sequence[int]): Candidate square resolutions. Defaults to 128, 160, ..., 320
            (UniViT).
        drop_last (bool): Drop the last incomplete batch. Defaults to False.
        seed (int, optional): Seed of the draws; None synchronises a random seed across
            ranks (``mmengine.dist.sync_random_seed``). Defaults to None.

    Examples:
        >>> from torch.utils.data import SequentialSampler
        >>> bs = RandomResolutionBatchSampler(SequentialSampler(range(5)), 2, sizes=[32], seed=0)
        >>> list(bs)
        [[(0, 32), (1, 32)], [(2, 32), (3, 32)], [(4, 32)]]
    """

    def __init__(self,
                 sampler: Sampler,
                 batch_size: int,
                 sizes: Sequence[int] = UNIVIT_SIZES,
                 drop_last: bool = False,
                 seed: Optional[int] = None):
        super().__init__(sampler, batch_size, drop_last)
        sizes = tuple(int(s) for s in sizes)
        if not sizes or min(sizes) < 1:
            raise ValueError(f'sizes must be a non-empty list of positive ints, got {sizes}')
        if seed is None:
            from mmengine.dist import sync_random_seed
            seed = sync_random_seed()
        self.sizes = sizes
        self.seed = int(seed)
        #: the size of the batch handed out last (the sampler runs in the main process)
        self.last_size: Optional[int] = None

    def __iter__(self) -> Iterator[List[Tuple[int, int]]]:
        g = torch.Generator().manual_seed(self.seed + int(getattr(self.sampler, 'epoch', 0)))
        for batch in super().__iter__():
            size = self.sizes[int(torch.randint(len(self.sizes), (1, ), generator=g))]
            self.last_size = size
            yield [(idx, size) for idx in batch]


@DATASETS.register_module()
class RandomResolutionDataset:
    """A dataset whose items can be asked for at a given resolution: ``dataset[(i, size)]``.

    Runs the wrapped dataset's pipeline with every transform of type ``resize_types`` set to
    output ``size x size`` (their ``scale`` attribute; restored afterwards), so the image is
    resized from its source at the drawn size. A plain index gives the item as the wrapped
    dataset gives it. Everything else (``len``, ``metainfo``, ``get_data_info``) is the
    wrapped dataset's.

    Args:
        dataset (dict | Dataset): The training dataset (an mmengine ``BaseDataset``).
        resize_types (Sequence[str]): Class names of the pipeline transforms that set the
            output size through a ``scale`` attribute. Defaults to ``('RandomResizedCrop', )``
            (mmpretrain's, as in the DeiT pipeline).

    Raises:
        ValueError: the pipeline has no transform of ``resize_types``.
    """

    def __init__(self,
                 dataset: Union[dict, object],
                 resize_types: Sequence[str] = ('RandomResizedCrop', )):
        self.dataset = DATASETS.build(dataset) if isinstance(dataset, dict) else dataset
        self.resize_types = tuple(resize_types)
        self._resizers = [t for t in getattr(self.dataset.pipeline, 'transforms', [])
                          if type(t).__name__ in self.resize_types]
        if not self._resizers:
            raise ValueError(f'RandomResolutionDataset: the pipeline of '
                             f'{type(self.dataset).__name__} has no '
                             f'{" / ".join(self.resize_types)} to set the drawn size on')

    @property
    def metainfo(self) -> dict:
        return copy.deepcopy(self.dataset.metainfo)

    def full_init(self):
        if hasattr(self.dataset, 'full_init'):
            self.dataset.full_init()

    def get_data_info(self, idx: int) -> dict:
        return self.dataset.get_data_info(idx)

    def __len__(self) -> int:
        return len(self.dataset)

    def prepare_data(self, idx: int, size: int):
        """The wrapped pipeline on item ``idx`` with the resizing transforms at ``size``."""
        saved = [t.scale for t in self._resizers]
        try:
            for t in self._resizers:
                t.scale = (size, size)
            return self.dataset.pipeline(self.dataset.get_data_info(idx))
        finally:
            for t, s in zip(self._resizers, saved):
                t.scale = s

    def __getitem__(self, idx: Union[int, Tuple[int, int]]):
        if not isinstance(idx, (tuple, list)):
            return self.dataset[idx]
        idx, size = int(idx[0]), int(idx[1])
        self.full_init()
        max_refetch = getattr(self.dataset, 'max_refetch', 1000)
        for _ in range(max_refetch + 1):  # as mmengine's BaseDataset: None -> another image
            data = self.prepare_data(idx, size)
            if data is not None:
                return data
            idx = int(np.random.randint(0, len(self)))
        raise RuntimeError(f'RandomResolutionDataset: no valid image after {max_refetch} '
                           'refetches; check the image paths and the pipeline')

    def __repr__(self) -> str:
        return (f'{type(self).__name__}(resize_types={self.resize_types}, '
                f'dataset={type(self.dataset).__name__}, len={len(self)})')
