"""Export DETR-family and Mask2Former detectors (mmdet's or mmposenc's) and CPVT classifiers
to ONNX with a dynamic input height and width, and check the file with onnxruntime.

What is exported is the no-mask path: a batch of one unpadded, already normalised image
``(1, 3, H, W)`` (what the data preprocessor hands the model) in,

- detectors: ``cls_scores`` ``(1, num_queries, num_classes[+1])`` and ``bboxes``
  ``(1, num_queries, 4)`` (normalised ``cx, cy, w, h``) of the head's last decoder layer,
  i.e. the tensors :meth:`bbox_head.predict_by_feat` turns into detections (DETR,
  Conditional-DETR, DAB-DETR, Deformable-DETR, DINO and their mmposenc versions);
- Mask2Former / MaskFormer (mmdet): ``cls_scores`` ``(1, num_queries, num_classes + 1)`` and
  ``mask_preds`` ``(1, num_queries, H / 4, W / 4)`` (logits) of the head's last layer, what
  its fusion head turns into instance / panoptic results;
- classifiers (``ImageClassifier`` with any backbone, e.g. CPVT): the logits
  ``(1, num_classes)``.

The exporter is torch's TorchScript-based one (``torch.onnx.export(..., dynamo=False)``):
torch 2.13 defaults to the ``torch.export`` exporter, which needs ``onnxscript`` and does
not trace mmdet's data-dependent Python (lists of ``DetDataSample``). mmcv's
``MultiScaleDeformableAttention`` runs its pure-PyTorch ``grid_sample`` path on CPU, which
exports with opset >= 16 (``GridSample``).

Any H and W work, including sizes that are not multiples of the patch size or of the
backbone's stride: CPVT zero-pads the bottom/right by the fixed amount p - 1 (same values as
padding to the next multiple of p), and CAPE2d (``encoder_pos='cape'`` / ``'cape+peg'``, or a
CAPE ``pos_encoding``) computes its positions from the traced feature-map shape, so no traced
size is frozen into the graph. (A ``PEViT`` classifier does not run at sizes that are not
multiples of its patch size, whatever its position encoding: its patch embedding's padding is
traced as a constant.)
The model must be in eval mode (:func:`wrap_model` sets it): a module in training mode is
refused with :class:`ExportNotSupportedError` (CAPE's random augmentation and dropout would be
traced).

After the export the model runs in onnxruntime (CPU) and in PyTorch at every ``--check-shape``
(on one random image per shape and ``--seed``) and the largest absolute difference of every
output is compared with ``--atol``; the tool exits non-zero when one is exceeded or an output
shape differs.

Two-stage detectors (DINO, Deformable-DETR with ``as_two_stage``) select their queries with a
top-k over the encoder tokens, in which bit-equal scores are common (every invalid border
token has the same zeroed memory, so the same score). ONNX's ``TopK`` selects the lower index
of equal values; ``torch.topk`` selects as its kernel happens to, and DINO pairs the i-th
selected token with the i-th content query, so one swapped tie changes every output row.
The PyTorch side of the check therefore runs under
:class:`~mmposenc.models.utils.stable_sort.StableTopk` (ties by lower index: the rule of ONNX,
and of mmposenc's DETR-family detectors on their own, see
:mod:`mmposenc.models.detectors.stable_selection`); stock mmdet models are compared with the
same rule. Scores that are not equal but closer than the two backends' rounding (about 2e-6
apart in an R50 DINO) can still come out in the other order, and no rule can order them alike
on both: the check reads each ``TopK`` of the graph, accepts another selection only when it is
a top-k of PyTorch's scores up to ``--atol``, and then compares the outputs of PyTorch run
with onnxruntime's selection (the table shows the ranks reordered and the largest score gap).
Such a detector needs at least ``num_queries`` encoder tokens: an export or check
size with fewer is refused before the export with one line naming the smallest square size
that has enough (:class:`ExportNotSupportedError`).

Usage::

    python tools/deployment/pytorch2onnx.py configs/peg_detr/detr-peg_r50_16xb2-50e_coco.py \\
        --checkpoint detr-peg.pth --out work_dirs/detr-peg.onnx --shape 800 1216 \\
        --check-shape 800 1216 --check-shape 640 800
    python tools/deployment/pytorch2onnx.py configs/cpvt/cpvt-tiny_4xb256_in1k.py \\
        --out work_dirs/cpvt-tiny.onnx --shape 224 224 --check-shape 224 224 --check-shape 160 288
"""
import argparse
import contextlib
import os
import os.path as osp
import sys
import warnings
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
import torch.nn as nn

