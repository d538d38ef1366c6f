"""Test scales of a detector: parse ``S`` / ``SXxSY`` specs, rewrite a test pipeline's
``Resize`` for a scale, and evaluate a Runner's model at several scales through mmengine's
``TestLoop`` and the config's evaluator.

Shared by ``tools/analysis/detection_scales.py`` (a trained detector at other test scales) and
the study ``projects/detection_resolution``. A scale is ``S`` (both sides times S) or ``SXxSY``
(width times SX, height times SY: ``1x0.75`` keeps the width and squeezes the height).

Examples:
    >>> from mmposenc.utils.tools.scales import parse_scale, scale_label, set_test_scale
    >>> parse_scale('1x0.75'), scale_label((1.5, 1.5))
    ((1.0, 0.75), '1.5')
    >>> set_test_scale([dict(type='Resize', scale_factor=1.0, keep_ratio=True)], '2')
    [{'type': 'Resize', 'scale_factor': 2.0, 'keep_ratio': True}]
"""
import copy
import math
import time
from typing import List, Sequence, Tuple

Scale = Tuple[float, float]  # (width factor, height factor)

#: resize steps a test scale rewrites
RESIZE_TYPES = ('Resize', )
#: resize steps whose output size a test scale cannot set
REFUSED_TYPES = ('RandomResize', 'RandomChoiceResize', 'FixShapeResize', 'RandomChoice',
                 'TestTimeAug', 'MultiScaleFlipAug')


def parse_scale(spec) -> Scale:
    """``'1.5'`` -> (1.5, 1.5); ``'1x0.75'`` -> (1.0, 0.75) (width, height factors).

    Raises:
        ValueError: for anything else, or a factor that is not positive and finite.
    """
    if isinstance(spec, (int, float)) and not isinstance(spec, bool):
        parts = [float(spec)] * 2
    else:
        text = str(spec).strip().lower()
        try:
            parts = [float(p) for p in text.split('x')]
        except ValueError:
            parts = []
        if len(parts) == 1:
            parts = parts * 2
    if len(parts) != 2 or not all(math.isfinite(p) and p > 0 for p in parts):
        raise ValueError(f'a test scale is S or SXxSY with positive factors (e.g. 0.5, 2, '
                         f'1x0.75 = width x1, height x0.75), got {spec!r}')
    return (parts[0], parts[1])


def parse_scales(specs: Sequence) -> List[Scale]:
    """:func:`parse_scale` of each spec, duplicates refused (one column per scale)."""
    scales = [parse_scale(s) for s in specs]
    if not scales:
        raise ValueError('no test scale given')
    seen = set()
    for spec, s in zip(specs, scales):
        if s in seen:
            raise ValueError(f'test scale {spec!r} is given twice ({scale_label(s)})')
        seen.add(s)
    return scales


def scale_label(scale: Scale) -> str:
    """``(1.5, 1.5)`` -> ``'1.5'``; ``(1.0, 0.75)`` -> ``'1x0.75'``."""
    fmt = lambda v: f'{v:g}'  # noqa: E731
    sx, sy = scale
    return fmt(sx) if sx == sy else f'{fmt(sx)}x{fmt(sy)}'


def is_square(scale: Scale) -> bool:
    return scale[0] == scale[1]


def _type(step: dict) -> str:
    return str(step.get('type', '')).split('.')[-1]


