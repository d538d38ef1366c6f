"""Fixtures of PerViT's multi-head peripheral attention from juhongm999/pervit
(``model/pervit.py``: ``MPA`` with its ``PeripheralPositionEncoding``; ``model/utils.py``:
``OffsetGenerator``), for ``tests/test_reference/test_parity_pervit.py``.

The official code is square-only (the grid side is ``sqrt(N)``) and puts its offset grid on
CUDA (``OffsetGenerator.initialize`` calls ``.to('cuda')``). Without a GPU this script runs
that call with ``Tensor.to('cuda')`` sending the tensor to the CPU instead (nothing else
changes). The relative position input is built as ``VisionTransformer._build_rpe`` does:
``OffsetGenerator.initialize(side, pad_size=2)``, ``get_qk_vec().norm(dim=-1, keepdim=True)``
and a ``Linear(1, 4 * heads)`` (``rpe_proj``).

Per grid (the official 14 x 14 training grid, and 4 x 4, 9 x 9): the parameters (randomly
perturbed from the official initialisation so that no symmetry hides a mismatch), the
peripheral gate ``Phi_p`` (small grids), the MPA output in train mode (``weight`` computed
every forward) and eval mode (``init_rpe``, the official evaluation cache), and in train mode
the gradients w.r.t. the input, ``to_qkv.weight``, ``rpe_proj`` and the gate's convolutions
and group norms.

Usage::

    python tests/reference/generate/pervit.py --src /path/to/pervit [--commit SHA]
"""
import contextlib
import os.path as osp
import sys

import torch

sys.path.insert(0, osp.dirname(osp.abspath(__file__)))
from _common import grad_of, parse_args, save  # noqa: E402

REPO = 'juhongm999/pervit'
EMBED_DIMS, NUM_HEADS = 16, 2
GRIDS = dict(training=(14, 14), square=(4, 4), off_training=(9, 9))
PPE_KEYS = ('conv1.weight', 'conv1.bias', 'gn1.weight', 'gn1.bias', 'conv2.weight',
            'conv2.bias', 'gn2.weight', 'gn2.bias')


@contextlib.contextmanager
def cuda_to_cpu():
    """``Tensor.to('cuda')`` -> the CPU while no GPU is there (the official offset grid)."""
    if torch.cuda.is_available():
        yield
        return
    orig = torch.Tensor.to

    def to(self, *args, **kwargs):
        if args and isinstance(args[0], str) and args[0].startswith('cuda'):
            return self
        return orig(self, *args, **kwargs)

    torch.Tensor.to = to
    try:
        yield
    finally:
        torch.Tensor.to = orig


def main():
    args = parse_args(__doc__.splitlines()[0], REPO)
    from model.pervit import MPA
    from model.utils import OffsetGenerator

    cases = []
    for gi, (gname, (H, W)) in enumerate(GRIDS.items()):
        torch.manual_seed(gi)
        # block 0's peripheral init of VisionTransformer: norm_bias -5, norm_weight 3
        mpa = MPA(EMBED_DIMS, NUM_HEADS, norm_init=torch.tensor([-5.0, 3.0]))
        rpe_proj = torch.nn.Linear(1, 4 * NUM_HEADS)
        with torch.no_grad():
            rpe_proj.weight.fill_(-0.02)  # VisionTransformer._peripheral_init
            rpe_proj.bias.zero_()
            for p in list(mpa.activation.parameters()) + list(rpe_proj.parameters()):
                p.add_(0.05 * torch.randn_like(p))
            mpa.activation.gn2.weight.copy_(torch.tensor([3.0, 0.3]))  # local, global head
            mpa.proj.bias.normal_(0, 0.02)
        with cuda_to_cpu():
            OffsetGenerator.initialize(H, pad_size=2)
        rpe = OffsetGenerator.get_qk_vec().norm(p=2, dim=-1, keepdim=True).cpu()
        act = dict(mpa.activation.named_parameters())
        case = dict(name=gname, hw=[H, W], rpe_proj_weight=rpe_proj.weight,
                    rpe_proj_bias=rpe_proj.bias, to_qkv_weight=mpa.to_qkv.weight,
                    proj_weight=mpa.proj.weight, proj_bias=mpa.proj.bias,
                    **{'activation.' + k: act[k] for k in PPE_KEYS})
        seed = 10 * gi
        torch.manual_seed(seed)
        x = torch.randn(1, H * W, EMBED_DIMS, requires_grad=True)
        case['x'] = x
        mpa.train()
        r = rpe_proj(rpe)
        if H * W <= 81:
            with torch.no_grad():
                case['phi_p'] = mpa.get_weight(r)
        out = mpa(x, r)
        wrt = [x, mpa.to_qkv.weight, rpe_proj.weight, rpe_proj.bias] + [act[k] for k in PPE_KEYS]
        grads = grad_of(out, wrt, seed)
        case.update(out_train=out, probe_seed=seed, grad_x=grads[0], grad_to_qkv_weight=grads[1],
                    grad_rpe_proj_weight=grads[2], grad_rpe_proj_bias=grads[3],
                    **{'grad_activation.' + k: g for k, g in zip(PPE_KEYS, grads[4:])})
        mpa.eval()
        with torch.no_grad():
            mpa.init_rpe(rpe_proj(rpe))
            case['out_eval'] = mpa(x, None)
        cases.append(case)
    save(args, 'pervit_mpa', REPO, ['model/pervit.py:MPA',
                                    'model/pervit.py:PeripheralPositionEncoding',
                                    'model/utils.py:OffsetGenerator'], cases,
         extra=dict(embed_dims=EMBED_DIMS, num_heads=NUM_HEADS),
         extra_versions=('timm', 'einops'))


if __name__ == '__main__':
    main()