# this checkout's mmposenc first (a tool of a clone imports the clone's, installed or not)
sys.path.insert(0, osp.dirname(osp.dirname(osp.dirname(osp.realpath(__file__)))))
from mmposenc.utils.tools.runner import drop_pretrained  # noqa: E402

#: default absolute tolerance of onnxruntime against PyTorch (float32 on CPU)
DEFAULT_ATOL = 1e-4
DEFAULT_OPSET = 17


class _OneImageDetectorWrapper(nn.Module):
    """Base of the mmdet export wrappers: the detector and the data sample of a batch of one
    unpadded image (no padding, so no masks)."""

    #: metainfo keys of the data sample, each set to the image's ``(H, W)``
    shape_keys: Tuple[str, ...] = ('img_shape', 'batch_input_shape')

    def __init__(self, detector: nn.Module):
        super().__init__()
        self.detector = detector

    def data_sample(self, img: torch.Tensor):
        """The ``DetDataSample`` of ``img`` ``(1, 3, H, W)``; a ValueError for other shapes."""
        from mmdet.structures import DetDataSample
        if img.dim() != 4 or img.shape[0] != 1:
            raise ValueError(f'the export takes one image (1, 3, H, W), got {tuple(img.shape)}')
        h, w = img.shape[-2:]
        return DetDataSample(metainfo={key: (h, w) for key in self.shape_keys})


