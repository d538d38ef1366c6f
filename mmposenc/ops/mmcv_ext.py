"""PyTorch kernels behind the names of mmcv's compiled ``mmcv._ext``: the ops-free route.

mmcv without compiled ops (``mmcv-lite``, or ``onedl-mmcv`` built without torch) ships every
``mmcv.ops`` wrapper but not the ``_ext`` library they call, so ``import mmcv.ops`` fails and
so does mmdet. :mod:`mmposenc.ops.ext_finder` loads this file as ``mmcv._ext`` when no compiled
one is installed. mmcv's own wrappers (``batched_nms``, ``RoIAlign``,
``MultiScaleDeformableAttention``, ...) then run unchanged on these kernels:

- ``nms``: ``torchvision.ops.nms`` (CPU and CUDA);
- ``roi_align_forward`` / ``roi_align_backward`` (``pool_mode='avg'``):
  ``torchvision.ops.roi_align``;
- ``ms_deform_attn_forward`` / ``ms_deform_attn_backward``: mmcv's own
  ``multi_scale_deformable_attn_pytorch`` (its CPU path) and its autograd;
- ``sigmoid_focal_loss_*`` and ``softmax_focal_loss_*``: the formulas of mmcv's CUDA
  kernels, in PyTorch.

Any other kernel is refused with one line naming it. An ``mmcv.ops`` module class whose
kernels are missing (``DeformConv2d``, ``CARAFE``, ...) is refused when it is constructed, that
is when the model is built (:func:`guard_unsupported_modules`).
"""
import sys

import torch

#: ``{mmcv.ops module: kernels it asked for that this module lacks}``, filled as mmcv loads.
MISSING_BY_MODULE = {}
_HOW_TO = ('install mmcv with compiled ops (mmposenc: make setup ROUTE=compiled; see '
           'docs/get_started.md)')


class OpsFreeRouteError(RuntimeError):
    """An mmcv op that the ops-free route (mmcv without compiled ops) cannot run."""


def _refuse(what, kernels):
    raise OpsFreeRouteError(
        f'{what} needs mmcv\'s compiled kernel{"s" if len(kernels) > 1 else ""} '
        f'{", ".join(sorted(kernels))}, which this mmcv lacks (ops-free route: PyTorch kernels '
        f'for NMS, RoIAlign, multi-scale deformable attention and focal losses only); '
        f'{_HOW_TO}')


class _Missing:
    """A kernel this module lacks: it is there for mmcv's import-time check and raises when
    called."""

    def __init__(self, name):
        self.__name__ = self.name = name

    def __call__(self, *args, **kwargs):
        _refuse(f'mmcv op {self.name!r}', [self.name])


def __getattr__(name):
    """mmcv's ``load_ext`` asserts that each kernel it names exists: record a missing one for
    the ``mmcv.ops`` module that asked and hand it a :class:`_Missing`."""
    if name.startswith('__'):
        raise AttributeError(name)
    frame = sys._getframe(1)
    while frame is not None and not frame.f_globals.get('__name__', '').startswith('mmcv.ops.'):
        frame = frame.f_back
    if frame is not None:
        MISSING_BY_MODULE.setdefault(frame.f_globals['__name__'], set()).add(name)
    return _Missing(name)


def get_compiler_version():
    return f'none (mmposenc ops-free route, torch {torch.__version__})'


def get_compiling_cuda_version():
    return 'not compiled (mmposenc ops-free route)'


# ------------------------------------------------------------------------------- NMS --------
def nms(boxes, scores, iou_threshold, offset=0):
    """Indices kept by NMS, in descending score order (mmcv's ``nms_impl``).

    ``offset=1`` (legacy ``x2 - x1 + 1`` widths) adds 1 to ``x2, y2`` first: the same IoU in
    exact arithmetic, rounded differently.
    """
    import torchvision
    if boxes.numel() == 0:
        return boxes.new_zeros(0, dtype=torch.long)
    if offset:
        boxes = torch.cat([boxes[:, :2], boxes[:, 2:4] + offset], dim=1)
    return torchvision.ops.nms(boxes, scores, float(iou_threshold))


