"""Fixtures of RoPE-Mixed and RoPE-Axial from naver-ai/rope-vit (``deit/models_v2_rope.py``:
``init_random_2d_freqs``, ``compute_mixed_cis``, ``compute_axial_cis``, ``init_t_xy``,
``RoPEAttention``), for ``tests/test_reference/test_parity_rope_vit.py``.

Mixed: the per-layer, per-head frequencies ``freqs`` (2, depth, heads * d/2) drawn by
``init_random_2d_freqs`` after ``torch.manual_seed(seed)`` (as ``rope_vit_models`` stacks
them), the rotations ``compute_mixed_cis`` gives every grid (as the model computes them for
a grid other than its training one: ``init_t_xy(W, H)``), and for each layer a
``apply_rotary_emb`` on random patch queries and keys with its gradients w.r.t. them and
``freqs``, and a ``RoPEAttention`` forward (class token unrotated; ``qkv`` / ``proj``
parameters shared) in train and eval mode. Axial: ``compute_axial_cis(dim, end_x=W, end_y=H,
theta=100)`` and the same. ``RoPEAttention`` gives values only: its in-place
``q[:, :, 1:], k[:, :, 1:] = apply_rotary_emb(...)`` writes into the tensor that
``view_as_complex`` viewed (``.float()`` of float32 is no copy), so a float32 backward raises
(the official training runs under autocast, where ``.float()`` copies).

Usage::

    python tests/reference/generate/rope_vit.py --src /path/to/rope-vit [--commit SHA]

``--src`` is the repository root; its ``deit`` folder goes on ``sys.path`` (the official
module imports ``models_v2`` and timm).
"""
import os.path as osp
import sys

import torch

sys.path.insert(0, osp.dirname(osp.abspath(__file__)))
from _common import GRIDS, grad_of, parse_args, save  # noqa: E402

REPO = 'naver-ai/rope-vit'
EMBED_DIMS, NUM_HEADS, DEPTH = 24, 2, 2  # 12 channels per head


def main():
    args = parse_args(__doc__.splitlines()[0], REPO)
    sys.path.insert(0, osp.join(args.src, 'deit'))
    import models_v2_rope as ref

    d = EMBED_DIMS // NUM_HEADS
    torch.manual_seed(0)
    # as rope_vit_models(rope_mixed=True): one init_random_2d_freqs per block, stacked on dim 1
    init_seed = 17
    torch.manual_seed(init_seed)
    freqs = torch.stack([ref.init_random_2d_freqs(dim=d, num_heads=NUM_HEADS, theta=10.)
                         for _ in range(DEPTH)], dim=1).view(2, DEPTH, -1)
    freqs = torch.nn.Parameter(freqs.clone())
    torch.manual_seed(1)
    attn = ref.RoPEAttention(EMBED_DIMS, NUM_HEADS, qkv_bias=True)
    params = dict(qkv_weight=attn.qkv.weight, qkv_bias=attn.qkv.bias,
                  proj_weight=attn.proj.weight, proj_bias=attn.proj.bias)

    cases = []
    for gi, (gname, (H, W)) in enumerate(GRIDS.items()):
        t_x, t_y = ref.init_t_xy(end_x=W, end_y=H)
        for kind in ('mixed', 'axial'):
            if kind == 'mixed':
                cis_all = ref.compute_mixed_cis(freqs, t_x, t_y, NUM_HEADS)  # (depth, h, N, d/2)
                layers = range(DEPTH)
            else:
                cis_all = ref.compute_axial_cis(dim=d, end_x=W, end_y=H, theta=100.)[None]
                layers = [0]
            for layer in layers:
                seed = 100 * gi + 10 * layer + (kind == 'axial') * 5
                # the rotation: apply_rotary_emb on patch queries / keys, with gradients
                torch.manual_seed(seed)
                q = torch.randn(1, NUM_HEADS, H * W, d, requires_grad=True)
                k = torch.randn(1, NUM_HEADS, H * W, d, requires_grad=True)
                if kind == 'mixed':  # recomputed in the graph for the freqs gradient
                    cis = ref.compute_mixed_cis(freqs, t_x, t_y, NUM_HEADS)[layer]
                else:
                    cis = cis_all[0]
                q_out, k_out = ref.apply_rotary_emb(q, k, freqs_cis=cis)
                out = torch.cat((q_out, k_out), dim=-1)
                wrt = [q, k] + ([freqs] if kind == 'mixed' else [])
                grads = grad_of(out, wrt, seed)
                case = dict(name=f'{kind}/{gname}/layer{layer}', kind=kind, hw=[H, W],
                            layer=layer, cis=torch.view_as_real(cis_all[layer].detach()),
                            q=q, k=k, q_out=q_out, k_out=k_out, probe_seed=seed,
                            grad_q=grads[0], grad_k=grads[1])
                if kind == 'mixed':
                    case['grad_freqs'] = grads[2]
                # the attention (class token unrotated), train and eval mode: values only,
                # its in-place ``q[:, :, 1:] = ...`` on a float32 view has no backward
                torch.manual_seed(seed + 1)
                case['x'] = torch.randn(1, 1 + H * W, EMBED_DIMS)
                for mode in ('train', 'eval'):
                    attn.train(mode == 'train')
                    with torch.no_grad():
                        case[f'attn_out_{mode}'] = attn(case['x'], freqs_cis=cis.detach())
                cases.append(case)
    save(args, 'rope_vit', REPO,
         ['deit/models_v2_rope.py:init_random_2d_freqs', 'deit/models_v2_rope.py:init_t_xy',
          'deit/models_v2_rope.py:compute_mixed_cis', 'deit/models_v2_rope.py:compute_axial_cis',
          'deit/models_v2_rope.py:RoPEAttention'], cases,
         extra=dict(freqs=freqs, init_seed=init_seed, params=params, embed_dims=EMBED_DIMS,
                    num_heads=NUM_HEADS, depth=DEPTH),
         extra_versions=('timm', ))


if __name__ == '__main__':
    main()
