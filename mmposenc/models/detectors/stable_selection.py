"""Index-ordered top-k selections for mmdet's DETR-family detectors (issue 33).

A DETR-family detector selects with ``torch.topk`` twice:

- the two-stage query selection (DINO, and Deformable-DETR with ``as_two_stage=True``) in
  ``pre_decoder``: the ``num_queries`` encoder tokens of highest class score become the
  decoder's anchor boxes, the i-th selected token paired with the i-th content query (DINO);
- every head's ``max_per_img`` cut in ``predict_by_feat``:
  ``cls_score.view(-1).topk(max_per_img)`` over ``queries x classes`` (sigmoid heads), or
  ``scores.topk(max_per_img)`` over the queries (softmax heads).

Bit-equal scores are common there: every invalid border token of a two-stage encoder has
zeroed memory (``gen_encoder_output_proposals``) and so one and the same score, and a
trained head can give two queries the same float. ``torch.topk`` orders such ties as its
kernel happens to (on CPU a partial sort whose picks change with the tensor's length, so
with the padding of the batch, and with the CPU's vector width), ONNX's ``TopK`` by lower
index. :class:`StableSelectionMixin` runs both selections under
:class:`~mmposenc.models.utils.stable_sort.StableTopk`: of equal scores the lower index is selected and
placed first. An image's own tokens (row-major per level, levels in order) and its queries
have the same relative order alone and in a padded batch, so an image keeps the same
candidates in both, and the PyTorch model selects what its ONNX export selects.
"""
from typing import Tuple

from torch import Tensor

from ..utils.stable_sort import StableTopk


class FewTokensError(ValueError):
    """An input with fewer encoder tokens than a two-stage detector's queries."""


class StableSelectionMixin:
    """``predict`` and ``pre_decoder`` of a DETR-family detector with index-ordered top-k's
    (see the module doc); a two-stage detector refuses, with one line, an input with fewer
    encoder tokens than queries (``torch.topk`` fails there with ``selected index k out of
    range`` deep in mmdet).

    Put it first among the bases of the detector; it adds no argument and no parameter::

        class PEGDINO(StableSelectionMixin, ExactTwoStageMixin, DeformableEncoderPosMixin,
                      DINO): ...
    """

    def predict(self, batch_inputs: Tensor, batch_data_samples, rescale: bool = True):
        """The host's ``predict``, its top-k's breaking ties by lower index."""
        with StableTopk():
            return super().predict(batch_inputs, batch_data_samples, rescale=rescale)

    def pre_decoder(self, memory: Tensor, *args, **kwargs) -> Tuple[dict]:
        """The host's ``pre_decoder``, its query selection (two-stage detectors) breaking
        ties by lower index.

        Raises:
            FewTokensError: a two-stage detector given fewer tokens than ``num_queries``.
        """
        if getattr(self, 'as_two_stage', False) and memory.shape[1] < self.num_queries:
            shapes = kwargs.get('spatial_shapes', args[1] if len(args) > 1 else None)
            sizes = '' if shapes is None else ' = ' + ' + '.join(
                f'{h} x {w}' for h, w in shapes.tolist())
            raise FewTokensError(
                f'{type(self).__name__} selects {self.num_queries} queries from the encoder '
                f'tokens but the input gives {int(memory.shape[1])}{sizes}: use a larger image')
        with StableTopk():
            return super().pre_decoder(memory, *args, **kwargs)
