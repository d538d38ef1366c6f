"""The padding-exact mode of mmdet's detectors: one mixin for all of them.

mmdet's DETR, Deformable-DETR, Conditional-DETR, DAB-DETR and DINO build the feature-level
padding mask by nearest-interpolating the pixel mask of the padded batch, which marks one row or
column of padding as image whenever the batch size is not a multiple of the stride (see
:mod:`mmposenc.models.padding_exact.masks`). :class:`PaddingExactMixin` gives a detector

- :meth:`~PaddingExactMixin.feature_padding_masks`: the exact masks of any feature maps
  (``ceil(img / stride)`` valid cells per image, stride given by ``backbone_strides`` /
  ``encoder_strides`` or measured per map), or None exactly when mmdet would build none (ONNX
  export, or no image of the batch padded);
- :meth:`~PaddingExactMixin.extract_feat`: the backbone (a padding-exact one given the image
  sizes, ``img_shapes``), then the neck with the masks of the
  backbone maps when the neck declares ``takes_padding_masks`` (e.g.
  :class:`~mmposenc.models.necks.MaskedChannelMapper`; in a list ``neck=[...]`` each part
  that declares it, with the masks of its own inputs), else the neck as mmdet calls it. In
  ``loss`` / ``predict`` / ``_forward`` the data samples reach it without any change to the
  host's methods (they are wrapped, so subclasses such as DINO keep their own).

A detector then builds its masks in ``pre_transformer`` with ``feature_padding_masks`` instead of
the interpolation. Put the mixin before the mmdet class::

    class PEGDINO(PaddingExactMixin, DINO): ...

(``ExactPaddingMixin`` is the same class under its former name.)
"""
from typing import Callable, List, Optional, Sequence, Tuple

import torch
from mmdet.structures import OptSampleList
from torch import Tensor, nn

from mmposenc.models.padding_exact.binding import run_backbone
from mmposenc.models.padding_exact.masks import feature_padding_masks
from mmposenc.models.padding_exact.switch import apply_model_switch, switch_part_configs
from mmposenc.models.utils.call_state import CallState

#: The data samples of the running ``loss`` / ``predict`` / ``_forward`` call of each detector
#: (local to the thread / asyncio task: concurrent calls on one model do not see each other's).
_CALL_SAMPLES = CallState(
    'mmposenc_padding_data_samples',
    why="mmdet's detectors' loss / predict / _forward call self.extract_feat(batch_inputs) "
    'with no data samples: extract_feat needs their img_shape for the backbone and the neck')


def padded_batch(batch_data_samples: OptSampleList) -> bool:
    """mmdet's rule for building masks at all: some image is smaller than the batch input
    (and no ONNX export is running)."""
    if batch_data_samples is None or torch.onnx.is_in_onnx_export():
        return False
    input_h, input_w = batch_data_samples[0].batch_input_shape
    return not all(s.img_shape[0] == input_h and s.img_shape[1] == input_w
                   for s in batch_data_samples)


def run_neck(neck: nn.Module, feats: Sequence[Tensor],
             padding_masks_of: Callable[[Sequence[Tensor], Optional[Sequence]],
                                        Optional[List[Tensor]]],
             backbone_strides: Optional[Sequence] = None):
    """``neck(feats)``, a neck that declares ``takes_padding_masks`` given the padding masks
    of its inputs; in a list ``neck=[...]`` (an ``nn.Sequential``, e.g. ``SimplePyramid`` then
    an FPN) each part that declares it gets the masks of its own inputs.

    Args:
        neck (nn.Module): The neck.
        feats (Sequence[Tensor]): The backbone's maps.
        padding_masks_of (callable): ``(maps, strides) -> masks or None`` (None: no padded
            image), e.g. :func:`~mmposenc.models.padding_exact.feature_padding_masks` of the batch.
        backbone_strides (Sequence, optional): The strides of the backbone's maps (later
            parts' inputs are measured). Defaults to None (measured).

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
    """The padding-exact mode of an mmdet detector: exact feature-level padding masks, the
    image sizes for a padding-exact backbone and the masks for a padding-exact neck (see the
    module doc).

    Args:
        backbone_strides (Sequence[int | tuple[int, int]], optional): Strides of the
            backbone's output maps (the masks a padding-exact neck gets). None measures them
            from the map sizes, which is exact for power-of-two strides (ResNet, Swin, PVT)
            but can pick a power of two for a small map of another stride (a stride-14 ViT map
            of at most 7 cells is also ``ceil(H / 16)``): give the strides of such backbones.
            Defaults to None.
        encoder_strides (Sequence[int | tuple[int, int]], optional): Strides of the maps the
            transformer encoder takes (the neck's outputs, extra levels included), for its
            padding masks; None measures them. Defaults to None.
        padding_exact (bool, optional): The model's one switch of the padding-exact mode
            (issue 20): False turns off every part that has one (the backbone's, the heads'
            ``padding_exact``: each is then the host's module; the exact padding masks above
            stay), True turns on every part whose config writes ``padding_exact`` (the
            shipped configs' backbones) and checks that every part is on, None (default)
            leaves each part as its config sets it. A config turns it off, or on, with one
            line: ``model = dict(padding_exact=False)``.

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
        """Bool (bs, h, w) masks of ``feats``, True = padded, one per map: each image has
        exactly the ``ceil(img_h / s) x ceil(img_w / s)`` cells it has alone (``img_shape``
        from its metainfo, ``s`` measured from the map and ``batch_input_shape``). None when
        mmdet builds no mask (ONNX export, or every image fills the batch input).

        Args:
            feats (Sequence[Tensor]): Maps (bs, C, h, w) computed from the batch input.
            batch_data_samples (list[DetDataSample]): With ``img_shape`` and
                ``batch_input_shape`` metainfo.
            strides (Sequence, optional): The stride of each map where known (see
                :func:`~mmposenc.models.padding_exact.feature_padding_masks`); None measures them.

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
        """Backbone, then neck; a padding-exact backbone gets the image sizes as its
        ``img_shapes`` (:func:`~mmposenc.models.padding_exact.run_backbone`) and a neck with
        ``takes_padding_masks`` the exact masks of the backbone maps (samples from the
        argument or from the running ``loss`` / ``predict`` / ``_forward``).

        Args:
            batch_inputs (Tensor): (bs, 3, H, W).
            batch_data_samples (list[DetDataSample], optional): Defaults to the samples of
                the running ``loss`` / ``predict`` / ``_forward`` call.

        Returns:
            tuple[Tensor]: The neck's maps.
        """
        samples = (batch_data_samples if batch_data_samples is not None else
                   _CALL_SAMPLES.get(self))
        # a padding-exact backbone takes the image sizes (a host backbone is called as mmdet)
        shapes = [s.img_shape for s in samples] if padded_batch(samples) else None
        x = run_backbone(self.backbone, batch_inputs, shapes)
        if not self.with_neck:
            return x
        return run_neck(self.neck, x,
                        lambda feats, strides: self.feature_padding_masks(feats, samples,
                                                                          strides),
                        self.backbone_strides)

    def _samples_for_neck(self, batch_data_samples: OptSampleList):
        """Context in which :meth:`extract_feat` of this call sees ``batch_data_samples``
        (context-local: concurrent calls on the same model keep their own)."""
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


#: The former name of :class:`PaddingExactMixin` (kept for code that subclasses it).
ExactPaddingMixin = PaddingExactMixin