# ------------------------------------------------------------------------- RoIAlign --------
def _roi_align_avg(pool_mode):
    if pool_mode != 1:
        _refuse("mmcv op 'roi_align' with pool_mode='max'", ['roi_align_forward (max)'])


def roi_align_forward(input, rois, output, argmax_y, argmax_x, aligned_height, aligned_width,
                      spatial_scale, sampling_ratio, pool_mode, aligned):
    """Fills ``output`` (K, C, aligned_height, aligned_width) in place."""
    import torchvision
    _roi_align_avg(pool_mode)
    output.copy_(torchvision.ops.roi_align(
        input, rois, (aligned_height, aligned_width), spatial_scale=float(spatial_scale),
        sampling_ratio=int(sampling_ratio), aligned=bool(aligned)))


def roi_align_backward(grad_output, rois, argmax_y, argmax_x, grad_input, aligned_height,
                       aligned_width, spatial_scale, sampling_ratio, pool_mode, aligned):
    """Fills ``grad_input`` in place: RoIAlign is linear in its input, so the gradient is that
    of the forward at any input (zeros here)."""
    import torchvision
    _roi_align_avg(pool_mode)
    with torch.enable_grad():
        x = torch.zeros_like(grad_input, requires_grad=True)
        out = torchvision.ops.roi_align(
            x, rois, (aligned_height, aligned_width), spatial_scale=float(spatial_scale),
            sampling_ratio=int(sampling_ratio), aligned=bool(aligned))
        grad, = torch.autograd.grad(out, x, grad_output)
    grad_input.copy_(grad)


# ------------------------------------------------------- multi-scale deformable attention ---
def _msda_pytorch():
    from mmcv.ops.multi_scale_deform_attn import multi_scale_deformable_attn_pytorch
    return multi_scale_deformable_attn_pytorch


def ms_deform_attn_forward(value, value_spatial_shapes, value_level_start_index,
                           sampling_locations, attention_weights, im2col_step):
    """(bs, num_queries, num_heads * head_dims): mmcv's PyTorch function."""
    return _msda_pytorch()(value, value_spatial_shapes, sampling_locations, attention_weights)


def ms_deform_attn_backward(value, value_spatial_shapes, value_level_start_index,
                            sampling_locations, attention_weights, grad_output, grad_value,
                            grad_sampling_loc, grad_attn_weight, im2col_step):
    """Fills the three gradients in place, by autograd through the PyTorch function."""
    with torch.enable_grad():
        inputs = [t.detach().requires_grad_() for t in
                  (value, sampling_locations, attention_weights)]
        out = _msda_pytorch()(inputs[0], value_spatial_shapes, inputs[1], inputs[2])
        grads = torch.autograd.grad(out, inputs, grad_output)
    for dst, grad in zip((grad_value, grad_sampling_loc, grad_attn_weight), grads):
        dst.copy_(grad)


# ----------------------------------------------------------------- sigmoid focal loss -------
def _focal_terms(input, target, weight):
    """(positive mask, p, log p, log(1 - p), per-row weight) as mmcv's CUDA kernel has them;
    ``target == num_classes`` is background."""
    p = input.sigmoid()
    classes = torch.arange(input.size(1), device=input.device)
    pos = target.unsqueeze(1) == classes.unsqueeze(0)
    tiny = torch.finfo(input.dtype).tiny  # the kernel's FLT_MIN
    log_p = p.clamp(min=tiny).log()
    log_q = (1 - p).clamp(min=tiny).log()
    w = None
    if weight.numel():
        w = weight[target.clamp(max=weight.numel() - 1)].unsqueeze(1)
    return pos, p, log_p, log_q, w


