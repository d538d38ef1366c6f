"""GPU check (issue 15): the CUDA paths against the CPU path, and AMP train steps on CUDA.

Run on a machine with a CUDA GPU, once per mmcv route (``make gpu-check`` runs both)::

    make test-gpu                  # ops-free: mmposenc's PyTorch kernels behind mmcv.ops
    make test-gpu ROUTE=compiled   # mmcv's CUDA ops, compiled (needs nvcc)

Without CUDA (``torch.cuda.is_available()`` False) or with an mmcv built without its CUDA ops,
every test skips with the reason. ``MMPOSENC_GPU_TEST_DEVICE`` (default ``cuda``) names the
device compared with the CPU; ``MMPOSENC_GPU_TEST_DEVICE=cpu`` runs the same code comparing the
CPU with itself (a dry run of the test code on a machine without a GPU; fp16 then skips).

- mmcv's ``MultiScaleDeformableAttention`` (as PEGDeformableDETR's encoder and decoder build
  it): the CUDA kernel (``MultiScaleDeformableAttnFunction``) equals the pure-PyTorch fallback
  that the module runs on the CPU, forward and backward, in float32.
- One SGD step of a tiny PEGDETR and PEGDeformableDETR (tests/test_detectors/tiny_detr_cfgs.py,
  a padded batch of two images of different sizes), ``encoder_pos`` 'peg' and 'sine': the losses,
  the gradients and the predictions (scores, boxes) after the step equal the CPU ones for the
  same weights and inputs, in float32 with TF32 off.
- bf16 and fp16 autocast train steps (mmengine's ``AmpOptimWrapper`` with ``dtype``; on the CPU
  dry run ``mmposenc.BF16OptimWrapper``): losses finite, every PEG parameter gets a finite
  non-zero gradient, the parameters stay finite after the step.

Not run on a GPU yet. Read from mmcv 2.1.0's source, not run: its CUDA kernel dispatches float,
double and half only (``AT_DISPATCH_FLOATING_TYPES_AND_HALF``), so the bf16 step of
PEGDeformableDETR on CUDA may fail with "not implemented for 'BFloat16'"; that failure is the
finding, not a defect of this test.
"""
import copy
import os
import sys

import pytest
import torch

pytest.importorskip('mmdet')
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                'test_detectors'))
from tiny_detr_cfgs import (build, deformable_detr_cfg, detr_cfg,  # noqa: E402
                            packed_inputs, randomise_pegs)

pytestmark = pytest.mark.cuda

DEVICE = os.environ.get('MMPOSENC_GPU_TEST_DEVICE', 'cuda')
SETUP_HINT = ('take the ops-free route (`make setup`: mmposenc\'s PyTorch kernels run on CUDA) '
              'or build mmcv with its CUDA ops (`make setup ROUTE=compiled` with nvcc)')

# float32 tolerances (TF32 off). MSDA: bilinear sampling in the kernel vs grid_sample, the
# backward accumulating with atomicAdd in another order
MSDA_FWD_TOL = dict(rtol=1e-5, atol=1e-5)
MSDA_GRAD_TOL = dict(rtol=1e-4, atol=1e-4)
# whole tiny detectors: losses, gradients (relative to the largest of the tensor), scores and
# boxes (pixels, images up to 128 px) after one SGD step
LOSS_TOL = dict(rtol=1e-4, atol=1e-5)
GRAD_REL_TOL = 1e-3
SCORE_TOL = 1e-4
BOX_TOL = 1e-3

SHAPES = [(3, 96, 80), (3, 64, 112)]  # a padded batch: masks on every level
LR = 0.01