def set_test_scale(pipeline: Sequence[dict], scale) -> List[dict]:
    """A copy of a detection test ``pipeline`` whose ``Resize`` scales its output by ``scale``.

    ``scale`` is a spec of :func:`parse_scale` or a (width, height) factor pair. The config's
    ``Resize`` defines scale 1 (the size the model was trained at); its ``scale_factor`` is
    multiplied by the factors, or its fixed ``scale`` (W, H) by them. A change of aspect needs
    ``keep_ratio=False`` (set here when the step has a ``scale_factor``; a fixed ``scale`` with
    ``keep_ratio=True`` fits the image into a box and cannot change its aspect: refused).
    Scale 1 returns the pipeline unchanged. The ``Resize`` records the factors it applied
    (``scale_factor``) and mmdet's heads divide the predicted boxes by them, so the metric
    compares them with the original annotations.

    Raises:
        ValueError: a pipeline with no ``Resize`` step, or with a random / fixed-shape / TTA
            resize, or an aspect change of a ``keep_ratio=True`` fixed-size ``Resize``.
    """
    sx, sy = scale if isinstance(scale, tuple) else parse_scale(scale)
    pipeline = copy.deepcopy(list(pipeline))
    types = [_type(s) for s in pipeline]
    refused = [t for t in types if t in REFUSED_TYPES]
    if refused:
        raise ValueError(f'the test pipeline {types} has {refused[0]}: a test scale cannot set '
                         'its output size; use one Resize (scale_factor=... or scale=(W, H))')
    resizes = [s for s in pipeline if _type(s) in RESIZE_TYPES]
    if not resizes:
        raise ValueError(f'the test pipeline {types} has no Resize step: cannot change the '
                         'test scale; add dict(type="Resize", scale_factor=1.0, keep_ratio=True)')
    if (sx, sy) == (1.0, 1.0):
        return pipeline
    for step in resizes:
        if step.get('scale') is not None:
            size = step['scale']
            w, h = (size, size) if isinstance(size, (int, float)) else size
            if sx != sy and step.get('keep_ratio', False):
                raise ValueError(
                    f'test scale {scale_label((sx, sy))} changes the aspect, but the test '
                    f'pipeline resizes to scale={size} with keep_ratio=True (fits the image '
                    'into a box, aspect kept): use a Resize with scale_factor, or keep_ratio='
                    'False')
            step['scale'] = (int(round(w * sx)), int(round(h * sy)))
            step.pop('scale_factor', None)
        else:
            f = step.get('scale_factor', 1.0)
            fx, fy = (f, f) if isinstance(f, (int, float)) else f
            if sx == sy and fx == fy:
                step['scale_factor'] = fx * sx
            else:
                step['scale_factor'] = (fx * sx, fy * sy)
                step['keep_ratio'] = False
    return pipeline


def evaluate_scales(runner, cfg, scales: Sequence[Scale], log=print) -> List[dict]:
    """COCO metrics of ``runner``'s model at every scale, through mmengine's ``TestLoop`` and
    the config's ``test_evaluator``: one test dataloader per scale (:func:`set_test_scale`).

    Returns:
        list[dict]: per scale ``scale`` (label), ``sx``, ``sy``, ``metrics`` ({name: value}),
        ``eval_wall`` and ``eval_cpu`` (s, wall and process CPU).
    """
    from mmengine.runner import TestLoop
    rows = []
    for scale in scales:
        dl_cfg = copy.deepcopy(cfg.test_dataloader)
        dl_cfg.dataset.pipeline = set_test_scale(dl_cfg.dataset.pipeline, scale)
        t0, c0 = time.perf_counter(), time.process_time()
        metrics = TestLoop(runner, dl_cfg, copy.deepcopy(cfg.test_evaluator)).run()
        rows.append(dict(scale=scale_label(scale), sx=scale[0], sy=scale[1],
                         metrics={k: float(v) for k, v in metrics.items()},
                         eval_wall=time.perf_counter() - t0,
                         eval_cpu=time.process_time() - c0))
        log(f'scale {scale_label(scale)}: mAP {metrics.get("coco/bbox_mAP", float("nan")):.3f}')
    return rows


def use_msda_pytorch(mode: str, device: str) -> str:
    """Which path mmcv's ``MultiScaleDeformableAttention`` takes: ``'cuda'`` (its kernel) or
    ``'pytorch'``. ``mode`` ``'pytorch'`` forces the PyTorch path (sets
    ``mmcv.ops.multi_scale_deform_attn.IS_CUDA_AVAILABLE = False``); ``'auto'`` does so on
    CUDA when the kernel fails on a tiny input (an mmcv built without CUDA ops); ``'cuda'``
    keeps the kernel. On the CPU the PyTorch path is mmcv's own choice."""
    import mmcv.ops.multi_scale_deform_attn as msda
    if device == 'cpu':
        return 'pytorch'
    if mode == 'auto':
        import torch
        try:
            value = torch.zeros(1, 4, 1, 2, device=device)
            shapes = torch.tensor([[2, 2]], device=device)
            start = torch.zeros(1, dtype=torch.long, device=device)
            loc = torch.full((1, 1, 1, 1, 1, 2), 0.5, device=device)
            weights = torch.ones(1, 1, 1, 1, 1, device=device)
            msda.MultiScaleDeformableAttnFunction.apply(value, shapes, start, loc, weights, 64)
            torch.cuda.synchronize()
            mode = 'cuda'
        except Exception:  # noqa: BLE001 (any failure of the compiled kernel: use PyTorch)
            mode = 'pytorch'
    if mode == 'pytorch':
        msda.IS_CUDA_AVAILABLE = False
    return mode


def check_device(device: str) -> None:
    """Refuse a ``cuda`` device where torch finds none (``SystemExit`` with the fix)."""
    import torch
    if device.startswith('cuda') and not torch.cuda.is_available():
        raise SystemExit(f'--device {device}: torch.cuda.is_available() is False on this '
                         'machine; use --device cpu')
