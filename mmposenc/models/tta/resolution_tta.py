"""Resolution test-time augmentation: the mean of the logits at several resolutions."""
from typing import Optional, Sequence, Union

import torch
import torch.nn as nn
import torch.nn.functional as F
from mmengine.model import BaseModel

from mmposenc.registry import MODELS


@MODELS.register_module()
class ResolutionTTAClassifier(BaseModel):
    """Average a classifier's logits over resized copies of the test batch (`UniViT
    <https://arxiv.org/abs/2106.03143>`_: resolutions ``r - 32, r, r + 32``).

    Wraps an mmpretrain-style classifier: ``module(inputs, mode='tensor')`` must return
    the logits and ``module.head._get_predictions(logits, data_samples)`` must turn them
    into predictions (true of ``ImageClassifier`` with a ``ClsHead``). Used as
    ``tta_model=dict(type='mmposenc.ResolutionTTAClassifier')`` (the test script puts
    the model into ``module``) or directly.

    Args:
        module (dict | nn.Module): The classifier.
        offsets (Sequence[int]): Added to the batch's height and width. Defaults to
            (-32, 0, 32).
        interpolation (str): Mode of ``F.interpolate``. Defaults to 'bilinear'.
        data_preprocessor (dict, optional): Unused: the wrapped classifier's own
            preprocessor is applied. Defaults to None.
    """

    def __init__(self,
                 module: Union[dict, nn.Module],
                 offsets: Sequence[int] = (-32, 0, 32),
                 interpolation: str = 'bilinear',
                 data_preprocessor: Optional[dict] = None):
        super().__init__()
        self.module = MODELS.build(module) if isinstance(module, dict) else module
        if not offsets:
            raise ValueError('offsets must not be empty')
        self.offsets = tuple(int(o) for o in offsets)
        self.interpolation = interpolation

    def logits(self, inputs: torch.Tensor) -> torch.Tensor:
        """Mean logits of the resized copies of the preprocessed ``inputs`` (B, C, H, W)."""
        H, W = inputs.shape[-2:]
        total = None
        for o in self.offsets:
            size = (H + o, W + o)
            if min(size) < 1:
                raise ValueError(f'offset {o} gives an empty image for input size {(H, W)}')
            x = inputs
            if o != 0:
                align = False if self.interpolation in ('bilinear', 'bicubic') else None
                x = F.interpolate(inputs, size=size, mode=self.interpolation,
                                  align_corners=align)
            out = self.module(x, mode='tensor')
            total = out if total is None else total + out
        return total / len(self.offsets)

    def forward(self, inputs, data_samples=None, mode='tensor'):
        logits = self.logits(inputs)
        if mode == 'tensor':
            return logits
        if mode == 'predict':
            return self.module.head._get_predictions(logits, data_samples)
        raise RuntimeError(f'ResolutionTTAClassifier supports modes tensor/predict, '
                           f'got {mode!r}')

    def test_step(self, data):
        data = self.module.data_preprocessor(data, False)
        return self(data['inputs'], data.get('data_samples'), mode='predict')

    val_step = test_step

    def extra_repr(self) -> str:
        return f'offsets={self.offsets}, interpolation={self.interpolation!r}'