def _cuda_ops_missing(device):
    """The reason to skip when mmcv's ext has no CUDA kernel for multi-scale deformable
    attention on ``device``, else None."""
    try:
        from mmcv.ops.multi_scale_deform_attn import MultiScaleDeformableAttnFunction
    except ImportError as e:  # mmcv-lite or a broken build
        return f'mmcv.ops does not import ({e}); {SETUP_HINT}'
    value = torch.rand(1, 4, 1, 2, device=device)
    shapes = torch.tensor([[2, 2]], device=device)
    start = torch.tensor([0], device=device)
    loc = torch.rand(1, 1, 1, 1, 1, 2, device=device)
    weights = torch.ones(1, 1, 1, 1, 1, device=device)
    try:
        MultiScaleDeformableAttnFunction.apply(value, shapes, start, loc, weights, 64)
    except RuntimeError as e:
        msg = str(e)
        if 'not found' in msg or 'not compiled with GPU support' in msg.lower():
            return (f'mmcv {__import__("mmcv").__version__} was built without its CUDA ops '
                    f'({msg.strip().splitlines()[0]}); {SETUP_HINT}')
        raise
    return None


@pytest.fixture(scope='module')
def device():
    dev = torch.device(DEVICE)
    if dev.type == 'cuda':
        if not torch.cuda.is_available():
            pytest.skip('no CUDA device: torch.cuda.is_available() is False (dry run on the '
                        'CPU: MMPOSENC_GPU_TEST_DEVICE=cpu)')
        reason = _cuda_ops_missing(dev)
        if reason:
            pytest.skip(reason)
    elif dev.type != 'cpu':
        pytest.fail(f'MMPOSENC_GPU_TEST_DEVICE={DEVICE!r}: expected cuda[:N] or cpu')
    return dev


@pytest.fixture(autouse=True)
def _no_tf32():
    """float32 means float32: cuDNN convolutions default to TF32 (10-bit mantissa)."""
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


# ---- 1. multi-scale deformable attention: CUDA kernel = PyTorch fallback -------------------

def test_msda_cuda_kernel_equals_the_cpu_fallback(device, monkeypatch):
    """The MultiScaleDeformableAttention of PEGDeformableDETR's tiny encoder (width 32, 4 heads,
    2 levels, 2 points, batch first) with random offset / weight projections (mmdet zeroes the
    offset weights) reaching outside the feature maps, a padding mask: output and the gradients
    of query, value and every parameter on ``device`` = the CPU module's."""
    from mmcv.ops import multi_scale_deform_attn as msda_mod
    calls = []
    real_apply = msda_mod.MultiScaleDeformableAttnFunction.apply

    def spy(*args):
        calls.append(args[0].device)
        return real_apply(*args)

    monkeypatch.setattr(msda_mod.MultiScaleDeformableAttnFunction, 'apply', spy)

    gen = torch.Generator().manual_seed(0)
    cfg = deformable_detr_cfg()['encoder']['layer_cfg']['self_attn_cfg']
    torch.manual_seed(0)
    attn = msda_mod.MultiScaleDeformableAttention(**cfg)
    attn.sampling_offsets.weight.data.normal_(0, 0.5, generator=gen)
    attn.attention_weights.weight.data.normal_(0, 0.5, generator=gen)
    attn.eval()  # dropout off (0.1 by default)
    spatial = torch.tensor([[10, 12], [5, 6]])
    start = torch.cat([spatial.new_zeros(1), spatial.prod(1).cumsum(0)[:-1]])
    n = int(spatial.prod(1).sum())
    bs = 2
    query = torch.randn(bs, n, 32, generator=gen)
    value = torch.randn(bs, n, 32, generator=gen)
    ref = torch.rand(bs, n, 2, 2, generator=gen)
    mask = torch.zeros(bs, n, dtype=torch.bool)
    mask[1, ::3] = True
    grad_out = torch.randn(bs, n, 32, generator=gen)

    def run(module, dev):
        module = copy.deepcopy(module).to(dev)
        q = query.to(dev).requires_grad_()
        v = value.to(dev).requires_grad_()
        out = module(q, value=v, reference_points=ref.to(dev), spatial_shapes=spatial.to(dev),
                     level_start_index=start.to(dev), key_padding_mask=mask.to(dev))
        out.backward(grad_out.to(dev))
        grads = {'query': q.grad, 'value': v.grad}
        grads.update({k: p.grad for k, p in module.named_parameters()})
        return out.detach().cpu(), {k: g.cpu() for k, g in grads.items()}

    out_cpu, grads_cpu = run(attn, torch.device('cpu'))
    assert calls == []  # the CPU module runs the PyTorch fallback
    out_dev, grads_dev = run(attn, device)
    # on CUDA the kernel ran, not the fallback (a test of the fallback against itself would pass)
    assert [c.type for c in calls] == (['cuda'] if device.type == 'cuda' else [])
    torch.testing.assert_close(out_dev, out_cpu, **MSDA_FWD_TOL)
    for k in grads_cpu:
        assert grads_cpu[k].abs().max() > 0, k
        torch.testing.assert_close(grads_dev[k], grads_cpu[k], **MSDA_GRAD_TOL, msg=k)


