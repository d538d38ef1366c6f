"""Helpers of the reference-parity tests: the fixtures written by
``tests/reference/generate/*.py`` from the official code, the probe weights of their
gradients, and :class:`Parity`, which compares and keeps the largest difference of a test
(the ``parity`` fixture of ``conftest.py`` hands one to every test)."""
import os.path as osp

import torch

FIXTURES = osp.join(osp.dirname(osp.abspath(__file__)), 'reference', 'fixtures')


def load_fixture(name):
    """``dict(meta=..., cases=[...], ...)`` of ``tests/reference/fixtures/<name>.pt``."""
    return torch.load(osp.join(FIXTURES, name + '.pt'), weights_only=True)


def probe(shape, seed):
    """``cos(0.7 i + seed)`` over the flat index: the weights of the scalar whose gradients
    the fixtures hold (``tests/reference/generate/_common.py``)."""
    n = 1
    for s in shape:
        n *= s
    return torch.cos(0.7 * torch.arange(n, dtype=torch.float64) + seed).float().reshape(shape)


class Parity:
    """Compares our tensors with the fixtures' and keeps the largest ``|difference|``."""

    def __init__(self, nodeid):
        self.nodeid = nodeid
        self.info = {}
        self.max_diff = 0.
        self.max_ref = 0.
        self.checks = 0

    def describe(self, **info):
        """method, ours, reference (fixture name), grids, modes: for the docs table."""
        self.info.update(info)

    def check(self, actual, expected, atol, rtol=0., what=''):
        actual = actual.detach().to(torch.float64)
        expected = expected.detach().to(torch.float64)
        assert actual.shape == expected.shape, (what, actual.shape, expected.shape)
        diff = (actual - expected).abs().max().item() if actual.numel() else 0.
        self.max_diff = max(self.max_diff, diff)
        self.max_ref = max(self.max_ref, expected.abs().max().item() if expected.numel() else 0.)
        self.checks += 1
        torch.testing.assert_close(actual, expected, atol=atol, rtol=rtol,
                                   msg=lambda m: f'{what}: {m}')
