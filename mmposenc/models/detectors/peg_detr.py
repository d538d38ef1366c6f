"""DETR whose encoder position encoding is chosen by config: sine, PEG, CAPE, combinations, none.

CPVT (`Conditional Positional Encodings for Vision Transformers
<https://arxiv.org/abs/2102.10882>`_, Table 4) removes DETR's 2D sine encoding from the
encoder and inserts a PEG after the first encoder layer ("DETR w/o PE + PEG"). mmdet's
:class:`~mmdet.models.DETR` hard-codes the sine encoding in ``_init_layers`` and feeds it to
every encoder layer, so :class:`PEGDETR` adds the shared switch of
:mod:`mmposenc.models.detectors.encoder_pos` (its ``pre_transformer``, ``forward_encoder`` and
``forward_decoder``, and the host's encoder rebuilt with PEGs); the encoder is
:class:`PEGDetrTransformerEncoder`, which applies a :class:`~mmposenc.models.layers.MaskedPEG`
after chosen layers.

The padding mask is exact (:class:`~mmposenc.models.detectors.ExactPaddingMixin`): each image
owns the ``ceil(h / 32) x ceil(w / 32)`` tokens it has alone, where mmdet nearest-interpolates the
pixel mask and gives an image one more row or column whenever the padded batch size is not a
multiple of the stride. That is the one deliberate difference from mmdet: with
``encoder_pos='sine'`` the model computes exactly what mmdet's DETR computes (same state-dict
keys, bit-identical outputs) on batches whose padded size is a multiple of the stride (e.g.
``pad_size_divisor=32``) or that are not padded, and differs, by being exact, on the others.

``encoder_pos='cape'`` replaces the sine encoding of the encoder by a
:class:`~mmposenc.models.layers.CAPE2d` (`CAPE <https://arxiv.org/abs/2106.03143>`_; the paper
did not do detection): the positions of each image's valid region are scaled to ``[-1, 1]``,
mean-normalised over the valid tokens and, in training only, randomly shifted and scaled;
padded tokens get no embedding. It is added to the queries and keys exactly where the sine
encoding was. CAPE has no parameters, so the state dict is that of the stock model.
"""
from mmdet.models.detectors.detr import DETR

from mmposenc.registry import MODELS
# the mechanism lives in encoder_pos; these names stay importable from here
from .encoder_pos import (DECODER_POS_TYPES, ENCODER_POS_TYPES,  # noqa: F401
                          DetrEncoderPosMixin, EncoderPosMixin, PEGDetrTransformerEncoder,
                          build_pegs, check_encoder_pos, check_peg_after)

__all__ = [
    'PEGDETR', 'PEGDetrTransformerEncoder', 'EncoderPosMixin', 'ENCODER_POS_TYPES',
    'DECODER_POS_TYPES', 'build_pegs', 'check_encoder_pos', 'check_peg_after'
]


@MODELS.register_module()
class PEGDETR(DetrEncoderPosMixin, DETR):
    """DETR with a configurable encoder position encoding (CPVT's "DETR w/o PE + PEG").

    `Conditional Positional Encodings for Vision Transformers
    <https://arxiv.org/abs/2102.10882>`_ on top of `DETR <https://arxiv.org/abs/2005.12872>`_.
    The switch, the PEG placement and the exact masks are
    :class:`~mmposenc.models.detectors.encoder_pos.DetrEncoderPosMixin`'s.

    Args:
        encoder_pos (str): Position encoding of the encoder.

            - ``'sine'``: mmdet's 2D sine encoding added in every encoder layer (stock DETR,
              identical to :class:`mmdet.models.DETR` where mmdet's padding mask is exact,
              see the module doc);
            - ``'peg'``: no sine encoding in the encoder; masked PEGs at ``peg_after``;
            - ``'sine+peg'``: both;
            - ``'cape'``: :class:`~mmposenc.models.layers.CAPE2d` instead of the sine encoding
              (per-image valid extent, augmented in training only);
            - ``'cape+peg'``: CAPE and masked PEGs;
            - ``'rope_mixed'`` / ``'rope_dinov3'``: no additive encoding; the queries and keys
              of every encoder self-attention rotated by
              :class:`~mmposenc.models.layers.RoPEMixed` /
              :class:`~mmposenc.models.layers.DINOv3RoPE` (``rope_cfg``), each image's
              coordinates its own; ``'rope_mixed+peg'`` / ``'rope_dinov3+peg'`` add the PEGs;
            - ``'none'``: no position information in the encoder at all.

            Defaults to ``'peg'``.
        decoder_pos (str): Memory positions (``key_pos``) of the decoder's cross-attention:
            ``'sine'`` (stock; CPVT changed only the encoder) or ``'none'``.
            Defaults to ``'sine'``.
        peg_after (Sequence[int]): PEG positions for ``'peg'`` / ``'sine+peg'``: ``i`` = after
            encoder layer ``i``, ``-1`` = before the first layer. Defaults to ``(0, )``.
        peg_cfg (dict): Config of each PEG. Defaults to
            ``dict(type='mmposenc.MaskedPEG', kernel_size=3)``.
        cape_cfg (dict): Config of the encoder's CAPE for ``'cape'`` / ``'cape+peg'``
            (``embed_dims`` filled in). Defaults to ``dict(type='mmposenc.CAPE2d')`` (global
            shift 0.5, local shift 1/N, global scaling 1.4: the paper's ViT setting).
        rope_cfg (dict, optional): Config of the rotary encoding of the rotary modes
            (``embed_dims``, ``num_heads``, ``num_layers`` filled in). Defaults to the mode's
            class with its defaults.
        *args, **kwargs: Those of :class:`mmdet.models.DETR`.

    Examples:
        >>> # in a config inheriting mmdet::detr/detr_r50_8xb2-150e_coco.py
        >>> model = dict(type='mmposenc.PEGDETR', encoder_pos='peg', peg_after=(0, ))
    """
