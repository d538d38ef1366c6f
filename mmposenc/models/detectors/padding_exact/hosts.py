"""mmdet's Mask2Former and mmseg's EncoderDecoder passing the image sizes to a padding-exact
backbone."""
from contextlib import contextmanager
from typing import Iterator, List, Optional, Sequence

import torch
from mmdet.models.detectors import Mask2Former
from torch import Tensor

from mmposenc.models.padding_exact.binding import run_backbone
from mmposenc.models.padding_exact.masks import feature_padding_masks
from mmposenc.models.padding_exact.switch import apply_model_switch, switch_part_configs
from mmposenc.models.utils.call_state import CallState
from mmposenc.registry import MODELS
from .mixin import PaddingExactMixin, run_neck

#: The image shapes of each segmentor's running call (thread / task local).
_SEG_SHAPES = CallState(
    'mmposenc_segmentor_img_shapes',
    why="mmseg's EncoderDecoder.loss / whole_inference / _forward call "
    'self.extract_feat(inputs) with no image metas: extract_feat needs their img_shape')


@MODELS.register_module()
class PaddingExactMask2Former(PaddingExactMixin, Mask2Former):
    """mmdet's :class:`~mmdet.models.detectors.Mask2Former` in padding-exact mode (same state
    dict).

    Examples:
        >>> # in a config inheriting mmdet::mask2former/mask2former_r50_8xb2-lsj-50e_coco.py
        >>> model = dict(type='mmposenc.PaddingExactMask2Former',
        ...              backbone=dict(type='mmposenc.PaddingExactResNet'),
        ...              panoptic_head=dict(type='mmposenc.PaddingExactMask2FormerHead'))
    """


def _padded_shapes(inputs: Tensor, metas: Optional[Sequence[dict]]) -> Optional[List]:
    """Each image's ``img_shape`` when some image is smaller than ``inputs``, else None."""
    if not metas or torch.onnx.is_in_onnx_export():
        return None
    H, W = inputs.shape[-2:]
    shapes = [tuple(int(v) for v in m['img_shape'][:2]) for m in metas]
    return None if all(s == (H, W) for s in shapes) else shapes


try:
    from mmseg.models.data_preprocessor import SegDataPreProcessor
    from mmseg.models.segmentors import EncoderDecoder
    from mmseg.utils import stack_batch
except ImportError:  # mmseg is optional for the detectors
    EncoderDecoder = None

if EncoderDecoder is not None:

    @MODELS.register_module()
    class PaddingExactEncoderDecoder(EncoderDecoder):
        """mmseg's :class:`~mmseg.models.segmentors.EncoderDecoder` in padding-exact mode (same
        state dict; slide inference binds nothing).

        Examples:
            >>> # in a config inheriting an mmseg segmentation config
            >>> model = dict(type='mmposenc.PaddingExactEncoderDecoder',
            ...              backbone=dict(type='mmposenc.SwinPEG', padding_exact=True))

        Args:
            padding_exact (bool, optional): The model's one switch (False / True turns
                every part's ``padding_exact`` off / on). Defaults to None (as configured).
            *args, **kwargs: mmseg's ``EncoderDecoder`` arguments.
        """

        def __init__(self, *args, padding_exact: Optional[bool] = None, **kwargs) -> None:
            super().__init__(*args, **switch_part_configs(kwargs, padding_exact))
            apply_model_switch(self, padding_exact)

        @contextmanager
        def _image_shapes(self, inputs: Tensor, metas: Optional[Sequence[dict]]
                          ) -> Iterator[None]:
            shapes = _padded_shapes(inputs, metas)
            if shapes is None:
                yield
                return
            with _SEG_SHAPES.bind(self, shapes):
                yield

        def extract_feat(self, inputs: Tensor) -> List[Tensor]:
            """Backbone then neck, given the image sizes and padding masks where they take them."""
            shapes = _SEG_SHAPES.get(self)
            x = run_backbone(self.backbone, inputs, shapes)
            if not self.with_neck:
                return x
            return run_neck(self.neck, x, lambda feats, strides: None if shapes is None else
                            feature_padding_masks(shapes, inputs.shape[-2:],
                                                  [f.shape[-2:] for f in feats],
                                                  device=inputs.device, strides=strides))

        def loss(self, inputs: Tensor, data_samples) -> dict:
            """mmseg's ``loss``, the backbone seeing each image's ``img_shape``."""
            with self._image_shapes(inputs, [s.metainfo for s in data_samples]):
                return super().loss(inputs, data_samples)

        def whole_inference(self, inputs: Tensor, batch_img_metas: List[dict]) -> Tensor:
            """mmseg's whole inference, the backbone seeing each image's ``img_shape``."""
            with self._image_shapes(inputs, batch_img_metas):
                return super().whole_inference(inputs, batch_img_metas)

        def _forward(self, inputs: Tensor, data_samples=None):
            """mmseg's ``_forward``, the backbone seeing each image's ``img_shape``."""
            metas = None if data_samples is None else [s.metainfo for s in data_samples]
            with self._image_shapes(inputs, metas):
                return super()._forward(inputs, data_samples)

    @MODELS.register_module()
    class BatchPaddingSegDataPreprocessor(SegDataPreProcessor):
        """mmseg's :class:`~mmseg.models.data_preprocessor.SegDataPreProcessor` that also pads
        test images of different sizes to one batch (given ``test_cfg`` ``size`` or
        ``size_divisor``), recording each image's padding.

        Examples:
            >>> model = dict(data_preprocessor=dict(
            ...     type='mmposenc.BatchPaddingSegDataPreprocessor',
            ...     test_cfg=dict(size_divisor=32)))
        """

        def forward(self, data: dict, training: bool = False) -> dict:
            inputs = data['inputs']
            if training or not self.test_cfg or len(
                    {tuple(x.shape[1:]) for x in inputs}) == 1:
                return super().forward(data, training)
            data = self.cast_data(data)
            inputs, data_samples = data['inputs'], data.get('data_samples', None)
            # mmseg 1.2: channel_conversion; onedl-mmsegmentation 1.4: _channel_conversion
            convert = getattr(self, 'channel_conversion',
                              getattr(self, '_channel_conversion', False))
            if convert and inputs[0].size(0) == 3:
                inputs = [x[[2, 1, 0], ...] for x in inputs]
            inputs = [x.float() for x in inputs]
            if self._enable_normalize:
                inputs = [(x - self.mean) / self.std for x in inputs]
            inputs, padded = stack_batch(
                inputs=inputs, size=self.test_cfg.get('size', None),
                size_divisor=self.test_cfg.get('size_divisor', None), pad_val=self.pad_val,
                seg_pad_val=self.seg_pad_val)
            if data_samples is not None:
                for sample, pad_info in zip(data_samples, padded):
                    sample.set_metainfo({**pad_info})
            return dict(inputs=inputs, data_samples=data_samples)
