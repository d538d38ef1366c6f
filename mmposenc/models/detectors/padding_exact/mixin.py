"""The padding-exact mode of mmdet's detectors, one mixin for all of them."""
from typing import Callable, List, Optional, Sequence, Tuple

import torch
from mmdet.structures import OptSampleList
from torch import Tensor, nn

from mmposenc.models.padding_exact.binding import run_backbone
from mmposenc.models.padding_exact.masks import feature_padding_masks
from mmposenc.models.padding_exact.switch import apply_model_switch, switch_part_configs
from mmposenc.models.utils.call_state import CallState

#: The data samples of each detector's running call (thread / task local).
_CALL_SAMPLES = CallState(
    'mmposenc_padding_data_samples',
    why="mmdet's detectors' loss / predict / _forward call self.extract_feat(batch_inputs) "
    'with no data samples: extract_feat needs their img_shape for the backbone and the neck')


def padded_batch(batch_data_samples: OptSampleList) -> bool:
    """Whether mmdet builds masks: some image is smaller than the batch input, no ONNX export."""
    if batch_data_samples is None or torch.onnx.is_in_onnx_export():
        return False
    input_h, input_w = batch_data_samples[0].batch_input_shape
    return not all(s.img_shape[0] == input_h and s.img_shape[1] == input_w
                   for s in batch_data_samples)


def run_neck(neck: nn.Module, feats: Sequence[Tensor],
             padding_masks_of: Callable[[Sequence[Tensor], Optional[Sequence]],
                                        Optional[List[Tensor]]],
             backbone_strides: Optional[Sequence] = None):
    """Run ``neck(feats)``, giving each part with ``takes_padding_masks`` its inputs' masks.

    Args:
        neck (nn.Module): The neck.
        feats (Sequence[Tensor]): The backbone's maps.
        padding_masks_of (callable): ``(maps, strides) -> masks or None``.
        backbone_strides (Sequence, optional): The backbone maps' strides. Defaults to None
            (measured).

    Returns:
        The neck's output.
    """
    parts = list(neck) if isinstance(neck, nn.Sequential) else [neck]
    if not any(getattr(part, 'takes_padding_masks', False) for part in parts):
        return neck(feats)
    strides = backbone_strides
    for part in parts:
        if getattr(part, 'takes_padding_masks', False):
            feats = part(feats, padding_masks=padding_masks_of(feats, strides))
        else:
            feats = part(feats)
        strides = None
    return feats


class PaddingExactMixin:
    """Mixin giving an mmdet detector exact padding masks and padding-exact backbone / neck
    inputs; put it before the mmdet class.

    Args:
        backbone_strides (Sequence[int | tuple[int, int]], optional): Strides of the
            backbone's maps; None measures them (exact for power-of-two strides only: give
            them for e.g. a stride-14 ViT). Defaults to None.
        encoder_strides (Sequence[int | tuple[int, int]], optional): Strides of the encoder's
            input maps; None measures them. Defaults to None.
        padding_exact (bool, optional): The model's one switch: False / True turns every
            part's ``padding_exact`` off / on, None leaves each as configured. Defaults to None.

    Examples::

        class PEGDETR(PaddingExactMixin, EncoderPosMixin, DETR):
            def pre_transformer(self, img_feats, batch_data_samples=None):
                masks = self.feature_padding_masks(img_feats[-1:], batch_data_samples)
                ...  # None, or [bool (bs, h, w)]
    """

    def __init__(self, *args, backbone_strides: Optional[Sequence] = None,
                 encoder_strides: Optional[Sequence] = None,
                 padding_exact: Optional[bool] = None, **kwargs) -> None:
        self.backbone_strides = None if backbone_strides is None else tuple(backbone_strides)
        self.encoder_strides = None if encoder_strides is None else tuple(encoder_strides)
        super().__init__(*args, **switch_part_configs(kwargs, padding_exact))
        apply_model_switch(self, padding_exact)

    def feature_padding_masks(self, feats: Sequence[Tensor], batch_data_samples: OptSampleList,
                              strides: Optional[Sequence] = None) -> Optional[List[Tensor]]:
        """Exact bool (bs, h, w) padding masks of ``feats`` (True = padded), None when mmdet
        builds none.

        Args:
            feats (Sequence[Tensor]): Maps (bs, C, h, w) computed from the batch input.
            batch_data_samples (list[DetDataSample]): With ``img_shape`` and
                ``batch_input_shape`` metainfo.
            strides (Sequence, optional): Each map's stride; None measures them.

        Returns:
            list[Tensor] | None: One mask per map.
        """
        if not padded_batch(batch_data_samples):
            return None
        return feature_padding_masks([s.img_shape for s in batch_data_samples],
                                     batch_data_samples[0].batch_input_shape,
                                     [f.shape[-2:] for f in feats], device=feats[0].device,
                                     strides=strides)

    def extract_feat(self, batch_inputs: Tensor,
                     batch_data_samples: OptSampleList = None) -> Tuple[Tensor]:
        """Backbone then neck, given the image sizes and padding masks where they take them.

        Args:
            batch_inputs (Tensor): (bs, 3, H, W).
            batch_data_samples (list[DetDataSample], optional): Defaults to the samples of
                the running ``loss`` / ``predict`` / ``_forward`` call.

        Returns:
            tuple[Tensor]: The neck's maps.
        """
        samples = (batch_data_samples if batch_data_samples is not None else
                   _CALL_SAMPLES.get(self))
        shapes = [s.img_shape for s in samples] if padded_batch(samples) else None
        x = run_backbone(self.backbone, batch_inputs, shapes)
        if not self.with_neck:
            return x
        return run_neck(self.neck, x,
                        lambda feats, strides: self.feature_padding_masks(feats, samples,
                                                                          strides),
                        self.backbone_strides)

    def _samples_for_neck(self, batch_data_samples: OptSampleList):
        """Context in which :meth:`extract_feat` sees ``batch_data_samples``."""
        return _CALL_SAMPLES.bind(self, batch_data_samples)

    def loss(self, batch_inputs: Tensor, batch_data_samples: OptSampleList):
        """The host's ``loss``, its ``extract_feat`` seeing ``batch_data_samples``."""
        with self._samples_for_neck(batch_data_samples):
            return super().loss(batch_inputs, batch_data_samples)

    def predict(self, batch_inputs: Tensor, batch_data_samples: OptSampleList,
                rescale: bool = True):
        """The host's ``predict``, its ``extract_feat`` seeing ``batch_data_samples``."""
        with self._samples_for_neck(batch_data_samples):
            return super().predict(batch_inputs, batch_data_samples, rescale=rescale)

    def _forward(self, batch_inputs: Tensor, batch_data_samples: OptSampleList = None):
        """The host's ``_forward``, its ``extract_feat`` seeing ``batch_data_samples``."""
        with self._samples_for_neck(batch_data_samples):
            return super()._forward(batch_inputs, batch_data_samples)


#: The former name of :class:`PaddingExactMixin`.
ExactPaddingMixin = PaddingExactMixin