# ---- 2. one training step of PEGDETR / PEGDeformableDETR ----------------------------------

def make_model(kind, encoder_pos):
    """A tiny PEGDETR / PEGDeformableDETR, dropout off everywhere (the CPU and CUDA random
    streams differ), PEGs at the encoder input and after its first layer with random weights."""
    kwargs = dict(encoder_pos=encoder_pos)
    if 'peg' in encoder_pos:  # peg_after is refused where there is no PEG
        kwargs['peg_after'] = (-1, 0)
    if kind == 'detr':
        cfg = detr_cfg(type='mmposenc.PEGDETR', decoder_pos='sine', **kwargs)
    else:
        cfg = deformable_detr_cfg(type='mmposenc.PEGDeformableDETR', **kwargs)
        cfg['encoder']['layer_cfg']['self_attn_cfg']['dropout'] = 0.0
        cfg['decoder']['layer_cfg']['cross_attn_cfg']['dropout'] = 0.0
    torch.manual_seed(0)
    model = build(cfg)
    if 'peg' in encoder_pos:
        randomise_pegs(model)
    if kind == 'deformable':  # mmdet zeroes the offset weights: positions would not matter
        gen = torch.Generator().manual_seed(1)
        for m in model.modules():
            if hasattr(m, 'sampling_offsets'):
                m.sampling_offsets.weight.data.normal_(0, 0.1, generator=gen)
    return model


def _named_grads(model):
    return {n: p.grad.detach().float().cpu() for n, p in model.named_parameters()
            if p.grad is not None}


def train_step_then_predict(model, dev, packed):
    """Losses, gradients, then the predictions after one SGD step, on ``dev``."""
    model = copy.deepcopy(model).to(dev)
    optim = torch.optim.SGD(model.parameters(), lr=LR)
    model.train()
    data = model.data_preprocessor(copy.deepcopy(packed), True)
    losses = model(**data, mode='loss')
    loss, _ = model.parse_losses(losses)
    optim.zero_grad()
    loss.backward()
    grads = _named_grads(model)
    optim.step()
    model.eval()
    data = model.data_preprocessor(copy.deepcopy(packed), False)
    with torch.no_grad():
        preds = model(**data, mode='predict')
    losses = {k: v.detach().cpu() for k, v in losses.items()}
    preds = [p.pred_instances.cpu() for p in preds]
    return losses, grads, preds


def assert_same_predictions(preds_dev, preds_cpu):
    """Per image, the same (label, score, box) rows up to order: rows are matched one to one
    (Hungarian, on score and box distance) so that near-equal scores may swap places."""
    from scipy.optimize import linear_sum_assignment
    for a, b in zip(preds_dev, preds_cpu):
        assert len(a) == len(b) > 0
        cost = ((a.scores[:, None] - b.scores[None]).abs() / SCORE_TOL +
                (a.bboxes[:, None] - b.bboxes[None]).abs().amax(-1) / BOX_TOL +
                1e6 * (a.labels[:, None] != b.labels[None]))
        rows, cols = linear_sum_assignment(cost.double().numpy())
        torch.testing.assert_close(a.scores[rows], b.scores[cols], rtol=0, atol=SCORE_TOL)
        torch.testing.assert_close(a.bboxes[rows], b.bboxes[cols], rtol=0, atol=BOX_TOL)
        assert torch.equal(a.labels[rows], b.labels[cols])