class DetectorExportWrapper(_OneImageDetectorWrapper):
    """A DETR-style detector as ``image (1, 3, H, W) -> (cls_scores, bboxes)``.

    Runs ``extract_feat``, ``forward_transformer`` and the head's ``forward`` with one data
    sample whose image fills the whole batch input (no padding, so no masks), and returns the
    last decoder layer's outputs.

    Args:
        detector (nn.Module): An mmdet ``DetectionTransformer`` (DETR, Deformable-DETR, or
            mmposenc's ``PEGDETR`` / ``PEGDeformableDETR``) in eval mode.
    """

    output_names = ('cls_scores', 'bboxes')

    def forward(self, img: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        sample = self.data_sample(img)
        feats = self.detector.extract_feat(img)
        head_inputs = self.detector.forward_transformer(feats, [sample])
        cls_scores, bboxes = self.detector.bbox_head(**head_inputs)
        return cls_scores[-1], bboxes[-1]


class MaskFormerExportWrapper(_OneImageDetectorWrapper):
    """An mmdet MaskFormer-style model (Mask2Former, with mmdet's or mmposenc's pixel decoder)
    as ``image (1, 3, H, W) -> (cls_scores, mask_preds)`` of the last decoder layer."""

    output_names = ('cls_scores', 'mask_preds')
    shape_keys = ('img_shape', 'batch_input_shape', 'pad_shape')

    def forward(self, img: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        sample = self.data_sample(img)
        cls_scores, mask_preds = self.detector.panoptic_head(
            self.detector.extract_feat(img), [sample])
        return cls_scores[-1], mask_preds[-1]


class ClassifierExportWrapper(nn.Module):
    """An mmpretrain classifier as ``image (1, 3, H, W) -> logits (1, num_classes)``."""

    output_names = ('logits', )

    def __init__(self, classifier: nn.Module):
        super().__init__()
        self.classifier = classifier

    def forward(self, img: torch.Tensor) -> torch.Tensor:
        return self.classifier(img, mode='tensor')


def wrap_model(model: nn.Module) -> nn.Module:
    """The export wrapper of ``model`` (eval mode): detector or classifier."""
    model.eval()
    if hasattr(model, 'forward_transformer') and hasattr(model, 'bbox_head'):
        return DetectorExportWrapper(model).eval()
    if hasattr(model, 'panoptic_head') and hasattr(model.panoptic_head, 'pixel_decoder'):
        return MaskFormerExportWrapper(model).eval()
    if hasattr(model, 'backbone') and hasattr(model, 'head'):
        return ClassifierExportWrapper(model).eval()
    raise TypeError(f'{type(model).__name__} is neither a DETR-style detector (needs '
                    '`forward_transformer` and `bbox_head`), a MaskFormer-style one '
                    '(`panoptic_head` with a `pixel_decoder`) nor an ImageClassifier '
                    '(`backbone` and `head`)')


def load_weights(model: nn.Module, checkpoint: str) -> None:
    """Load ``checkpoint`` into ``model`` strictly (safe loading, see mmposenc.engine).

    Raises:
        CheckpointMismatchError: the weights do not fit (names the keys).
    """
    from mmengine.runner.checkpoint import _load_checkpoint, _load_checkpoint_to_model

    from mmposenc.engine import CheckpointMismatchError, describe_mismatch, state_dict_mismatch
    ckpt = _load_checkpoint(checkpoint, map_location='cpu')
    summary = describe_mismatch(state_dict_mismatch(model, ckpt))
    if summary:
        raise CheckpointMismatchError(f'{checkpoint} does not fit the model of the config: '
                                      f'{summary}')
    _load_checkpoint_to_model(model, ckpt, strict=True)


def build_model(config: str, checkpoint: Optional[str] = None,
                cfg_options: Optional[dict] = None) -> nn.Module:
    """Build the model of ``config`` under its default scope; load ``checkpoint`` if given,
    random weights drawn from seed 0 otherwise (``Pretrained`` init_cfgs are dropped, nothing
    is downloaded): the same weights in every run."""
    from mmengine.config import Config
    from mmengine.registry import DefaultScope, init_default_scope

    from mmposenc.engine import check_checkpoint_file, init_weights_quietly
    from mmposenc.registry import MODELS
    if checkpoint:
        check_checkpoint_file(checkpoint)  # a text file fails here, before the build
    cfg = Config.fromfile(config)
    if cfg_options:
        cfg.merge_from_dict(cfg_options)
    if cfg.get('custom_imports'):
        from mmengine.utils import import_modules_from_strings
        import_modules_from_strings(**cfg.custom_imports)
    scope = cfg.get('default_scope', 'mmdet')
    init_default_scope(scope)
    if scope == 'mmdet':
        from mmdet.utils import register_all_modules
        register_all_modules(init_default_scope=False)
    elif scope == 'mmpretrain':
        from mmpretrain.utils import register_all_modules
        register_all_modules(init_default_scope=False)
    model_cfg = cfg.model
    drop_pretrained(model_cfg)  # weights: the checkpoint's, or random
    assert DefaultScope.get_current_instance() is not None
    with torch.random.fork_rng(devices=[]):  # seed 0, the caller's generator left as it was
        torch.manual_seed(0)
        model = MODELS.build(model_cfg)
        if not checkpoint:
            init_weights_quietly(model)
    if checkpoint:
        load_weights(model, checkpoint)
    return model.eval()


class ExportNotSupportedError(ValueError):
    """A model that this tool cannot export as it is (one with a module in training mode), or
    a size it cannot run at (fewer encoder tokens than a two-stage detector's queries)."""


@contextlib.contextmanager
def _selections(calls: list, forced: Optional[Dict[int, torch.Tensor]] = None):
    """PyTorch's top-k's breaking ties by lower index (as ONNX's ``TopK``), each call's
    ``(input, dim, result)`` appended to ``calls``; ``forced``: {call number: indices} makes
    those calls select the given indices (their values gathered from the call's input).

    mmposenc's DETR family enters :class:`~mmposenc.models.utils.stable_sort.StableTopk`
    itself (a nested mode handles the call first), so the recording sits in the function every
    such mode calls, :func:`~mmposenc.models.utils.stable_sort.stable_topk`."""
    from unittest import mock

    from mmposenc.models.utils import stable_sort
    stable = stable_sort.stable_topk

    def recorded(input, k, dim=-1, largest=True, sorted=True):
        number = len(calls)
        if forced and number in forced:
            indices = forced[number]
            out = torch.return_types.topk((input.gather(dim, indices), indices))
        else:
            out = stable(input, k, dim=dim, largest=largest, sorted=sorted)
        calls.append((input, dim, out))
        return out

    with mock.patch.object(stable_sort, 'stable_topk', recorded), stable_sort.StableTopk():
        yield calls


def with_topk_outputs(onnx_file: str, out_file: str) -> int:
    """``onnx_file`` with the values and indices of each of its ``TopK`` nodes added to the
    graph's outputs (after the model's own, in graph order), saved to ``out_file``; the number
    of ``TopK`` nodes."""
    import onnx
    model = onnx.load(onnx_file)
    topks = [n for n in model.graph.node if n.op_type == 'TopK']
    for node in topks:
        for name in node.output[:2]:
            model.graph.output.append(onnx.ValueInfoProto(name=name))
    onnx.save(model, out_file)
    return len(topks)


def compare_selection(input: torch.Tensor, dim: int, ours: torch.Tensor,
                      theirs: torch.Tensor, atol: float) -> dict:
    """How onnxruntime's selection ``theirs`` (indices along ``dim``) differs from PyTorch's
    ``ours`` on PyTorch's scores ``input``.

    Two backends compute the scores a rounding apart, so scores closer than that may come
    out in either order: ``theirs`` is *a* top-k of ``input`` up to ``atol`` when, read at
    PyTorch's scores, it never rises by more than ``atol`` from one rank to the next and no
    token it leaves out scores more than ``atol`` above the lowest it keeps.

    Returns:
        dict: ``reordered`` (ranks selecting another token; -1 when ``theirs`` selects another
        number of tokens), ``max_gap`` (largest PyTorch score difference between the two
        tokens at such a rank; inf for another number), ``near_tie`` (``theirs`` is a top-k of
        ``input`` up to ``atol``).
    """
    if theirs.shape != ours.shape:  # another k: no rerun can compare like with like
        return dict(reordered=-1, max_gap=float('inf'), near_tie=False)
    differ = ours != theirs
    if not differ.any():
        return dict(reordered=0, max_gap=0., near_tie=True)
    at_theirs = input.gather(dim, theirs)
    rise = float((at_theirs.narrow(dim, 1, at_theirs.shape[dim] - 1)
                  - at_theirs.narrow(dim, 0, at_theirs.shape[dim] - 1)).max()) \
        if at_theirs.shape[dim] > 1 else 0.
    left_out = input.clone().scatter_(dim, theirs, float('-inf'))
    above = float((left_out.amax(dim) - at_theirs.amin(dim)).max())
    gap = float((input.gather(dim, ours) - at_theirs).abs().max())
    return dict(reordered=int(differ.sum()), max_gap=gap,
                near_tie=rise <= atol and above <= atol)


def count_tokens(wrapper: nn.Module, shape: Sequence[int]) -> Optional[int]:
    """The number of encoder tokens of a two-stage detector's input of ``shape`` (the cells of
    its neck's maps, measured on a zero image), or None for other models."""
    detector = getattr(wrapper, 'detector', None)
    if not getattr(detector, 'as_two_stage', False) or not hasattr(detector, 'num_queries'):
        return None
    with torch.no_grad():
        feats = detector.extract_feat(torch.zeros(1, 3, *shape))
    return sum(int(f.shape[-2]) * int(f.shape[-1]) for f in feats)


def check_sizes(wrapper: nn.Module, shapes: Sequence[Sequence[int]]) -> None:
    """An :class:`ExportNotSupportedError` (one line) when a two-stage detector gets fewer
    encoder tokens than queries at one of ``shapes``: its query top-k cannot select
    ``num_queries`` of them (in PyTorch ``selected index k out of range`` deep in mmdet, in
    onnxruntime a failing ``TopK``). The message names the smallest square size with enough
    tokens."""
    for shape in shapes:
        tokens = count_tokens(wrapper, shape)
        if tokens is None:
            return
        queries = wrapper.detector.num_queries
        if tokens < queries:
            low, high = min(shape), 2 * min(shape)  # the square of the short side fails too
            while count_tokens(wrapper, (high, high)) < queries:
                low, high = high, 2 * high
            while high - low > 1:  # tokens grow with the side
                mid = (low + high) // 2
                if count_tokens(wrapper, (mid, mid)) < queries:
                    low = mid
                else:
                    high = mid
            raise ExportNotSupportedError(
                f'{shape[0]} x {shape[1]} gives {type(wrapper.detector).__name__} {tokens} '
                f'encoder tokens, fewer than its {queries} queries: use sizes with at least '
                f'{queries} tokens (e.g. {high} x {high} or larger)')


def check_exportable(wrapper: nn.Module) -> None:
    """An :class:`ExportNotSupportedError` for a wrapper with a module in training mode: the
    trace would freeze one draw of CAPE's position augmentation (and of dropout) into the
    graph. In eval mode CAPE2d exports with dynamic height and width like the other
    encodings (its positions follow the traced feature-map shape)."""
    training = [name or type(wrapper).__name__ for name, m in wrapper.named_modules()
                if m.training]
    if training:
        raise ExportNotSupportedError(
            f'{training[0]} is in training mode (its random augmentation / dropout would be '
            'traced into the graph); call .eval() or use wrap_model()')


def export(wrapper: nn.Module, out_file: str, shape: Sequence[int] = (224, 224),
           opset: int = DEFAULT_OPSET) -> str:
    """Export ``wrapper`` (see :func:`wrap_model`) to ``out_file`` with dynamic H and W.

    Args:
        wrapper (nn.Module): A :class:`DetectorExportWrapper` or
            :class:`ClassifierExportWrapper`.
        out_file (str): The ``.onnx`` path (folders are created).
        shape (Sequence[int]): ``(H, W)`` of the image traced for the export. Defaults to
            ``(224, 224)``.
        opset (int): ONNX opset, >= 16 for mmcv's deformable attention. Defaults to 17.

    Returns:
        str: ``out_file``.
    """
    if opset < 16:
        raise ValueError(f'opset {opset} < 16: GridSample (deformable attention) needs 16')
    check_exportable(wrapper)
    check_sizes(wrapper, [shape])
    os.makedirs(osp.dirname(osp.abspath(out_file)), exist_ok=True)
    img = torch.randn(1, 3, *shape)
    names = list(wrapper.output_names)
    dynamic = {'img': {2: 'height', 3: 'width'}}
    with torch.no_grad(), warnings.catch_warnings():
        warnings.filterwarnings('ignore', category=torch.jit.TracerWarning)
        warnings.filterwarnings('ignore', category=DeprecationWarning)
        warnings.filterwarnings('ignore', category=UserWarning)
        torch.onnx.export(
            wrapper, (img, ), out_file, dynamo=False, opset_version=opset,
            input_names=['img'], output_names=names, dynamic_axes=dynamic,
            do_constant_folding=True)
    import onnx
    onnx.checker.check_model(onnx.load(out_file))
    return out_file


def check(wrapper: nn.Module, onnx_file: str, shapes: Sequence[Sequence[int]],
          atol: float = DEFAULT_ATOL, seed: int = 0,
          inputs: Optional[Sequence[torch.Tensor]] = None) -> List[Dict]:
    """Run ``onnx_file`` in onnxruntime and ``wrapper`` in PyTorch (its top-k's breaking ties
    by lower index, as ONNX's ``TopK``) on the same random image of every ``(H, W)`` in
    ``shapes`` (drawn from ``seed``), or on ``inputs`` where given.

    Each top-k selection (a two-stage detector's query selection) is compared too. Where
    onnxruntime selects other tokens than PyTorch, they must be a top-k of PyTorch's scores up
    to ``atol`` (:func:`compare_selection`: scores closer than the backends' rounding, in the
    other order); PyTorch then runs again with onnxruntime's selection, and the outputs are
    compared on that run: the same function of the same selection.

    Returns:
        list[dict]: Per shape ``shape``, ``outputs`` (name -> shape) and ``max_abs_diff``
        (name -> float), ``selections`` (per top-k, :func:`compare_selection`'s dict),
        ``unforced_max_abs_diff`` (the differences before the rerun; equal to
        ``max_abs_diff`` where no selection differs), ``ok`` (all shapes equal, every
        selection a near-tie reordering at most and every diff <= ``atol``).
    """
    import tempfile

    import onnxruntime as ort
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = torch.get_num_threads()
    with tempfile.TemporaryDirectory() as tmp:
        plus = osp.join(tmp, 'with_topk.onnx')
        num_topk = with_topk_outputs(onnx_file, plus)
        session = ort.InferenceSession(plus, opts, providers=['CPUExecutionProvider'])
    num_out = len(session.get_outputs()) - 2 * num_topk
    names = [o.name for o in session.get_outputs()][:num_out]
    rows = []
    gen = torch.Generator().manual_seed(seed)
    if inputs is None:
        inputs = [torch.randn(1, 3, *shape, generator=gen) for shape in shapes]
    for img in inputs:
        shape = img.shape[-2:]
        calls = []
        with torch.no_grad(), _selections(calls):
            ref = wrapper(img)
        got = session.run(None, {'img': img.numpy()})
        got, their_topk = got[:num_out], got[num_out:]
        selections, forced = [], {}
        if len(calls) == num_topk:  # the graph's TopK nodes are PyTorch's calls, in order
            for i, (scores, dim, out) in enumerate(calls):
                theirs = torch.from_numpy(their_topk[2 * i + 1]).to(out.indices.dtype)
                selections.append(compare_selection(scores, dim, out.indices, theirs, atol))
                if selections[-1]['reordered'] > 0:
                    forced[i] = theirs
        outputs, unforced = _diffs(names, ref, got)
        diffs = unforced
        if forced:  # the same selection as onnxruntime's
            with torch.no_grad(), _selections([], forced):
                ref = wrapper(img)
            outputs, diffs = _diffs(names, ref, got)
        rows.append(dict(shape=tuple(shape), outputs=outputs, max_abs_diff=diffs,
                         selections=selections, unforced_max_abs_diff=unforced,
                         ok=all(s['near_tie'] for s in selections)
                         and all(d <= atol for d in diffs.values())))
    return rows


def _diffs(names, ref, got) -> Tuple[Dict[str, tuple], Dict[str, float]]:
    """Per output name, onnxruntime's shape and the largest absolute difference to PyTorch's
    (inf for a shape that differs)."""
    ref = ref if isinstance(ref, tuple) else (ref, )
    outputs, diffs = {}, {}
    for name, r, g in zip(names, ref, got):
        r = r.numpy()
        outputs[name] = tuple(g.shape)
        diffs[name] = float('inf') if r.shape != g.shape else (
            float(np.abs(r - g).max()) if r.size else 0.0)
    return outputs, diffs


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('config')
    parser.add_argument('--checkpoint', default=None,
                        help='weights (loaded strictly and safely); without it the model is '
                        'randomly initialised and no pretrained backbone is downloaded')
    parser.add_argument('--out', default=None, help='the .onnx file; defaults to '
                        'work_dirs/<config name>.onnx')
    parser.add_argument('--shape', type=int, nargs=2, default=None, metavar=('H', 'W'),
                        help='image size traced for the export (default: 800 1216 for '
                        'detectors, 224 224 for classifiers)')
    parser.add_argument('--check-shape', type=int, nargs=2, action='append', default=None,
                        metavar=('H', 'W'), help='compare onnxruntime with PyTorch at this '
                        'size; repeat for several (default: the export size and a transposed '
                        'one)')
    parser.add_argument('--seed', type=int, action='append', default=None,
                        help='seed of the random check images; repeat for several '
                        '(default: 0)')
    parser.add_argument('--opset', type=int, default=DEFAULT_OPSET)
    parser.add_argument('--atol', type=float, default=DEFAULT_ATOL)
    parser.add_argument('--cfg-options', nargs='+', default=None,
                        help='key=value overrides of the config')
    return parser.parse_args()


def main():
    args = parse_args()
    cfg_options = None
    if args.cfg_options:
        from mmengine.config import DictAction
        ns = argparse.Namespace()
        DictAction(option_strings=[], dest='o')(None, ns, args.cfg_options)
        cfg_options = ns.o
    model = build_model(args.config, args.checkpoint, cfg_options)
    wrapper = wrap_model(model)
    is_det = isinstance(wrapper, (DetectorExportWrapper, MaskFormerExportWrapper))
    shape = tuple(args.shape or ((800, 1216) if is_det else (224, 224)))
    out = args.out or osp.join('work_dirs', osp.splitext(osp.basename(args.config))[0] + '.onnx')
    shapes = args.check_shape or [shape, shape[::-1]]
    check_sizes(wrapper, [shape, *shapes])  # before the export: one line, no traceback
    export(wrapper, out, shape, args.opset)
    print(f'exported {out} (opset {args.opset}, input img (1, 3, height, width))')
    print(f'| H x W | seed | outputs | max abs diff (onnxruntime - torch) | top-k selections '
          f'(ranks reordered, largest score gap) | within {args.atol:g} |')
    print('|---|---|---|---|---|---|')
    rows = []
    for seed in args.seed or [0]:
        for r in check(wrapper, out, shapes, args.atol, seed=seed):
            rows.append(r)
            outs = ', '.join(f'{k} {v}' for k, v in r['outputs'].items())
            diffs = ', '.join(f'{k} {v:.2e}' for k, v in r['max_abs_diff'].items())
            sels = '; '.join(selection_text(s) for s in r['selections']) or '-'
            if r['unforced_max_abs_diff'] != r['max_abs_diff']:
                sels += '; on its own selection: ' + ', '.join(
                    f'{k} {v:.2e}' for k, v in r['unforced_max_abs_diff'].items())
            print(f'| {r["shape"][0]} x {r["shape"][1]} | {seed} | {outs} | {diffs} | {sels} | '
                  f'{"yes" if r["ok"] else "NO"} |')
    if not all(r['ok'] for r in rows):
        raise SystemExit('onnxruntime and PyTorch disagree (see the table)')


def selection_text(sel: dict) -> str:
    """One table cell of :func:`compare_selection`'s dict."""
    if not sel['reordered']:
        return 'the same'
    if sel['reordered'] < 0:
        return 'other shape'
    kind = 'near-ties, outputs compared on one selection' if sel['near_tie'] else 'NOT near-ties'
    return f"{sel['reordered']} ranks, gap {sel['max_gap']:.1e} ({kind})"


if __name__ == '__main__':
    from mmposenc.engine import (CheckpointMismatchError, InvalidCheckpointError,
                                 UnsafeCheckpointError)
    from mmposenc.registry import UnknownTypeError
    try:
        main()
    except (FileNotFoundError, InvalidCheckpointError, UnsafeCheckpointError,
            CheckpointMismatchError, UnknownTypeError, ExportNotSupportedError) as err:
        raise SystemExit(f'{type(err).__name__}: {err}')  # one line, no traceback
