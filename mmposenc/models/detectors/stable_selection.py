"""Index-ordered top-k selections for mmdet's DETR-family detectors (see
``docs/user_guides/padding_exact_eval.md``)."""
from typing import Tuple

from torch import Tensor

from ..utils.stable_sort import StableTopk


class FewTokensError(ValueError):
    """An input with fewer encoder tokens than a two-stage detector's queries."""


class StableSelectionMixin:
    """Mixin breaking top-k ties by lower index in a DETR-family detector's ``predict`` and
    ``pre_decoder``; put it first among the bases::

        class PEGDINO(StableSelectionMixin, ExactTwoStageMixin, DeformableEncoderPosMixin,
                      DINO): ...
    """

    def predict(self, batch_inputs: Tensor, batch_data_samples, rescale: bool = True):
        """The host's ``predict``, its top-k's breaking ties by lower index."""
        with StableTopk():
            return super().predict(batch_inputs, batch_data_samples, rescale=rescale)

    def pre_decoder(self, memory: Tensor, *args, **kwargs) -> Tuple[dict]:
        """The host's ``pre_decoder``, its query selection breaking ties by lower index.

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
