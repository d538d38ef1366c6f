"""Contexts in which every sort and every top-k breaks ties by index, as an image alone and in a
batch must (and as ONNX's TopK does)."""
import torch
from torch.overrides import TorchFunctionMode

#: The sorts the context makes stable, and their positional arguments after the tensor.
_SORTS = {torch.sort: ('dim', 'descending', 'stable'),
          torch.Tensor.sort: ('dim', 'descending', 'stable'),
          torch.argsort: ('dim', 'descending', 'stable'),
          torch.Tensor.argsort: ('dim', 'descending', 'stable')}


class StableSort(TorchFunctionMode):
    """``torch.sort`` / ``argsort`` (function and method) called inside run with
    ``stable=True``: equal values keep their index order.

    mmdet's dense heads rank candidates with ``scores.sort(descending=True)``, whose order
    among equal scores is the sort kernel's (it changes with the CPU's vector width: AVX2 and
    AVX-512 builds keep different ones of a row of anchors with bit-equal scores in a uniform
    image region). With each image's cells in the same row-major order alone and batched, the
    index order is the image's own.

    Examples:
        >>> x = torch.tensor([1., 3., 3., 2.])
        >>> with StableSort():
        ...     x.sort(descending=True).indices.tolist()
        [1, 2, 3, 0]
    """

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        names = _SORTS.get(func)
        if names is not None:
            tensor, *rest = args
            kwargs.update(zip(names, rest))
            kwargs['stable'] = True
            args = (tensor, )
        return func(*args, **kwargs)


#: The top-k selections the context makes index-ordered, and their positional arguments
#: after the tensor.
_TOPKS = {torch.topk: ('k', 'dim', 'largest', 'sorted'),
          torch.Tensor.topk: ('k', 'dim', 'largest', 'sorted')}


def stable_topk(input: torch.Tensor, k: int, dim: int = -1, largest: bool = True,
                sorted: bool = True) -> torch.return_types.topk:
    """``torch.topk`` whose ties are broken by index: of equal values the lower index is
    selected, and placed first.

    This is the rule of ONNX's ``TopK`` ("the element with the lower index will appear
    first", followed by onnxruntime); ``torch.topk``'s order among equal values is its
    kernel's (on CPU a partial sort whose picks depend on the tensor's length and the
    vector width). Computed as a stable sort and a slice, so ``sorted`` is always honoured.

    Raises:
        RuntimeError: ``k`` larger than the size of ``dim`` (as ``torch.topk``).

    Examples:
        >>> stable_topk(torch.tensor([1., 3., 3., 2., 3.]), 2).indices.tolist()
        [1, 2]
    """
    size = input.shape[dim] if input.dim() else 1
    if not 0 <= k <= size:
        raise RuntimeError(f'topk: selected index k ({k}) out of range: dimension {dim} '
                           f'has {size} elements')
    values, indices = torch.sort(input, dim=dim, descending=largest, stable=True)
    return torch.return_types.topk((values.narrow(dim, 0, k), indices.narrow(dim, 0, k)))


class StableTopk(TorchFunctionMode):
    """``torch.topk`` (function and method) called inside run as :func:`stable_topk`: equal
    values are selected and ordered by lower index, the rule of ONNX's ``TopK``.

    The DETR family's selections are top-k's: the query selection of two-stage detectors
    (DINO's 900 encoder tokens) and every head's ``max_per_img`` cut over ``queries x
    classes``. With two bit-equal scores at the cut, ``torch.topk`` keeps one or the other
    depending on the tensor's length (an image alone or in a padded batch) and on the CPU's
    kernels; in DINO the i-th selected token is paired with the i-th content query, so a
    swapped tie changes every later row. Under this mode an image keeps the same candidates
    alone and batched (its own tokens and queries are in the same order in both), and the
    PyTorch model selects what its ONNX export selects.

    During an ONNX export the call is left to ``torch.topk``: it exports as ``TopK``, which
    breaks ties by the same rule.

    Examples:
        >>> x = torch.zeros(300 * 80)
        >>> with StableTopk():
        ...     x.topk(3).indices.tolist()
        [0, 1, 2]
    """

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        names = _TOPKS.get(func)
        if names is not None and not torch.onnx.is_in_onnx_export():
            tensor, *rest = args
            kwargs.update(zip(names, rest))
            return stable_topk(tensor, **kwargs)
        return func(*args, **kwargs)
