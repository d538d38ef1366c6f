"""Contexts in which every sort and top-k breaks ties by index (as ONNX's TopK does)."""
import torch
from torch.overrides import TorchFunctionMode

#: The sorts made stable, and their positional arguments after the tensor.
_SORTS = {torch.sort: ('dim', 'descending', 'stable'),
          torch.Tensor.sort: ('dim', 'descending', 'stable'),
          torch.argsort: ('dim', 'descending', 'stable'),
          torch.Tensor.argsort: ('dim', 'descending', 'stable')}


class StableSort(TorchFunctionMode):
    """A context that runs ``torch.sort`` / ``argsort`` with ``stable=True``.

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


#: The top-k selections made index-ordered, and their positional arguments after the tensor.
_TOPKS = {torch.topk: ('k', 'dim', 'largest', 'sorted'),
          torch.Tensor.topk: ('k', 'dim', 'largest', 'sorted')}


def stable_topk(input: torch.Tensor, k: int, dim: int = -1, largest: bool = True,
                sorted: bool = True) -> torch.return_types.topk:
    """``torch.topk`` breaking ties by lower index, as ONNX's ``TopK``; always sorted.

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
    """A context that runs ``torch.topk`` as :func:`stable_topk` (not during ONNX export).

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
