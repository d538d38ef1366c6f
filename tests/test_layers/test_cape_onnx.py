"""CAPE2d in eval mode traces to an ONNX graph that computes its positions from the input's
shape (and padding mask): exported at one grid size, onnxruntime matches PyTorch at others,
with and without a padding mask, for every evaluation range. The detectors built on it are
exported in tests/test_deployment/test_pytorch2onnx.py."""
import warnings

import pytest
import torch
from torch import nn

from mmposenc.models.layers import CAPE2d

ort = pytest.importorskip('onnxruntime')
pytest.importorskip('onnx')

#: onnxruntime against PyTorch, as tools/deployment/pytorch2onnx.py's DEFAULT_ATOL
ATOL = 1e-4


class _FeatureMapCAPE(nn.Module):
    """``feat (B, C, H, W)`` [and ``mask (B, H, W)``, True = padded] -> CAPE (B, H*W, C), the
    way the detectors call it: the grid size taken from ``feat.shape``."""

    def __init__(self, cape):
        super().__init__()
        self.cape = cape

    def forward(self, feat, mask=None):
        return self.cape(feat.shape[-2:], batch_size=feat.shape[0], padding_mask=mask)


def _export(module, inputs, path):
    names = ['feat', 'mask'][:len(inputs)]
    dynamic = {'feat': {0: 'batch', 2: 'height', 3: 'width'},
               'mask': {0: 'batch', 1: 'height', 2: 'width'}}
    with torch.no_grad(), warnings.catch_warnings():
        warnings.filterwarnings('ignore', category=torch.jit.TracerWarning)
        warnings.filterwarnings('ignore', category=DeprecationWarning)
        warnings.filterwarnings('ignore', category=UserWarning)
        torch.onnx.export(module, tuple(inputs), str(path), dynamo=False, opset_version=17,
                          input_names=names, output_names=['pos'],
                          dynamic_axes={n: dynamic[n] for n in names})
    return ort.InferenceSession(str(path), providers=['CPUExecutionProvider'])


def _padded_mask(batch, h, w):
    """Image 0 fills the grid; the others lose right columns and / or bottom rows."""
    mask = torch.zeros(batch, h, w, dtype=torch.bool)
    if batch > 1:
        mask[1, :, w // 2 + 1:] = True
    if batch > 2:
        mask[2, h - 2:] = True
        mask[2, :, w - 1:] = True
    return mask


@pytest.mark.parametrize('with_mask', [False, True], ids=['no_mask', 'padded'])
@pytest.mark.parametrize('cfg', [
    dict(),
    dict(eval_pos_range=1.5),
    dict(eval_pos_range='sqrt', grid_size=(6, 8)),
    dict(eval_pos_range='linear', grid_size=(6, 8)),
], ids=['gamma1', 'gamma1.5', 'sqrt', 'linear'])
def test_onnx_positions_follow_the_input_size(cfg, with_mask, tmp_path):
    cape = _FeatureMapCAPE(CAPE2d(32, **cfg).eval()).eval()
    traced_size = (2, 6, 8)
    inputs = [torch.zeros(traced_size[0], 32, *traced_size[1:])]
    if with_mask:
        inputs.append(_padded_mask(*traced_size))
    session = _export(cape, inputs, tmp_path / 'cape.onnx')
    # other sizes (odd, non-square, a single row), other batch sizes, and the traced one
    for batch, h, w in [(3, 5, 11), (1, 9, 4), (3, 1, 7), traced_size]:
        feed = dict(feat=torch.zeros(batch, 32, h, w))
        if with_mask:
            feed['mask'] = _padded_mask(batch, h, w)
        with torch.no_grad():
            ref = cape(*feed.values())
        got = torch.from_numpy(session.run(None, {k: v.numpy() for k, v in feed.items()})[0])
        assert got.shape == ref.shape == (batch, h * w, 32)
        assert (got - ref).abs().max() <= ATOL, (batch, h, w)
        if with_mask:  # padded tokens are zero in the graph too
            assert (got[feed['mask'].flatten(1)] == 0).all()
    # not vacuous: the embedding does depend on the grid (token (0, 1) of a 5 x 11 grid sits
    # at x = -0.8, that of a 9 x 4 grid at x = -1/3)
    small = torch.from_numpy(session.run(None, {'feat': torch.zeros(1, 32, 5, 11).numpy(),
                                                **({'mask': _padded_mask(1, 5, 11).numpy()}
                                                   if with_mask else {})})[0])
    large = torch.from_numpy(session.run(None, {'feat': torch.zeros(1, 32, 9, 4).numpy(),
                                                **({'mask': _padded_mask(1, 9, 4).numpy()}
                                                   if with_mask else {})})[0])
    assert (small[0, 1] - large[0, 1]).abs().max() > 0.1


def test_eager_grid_sizes_stay_python_numbers():
    """Outside tracing a size given as a 0-dim tensor is read as an int, as before."""
    cape = CAPE2d(16).eval()
    assert torch.equal(cape((torch.tensor(3), torch.tensor(4)), batch_size=2),
                       cape((3, 4), batch_size=2))
