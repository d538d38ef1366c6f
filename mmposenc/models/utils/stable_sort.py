"""A context in which every sort breaks ties by index, as an image alone and in a batch must."""
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
