"""UniViT's random training resolution, as a wrapper around any data preprocessor."""
from typing import Optional, Sequence, Union

import torch
import torch.nn.functional as F
from mmengine.model import BaseDataPreprocessor

from mmposenc.registry import MODELS


@MODELS.register_module()
class RandomResolutionDataPreprocessor(BaseDataPreprocessor):
    """Resize every training batch to a resolution drawn at random (`UniViT
    <https://arxiv.org/abs/2106.03143>`_'s multi-resolution training, used with CAPE).

    The wrapped ``preprocessor`` (e.g. mmpretrain's ``ClsDataPreprocessor``) first casts,
    normalises and stacks the batch; in training mode the whole batch is then resized
    to ``size x size`` with ``size`` drawn uniformly from ``sizes`` (one draw per batch, so
    a batch stays one tensor). In evaluation mode the batch passes unchanged.

    Args:
        preprocessor (dict | BaseDataPreprocessor): The wrapped preprocessor. Defaults to
            ``dict(type='mmpretrain.ClsDataPreprocessor')``.
        sizes (Sequence[int]): Candidate square resolutions. Defaults to
            ``range(128, 321, 32)`` (128, 160, ..., 320; UniViT).
        interpolation (str): Mode of ``F.interpolate``. Defaults to 'bilinear'.
        seed (int, optional): Seed of a private generator for the draws; None uses the
            global torch RNG (seeded by the runner). Defaults to None.
        batch_augments (dict, optional): Passed on to the wrapped preprocessor (mmpretrain's
            ``ImageClassifier`` puts ``train_cfg.augments``, e.g. Mixup/CutMix, here).
            Defaults to None.

    Examples:
        >>> import torch
        >>> from mmengine.model import BaseDataPreprocessor
        >>> pre = RandomResolutionDataPreprocessor(BaseDataPreprocessor(), sizes=[32, 64])
        >>> out = pre(dict(inputs=torch.rand(2, 3, 48, 48)), training=True)
        >>> out['inputs'].shape[-1] in (32, 64)
        True
    """

    def __init__(self,
                 preprocessor: Union[dict, BaseDataPreprocessor] = dict(
                     type='mmpretrain.ClsDataPreprocessor'),
                 sizes: Sequence[int] = tuple(range(128, 321, 32)),
                 interpolation: str = 'bilinear',
                 seed: Optional[int] = None,
                 batch_augments: Optional[dict] = None):
        super().__init__()
        if batch_augments is not None:
            if not isinstance(preprocessor, dict):
                raise ValueError('batch_augments needs the preprocessor as a config dict')
            preprocessor = dict(preprocessor, batch_augments=batch_augments)
        sizes = tuple(int(s) for s in sizes)
        if not sizes or min(sizes) < 1:
            raise ValueError(f'sizes must be a non-empty list of positive ints, got {sizes}')
        self.preprocessor = (MODELS.build(preprocessor)
                             if isinstance(preprocessor, dict) else preprocessor)
        self.sizes = sizes
        self.interpolation = interpolation
        self.generator = None if seed is None else torch.Generator().manual_seed(seed)
        #: resolution of the last training batch (for logging and tests)
        self.last_size: Optional[int] = None

    def sample_size(self) -> int:
        """Draw one of ``sizes``."""
        i = torch.randint(len(self.sizes), (1, ), generator=self.generator).item()
        return self.sizes[i]

    def forward(self, data: dict, training: bool = False) -> dict:
        data = self.preprocessor(data, training)
        if training:
            size = self.sample_size()
            self.last_size = size
            inputs = data['inputs']
            if tuple(inputs.shape[-2:]) != (size, size):
                align = False if self.interpolation in ('bilinear', 'bicubic') else None
                data['inputs'] = F.interpolate(inputs, size=(size, size),
                                               mode=self.interpolation, align_corners=align)
            samples = data.get('data_samples')
            if samples is not None:
                for s in samples:
                    if hasattr(s, 'set_metainfo'):
                        s.set_metainfo(dict(batch_input_shape=(size, size)))
        return data

    def extra_repr(self) -> str:
        return f'sizes={self.sizes}, interpolation={self.interpolation!r}'
