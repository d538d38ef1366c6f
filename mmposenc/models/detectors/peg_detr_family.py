"""Conditional-DETR, DAB-DETR and DINO with the encoder position switch.

Each is mmdet's detector plus the shared mechanism of
:mod:`mmposenc.models.detectors.encoder_pos`: ``encoder_pos`` ('sine' / 'peg' / 'sine+peg' /
'cape' / 'cape+peg' / 'none'), ``peg_after``, ``peg_cfg``, ``cape_cfg``, exact padding masks
(:class:`~mmposenc.models.detectors.ExactPaddingMixin`). ``encoder_pos='sine'`` is the stock
model (same state-dict keys; bit-identical where mmdet's nearest-interpolated masks are exact:
no padding, or padded sizes that are multiples of every stride).

What each keeps of the host's position encodings by default:

- Conditional-DETR and DAB-DETR (one level, :class:`DetrEncoderPosMixin`): the decoder's
  cross-attention keys get the sine memory positions (``decoder_pos='sine'``; ``'none'`` gives
  zeros); their conditional spatial queries and DAB-DETR's anchor-box query positions are sine
  encodings of the reference points, computed by the decoders and unchanged. DAB-DETR's encoder
  scales the position embedding of each layer by an MLP of the tokens; without a position
  embedding (``'peg'``, ``'none'``) that MLP is unused (kept so that stock checkpoints load).
- DINO (multi-level, :class:`DeformableEncoderPosMixin`): the deformable decoder takes no memory
  positions; its query positions (sine of the anchor boxes) and denoising queries are DINO's,
  as are the two-stage proposals (computed from the exact masks). The learnt level embedding
  stays on the encoder tokens without sine (``level_embed=True``). Two changes make DINO's
  predictions batch-exact (:mod:`mmposenc.models.detectors.exact_queries`): the query
  selection ranks the image's own tokens only (:class:`ExactTwoStageMixin`: padded tokens
  scored lowest), and the decoder encodes its query positions from the anchor boxes relative
  to the image (:class:`ExactQueryPosDinoDecoder`), where mmdet encodes them scaled to the
  padded batch (``reference_points * valid_ratios``); ``exact_queries=False`` turns both off.

GroundingDINO is not here: its text branch needs a BERT checkpoint that cannot be downloaded in
our test environment, so it could not be tested.
"""
from mmdet.models.detectors.conditional_detr import ConditionalDETR
from mmdet.models.detectors.dab_detr import DABDETR
from mmdet.models.detectors.dino import DINO

from mmposenc.registry import MODELS
from .encoder_pos import DeformableEncoderPosMixin, DetrEncoderPosMixin
from .exact_queries import ExactQueryPosDinoDecoder, ExactTwoStageMixin


@MODELS.register_module()
class PEGConditionalDETR(DetrEncoderPosMixin, ConditionalDETR):
    """Conditional-DETR with a configurable encoder position encoding.

    `Conditional DETR for Fast Training Convergence <https://arxiv.org/abs/2108.06152>`_ with
    the encoder positions of `CPVT <https://arxiv.org/abs/2102.10882>`_ (PEG) or
    `CAPE <https://arxiv.org/abs/2106.03143>`_.

    Args:
        encoder_pos (str): ``'sine'`` (stock), ``'peg'``, ``'sine+peg'``, ``'cape'``,
            ``'cape+peg'`` or ``'none'``
            (:class:`~mmposenc.models.detectors.encoder_pos.EncoderPosMixin`).
            Defaults to ``'peg'``.
        decoder_pos (str): Memory positions of the cross-attention keys: ``'sine'`` (stock)
            or ``'none'``. Defaults to ``'sine'``.
        peg_after (Sequence[int]): PEG positions (``-1`` = before the first layer).
            Defaults to ``(0, )``.
        peg_cfg (dict, optional): Config of each PEG. Defaults to
            ``dict(type='mmposenc.MaskedPEG', kernel_size=3)``.
        cape_cfg (dict): Config of the CAPE. Defaults to ``dict(type='mmposenc.CAPE2d')``.
        *args, **kwargs: Those of :class:`mmdet.models.ConditionalDETR`.

    Examples:
        >>> # in a config inheriting mmdet::conditional_detr/conditional-detr_r50_8xb2-50e_coco.py
        >>> model = dict(type='mmposenc.PEGConditionalDETR', encoder_pos='peg')
    """