@pytest.mark.parametrize('encoder_pos', ['peg', 'sine'])
@pytest.mark.parametrize('kind', ['detr', 'deformable'])
def test_fp32_train_step_equals_the_cpu_path(device, kind, encoder_pos):
    model = make_model(kind, encoder_pos)
    packed = packed_inputs(SHAPES, num_items=[2, 3], seed=0)
    l_cpu, g_cpu, p_cpu = train_step_then_predict(model, torch.device('cpu'), packed)
    l_dev, g_dev, p_dev = train_step_then_predict(model, device, packed)
    assert l_dev.keys() == l_cpu.keys()
    for k in l_cpu:
        torch.testing.assert_close(l_dev[k], l_cpu[k], **LOSS_TOL, msg=k)
    assert g_dev.keys() == g_cpu.keys()
    assert any('.pegs.' in n for n in g_cpu) == ('peg' in encoder_pos)
    for n in g_cpu:
        scale = g_cpu[n].abs().max()
        err = (g_dev[n] - g_cpu[n]).abs().max()
        assert err <= GRAD_REL_TOL * scale + 1e-7, f'{n}: |diff| {err:.3g} of max {scale:.3g}'
    assert_same_predictions(p_dev, p_cpu)


# ---- bf16 / fp16 autocast train steps -------------------------------------------------------

def amp_wrapper(model, dev, dtype):
    optim = torch.optim.SGD(model.parameters(), lr=LR)
    if dev.type == 'cuda':
        from mmengine.optim import AmpOptimWrapper
        # a static loss scale as mmdet's fp16 configs (512): a dynamic scaler's first steps
        # overflow on purpose and are skipped, which would hide nothing but fail `isfinite`
        return AmpOptimWrapper(optimizer=optim, dtype=dtype, loss_scale=512.)
    if dtype == 'float16':
        pytest.skip('fp16 autocast is checked on CUDA only (on the CPU mmposenc trains in bf16: '
                    'BF16OptimWrapper)')
    from mmposenc.engine.optim_wrapper import BF16OptimWrapper
    return BF16OptimWrapper(optimizer=optim, device_type='cpu')


@pytest.mark.parametrize('dtype', ['bfloat16', 'float16'])
@pytest.mark.parametrize('encoder_pos', ['peg', 'sine'])
@pytest.mark.parametrize('kind', ['detr', 'deformable'])
def test_amp_train_step_is_finite_and_reaches_every_peg(device, kind, encoder_pos, dtype):
    model = make_model(kind, encoder_pos).to(device)
    wrapper = amp_wrapper(model, device, dtype)
    # the autocast really applies: the encoder's linear layers compute in ``dtype``
    seen = set()
    handles = [m.register_forward_hook(lambda m, i, o: seen.add(o.dtype))
               for m in model.encoder.modules() if isinstance(m, torch.nn.Linear)]
    packed = packed_inputs(SHAPES, num_items=[2, 3], seed=0)
    model.train()
    data = model.data_preprocessor(copy.deepcopy(packed), True)
    with wrapper.optim_context(model):
        losses = model(**data, mode='loss')
    for h in handles:
        h.remove()
    assert getattr(torch, dtype) in seen, seen
    loss, _ = model.parse_losses(losses)
    for k, v in losses.items():
        assert torch.isfinite(v).all(), f'{k} = {v}'
    wrapper.backward(loss)
    if hasattr(wrapper, 'loss_scaler'):
        wrapper.loss_scaler.unscale_(wrapper.optimizer)
    pegs = 0
    for n, p in model.named_parameters():
        if not p.requires_grad or n.startswith('backbone'):
            continue
        assert p.grad is not None, n
        assert torch.isfinite(p.grad).all(), n
        if '.pegs.' in n:
            pegs += 1
            assert p.grad.abs().sum() > 0, n
    assert pegs == sum(p.requires_grad for p in model.encoder.pegs.parameters())
    assert (pegs > 0) == (encoder_pos != 'sine')
    wrapper.step()
    wrapper.zero_grad()
    for n, p in model.named_parameters():
        assert torch.isfinite(p).all(), n