def sigmoid_focal_loss_forward(input, target, weight, output, gamma, alpha):
    """Fills ``output`` (N, C) with the element-wise loss."""
    pos, p, log_p, log_q, w = _focal_terms(input, target, weight)
    loss = torch.where(pos, -alpha * (1 - p).pow(gamma) * log_p,
                       -(1 - alpha) * p.pow(gamma) * log_q)
    output.copy_(loss if w is None else loss * w)


def sigmoid_focal_loss_backward(input, target, weight, grad_input, gamma, alpha):
    """Fills ``grad_input`` (N, C) with d loss / d input (mmcv's CUDA kernel's formula)."""
    pos, p, log_p, log_q, w = _focal_terms(input, target, weight)
    grad = torch.where(pos, -alpha * (1 - p).pow(gamma) * (1 - p - gamma * p * log_p),
                       -(1 - alpha) * p.pow(gamma) * (gamma * (1 - p) * log_q - p))
    grad_input.copy_(grad if w is None else grad * w)


def _softmax_focal_terms(softmax, target, weight):
    """(p of the target class, log p, per-row weight, valid rows); ``target < 0`` is ignored."""
    valid = target >= 0
    label = target.clamp(min=0)
    pred = softmax.gather(1, label.unsqueeze(1)).squeeze(1)
    log_p = pred.clamp(min=torch.finfo(softmax.dtype).tiny).log()
    w = weight[label] if weight.numel() else None
    return pred, log_p, w, valid


def softmax_focal_loss_forward(softmax, target, weight, output, gamma, alpha):
    """Fills ``output`` (N,) from the softmax probabilities."""
    pred, log_p, w, valid = _softmax_focal_terms(softmax, target, weight)
    loss = -alpha * (1 - pred).pow(gamma) * log_p
    loss = loss if w is None else loss * w
    output.copy_(torch.where(valid, loss, torch.zeros_like(loss)))


def softmax_focal_loss_backward(softmax, target, weight, buff, grad_input, gamma, alpha):
    """Fills ``buff`` (N,) and ``grad_input`` (N, C) as mmcv's two CUDA kernels do."""
    pred, log_p, w, valid = _softmax_focal_terms(softmax, target, weight)
    b = alpha * (-(1 - pred).pow(gamma) + gamma * (1 - pred).pow(gamma - 1) * pred * log_p)
    b = torch.where(valid, b if w is None else b * w, torch.zeros_like(b))
    buff.copy_(b)
    onehot = torch.zeros_like(softmax).scatter_(1, target.clamp(min=0).unsqueeze(1), 1.0)
    grad_input.copy_(b.unsqueeze(1) * (onehot - softmax) * valid.unsqueeze(1))


# ------------------------------------------------------------- refusal when built ----------
def guard_unsupported_modules():
    """Make each ``torch.nn.Module`` class of an ``mmcv.ops`` module that asked for a kernel
    missing here raise :class:`OpsFreeRouteError` when constructed. Idempotent.

    Returns:
        list[str]: The guarded classes, as ``module.Class``.
    """
    guarded = []
    for module_name, kernels in sorted(MISSING_BY_MODULE.items()):
        module = sys.modules.get(module_name)
        for name, obj in sorted(vars(module).items()) if module is not None else ():
            if not (isinstance(obj, type) and issubclass(obj, torch.nn.Module)
                    and obj.__module__ == module_name):
                continue
            if '__init__' in vars(obj) and getattr(obj.__init__, '_ops_free_guard', False):
                guarded.append(f'{module_name}.{name}')
                continue

            def init(self, *args, _cls=obj, _kernels=frozenset(kernels), **kwargs):
                _refuse(f'mmcv.ops.{_cls.__name__}', _kernels)

            init._ops_free_guard = True
            init.__wrapped__ = obj.__init__
            obj.__init__ = init
            guarded.append(f'{module_name}.{name}')
    return guarded