@MODELS.register_module()
class PEGDABDETR(DetrEncoderPosMixin, DABDETR):
    """DAB-DETR with a configurable encoder position encoding.

    `DAB-DETR: Dynamic Anchor Boxes are Better Queries for DETR
    <https://arxiv.org/abs/2201.12329>`_ with the encoder positions of
    `CPVT <https://arxiv.org/abs/2102.10882>`_ (PEG) or `CAPE <https://arxiv.org/abs/2106.03143>`_.

    Args:
        encoder_pos (str): ``'sine'`` (stock), ``'peg'``, ``'sine+peg'``, ``'cape'``,
            ``'cape+peg'`` or ``'none'``. Defaults to ``'peg'``.
        decoder_pos (str): Memory positions of the cross-attention keys: ``'sine'`` (stock)
            or ``'none'``. Defaults to ``'sine'``.
        peg_after (Sequence[int]): PEG positions. Defaults to ``(0, )``.
        peg_cfg (dict, optional): Defaults to ``dict(type='mmposenc.MaskedPEG', kernel_size=3)``.
        cape_cfg (dict): Defaults to ``dict(type='mmposenc.CAPE2d')``.
        *args, **kwargs: Those of :class:`mmdet.models.DABDETR` (``with_random_refpoints``,
            ``num_patterns``, ...).

    Examples:
        >>> # in a config inheriting mmdet::dab_detr/dab-detr_r50_8xb2-50e_coco.py
        >>> model = dict(type='mmposenc.PEGDABDETR', encoder_pos='peg')
    """


@MODELS.register_module()
class PEGDINO(ExactTwoStageMixin, DeformableEncoderPosMixin, DINO):
    """DINO with a configurable encoder position encoding.

    `DINO: DETR with Improved DeNoising Anchor Boxes for End-to-End Object Detection
    <https://arxiv.org/abs/2203.03605>`_ with the encoder positions of
    `CPVT <https://arxiv.org/abs/2102.10882>`_ (multi-level masked PEG) or
    `CAPE <https://arxiv.org/abs/2106.03143>`_ (one per level).

    Args:
        encoder_pos (str): ``'sine'`` (stock: sine + level embedding), ``'peg'``,
            ``'sine+peg'``, ``'cape'``, ``'cape+peg'`` or ``'none'``. Defaults to ``'peg'``.
        level_embed (bool): Keep the level embedding without sine. Defaults to True.
        peg_after (Sequence[int]): PEG positions. Defaults to ``(0, )``.
        peg_cfg (dict, optional): Defaults to ``dict(type='mmposenc.MultiLevelMaskedPEG',
            kernel_size=3, share_weights=False)``.
        cape_cfg (dict): Defaults to ``dict(type='mmposenc.CAPE2d')``.
        exact_queries (bool): Batch-exact queries
            (:mod:`~mmposenc.models.detectors.exact_queries`): the query selection over each
            image's own tokens (:class:`ExactTwoStageMixin`) and the decoder's query positions
            from the anchor boxes relative to each image (:class:`ExactQueryPosDinoDecoder`),
            so that an image's predictions do not depend on the padding of its batch. False is
            mmdet's DINO (selection over the padded batch, boxes scaled to it). Same state dict
            either way; alone both compute the same. Defaults to True.
        *args, **kwargs: Those of :class:`mmdet.models.DINO` (``dn_cfg``, ...).

    Examples:
        >>> # in a config inheriting mmdet::dino/dino-4scale_r50_8xb2-12e_coco.py
        >>> model = dict(type='mmposenc.PEGDINO', encoder_pos='peg')
    """

    def _init_layers(self) -> None:
        """The host's layers; with ``exact_queries`` the decoder made
        :class:`ExactQueryPosDinoDecoder` in place (same modules and weights)."""
        super()._init_layers()
        if self.exact_queries:
            self.decoder.__class__ = ExactQueryPosDinoDecoder
