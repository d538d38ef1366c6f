"""Resolution test-time augmentation: mean logits over views at several resolutions."""
from typing import List, Optional, Union

import torch
import torch.nn as nn
from mmengine.model import BaseTTAModel

from mmposenc.registry import MODELS


def resolution_tta_pipeline(sizes=(192, 224, 256), crop_ratio: float = 224 / 256,
                            **resize_kwargs) -> List[dict]:
    """A ``tta_pipeline`` whose views are the test pipeline at ``sizes``.

    Each view resizes the short edge to ``int(size / crop_ratio)``, then centre-crops ``size``.

    Args:
        sizes (Sequence[int]): View resolutions. Defaults to (192, 224, 256).
        crop_ratio (float): Crop size over resized short edge. Defaults to 224 / 256.
        **resize_kwargs: Extra arguments of ``ResizeEdge``. Defaults to
            ``backend='pillow', interpolation='bicubic'``.

    Returns:
        list[dict]: ``[LoadImageFromFile, TestTimeAug([...views...], [PackInputs])]``.
    """
    resize_kwargs = dict(dict(backend='pillow', interpolation='bicubic'), **resize_kwargs)
    views = [
        dict(type='Compose', transforms=[
            dict(type='ResizeEdge', scale=int(s / crop_ratio), edge='short', **resize_kwargs),
            dict(type='CenterCrop', crop_size=s),
        ]) for s in sizes
    ]
    return [
        dict(type='LoadImageFromFile'),
        dict(type='TestTimeAug', transforms=[views, [dict(type='PackInputs')]]),
    ]


@MODELS.register_module()
class ResolutionTTAClassifier(BaseTTAModel):
    """A classifier that averages its logits over the resolution views of each image.

    The views come from :func:`resolution_tta_pipeline`; use it with ``tools/test.py --tta``.
    See docs/methods/cape.md.

    Args:
        module (dict | nn.Module): The classifier.
        data_preprocessor (dict, optional): Unused: views use the module's. Defaults to None.

    Examples:
        >>> tta = ResolutionTTAClassifier(dict(type='mmpretrain.ImageClassifier',
        ...     backbone=dict(type='mmposenc.PEViT', arch=dict(embed_dims=32, num_layers=1,
        ...                   num_heads=2, feedforward_channels=64), patch_size=16,
        ...                   pos_encoding=dict(type='mmposenc.CAPE2d')),
        ...     head=dict(type='mmpretrain.LinearClsHead', num_classes=3, in_channels=32)))
        >>> pipeline = resolution_tta_pipeline(sizes=(192, 224, 256))  # the tta_pipeline
    """

    def __init__(self, module: Union[dict, nn.Module], data_preprocessor: Optional[dict] = None):
        if isinstance(module, dict):
            module = MODELS.build(module)
        super().__init__(module)

    @staticmethod
    def split_views(data: dict) -> List[dict]:
        """The per-view batches of a collated ``TestTimeAug`` batch: ``data[key][v]``."""
        inputs = data.get('inputs') if isinstance(data, dict) else None
        is_views = isinstance(inputs, (list, tuple)) and len(inputs) > 0 and (
            isinstance(inputs[0], (list, tuple))
            or (torch.is_tensor(inputs[0]) and inputs[0].dim() == 4))
        if not is_views:
            raise ValueError('ResolutionTTAClassifier expects the views of a TestTimeAug '
                             'tta_pipeline (one list per view); got a plain batch: run the test '
                             'with --tta, which sets the test pipeline to tta_pipeline')
        return [{k: v[i] for k, v in data.items()} for i in range(len(inputs))]

    def logits_and_samples(self, data: dict):
        """Mean logits ``(B, num_classes)`` over the views, and the first view's samples."""
        views = self.split_views(data)
        total = samples = None
        for i, view in enumerate(views):
            view = self.module.data_preprocessor(view, False)
            if i == 0:
                samples = view.get('data_samples')
            out = self.module(view['inputs'], mode='tensor')
            total = out if total is None else total + out
        return total / len(views), samples

    def test_step(self, data: dict):
        logits, samples = self.logits_and_samples(data)
        return self.module.head._get_predictions(logits, samples)

    val_step = test_step

    def merge_preds(self, data_samples_list):
        """Merge per-view predictions: the softmax of the mean log-scores."""
        merged = []
        for samples in data_samples_list:
            log_p = torch.stack([s.pred_score for s in samples]).clamp_min(1e-30).log()
            out = samples[0].new()
            score = log_p.mean(0).softmax(-1)
            out.set_pred_score(score).set_pred_label(score.argmax(-1, keepdim=True))
            merged.append(out)
        return merged

    def forward(self, inputs, data_samples=None, mode='tensor'):
        """The wrapped classifier on one batch (a single view)."""
        return self.module(inputs, data_samples, mode=mode)
