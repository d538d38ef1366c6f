"""Fixtures of DINOv3's RoPE from facebookresearch/dinov3 (``RopePositionEmbedding`` and
``SelfAttention.apply_rope`` / ``forward``), for ``tests/test_reference/test_parity_dinov3.py``.

Per configuration (``base`` or ``min_period``/``max_period``; ``normalize_coords`` 'separate',
'max', 'min'; shift / jitter / rescale in training) and grid: the periods, ``sin`` and ``cos``
of the official module in eval mode, and a ``SelfAttention`` forward with those rotations
(inputs, ``qkv``/``proj`` parameters shared by the grids of a configuration, output,
gradients w.r.t. the input and, on the non-square grid, ``qkv.weight``). The official ``sin``
and ``cos`` repeat their first half (``tile(2)``); one copy is kept.
In training mode ``rope_embed(H=H, W=W)`` is called ``num_draws`` times after
``torch.manual_seed(seed)``, keeping every call's ``sin`` / ``cos`` (``forward_features_list``
calls it inside the block loop, so these are the draws of successive blocks) and the
attention output of the first call. Two configurations compute the RoPE in bf16
(``dtype=torch.bfloat16``, DINOv3's ``pos_embed_rope_dtype='bf16'`` default).

Usage::

    python tests/reference/generate/dinov3.py --src /path/to/dinov3 [--commit SHA]
"""
import os.path as osp
import sys

import torch

sys.path.insert(0, osp.dirname(osp.abspath(__file__)))
from _common import GRIDS, grad_of, parse_args, save  # noqa: E402

REPO = 'facebookresearch/dinov3'
EMBED_DIMS, NUM_HEADS = 24, 2  # 12 channels per head, 3 periods
CONFIGS = dict(
    base_separate=dict(base=100.),
    base_max=dict(base=100., normalize_coords='max'),
    base_min=dict(base=100., normalize_coords='min'),
    periods_separate=dict(base=None, min_period=0.5, max_period=80.),
    periods_max=dict(base=None, min_period=0.5, max_period=80., normalize_coords='max'),
    train_rescale=dict(base=100., rescale_coords=2.),
    train_all=dict(base=100., shift_coords=0.3, jitter_coords=1.5, rescale_coords=2.),
    train_all_min=dict(base=None, min_period=0.5, max_period=80., normalize_coords='min',
                       shift_coords=0.3, jitter_coords=1.5, rescale_coords=2.),
    # pos_embed_rope_dtype='bf16', the default of DINOv3's VisionTransformer
    bf16_base=dict(base=100., dtype='bf16'),
    bf16_train_all=dict(base=100., shift_coords=0.3, jitter_coords=1.5, rescale_coords=2.,
                        dtype='bf16'),
)
DTYPES = dict(bf16=torch.bfloat16)
NUM_DRAWS = 3


def main():
    args = parse_args(__doc__.splitlines()[0], REPO)
    from dinov3.layers.attention import SelfAttention
    from dinov3.layers.rope_position_encoding import RopePositionEmbedding

    cases, params = [], {}
    for ci, (cname, cfg) in enumerate(CONFIGS.items()):
        training = any(k in cfg for k in ('shift_coords', 'jitter_coords', 'rescale_coords'))
        prefix = 5 if ci % 2 else 1  # class token (+ 4 storage tokens)
        torch.manual_seed(ci)
        attn = SelfAttention(EMBED_DIMS, NUM_HEADS, qkv_bias=True)
        params[cname] = dict(qkv_weight=attn.qkv.weight, qkv_bias=attn.qkv.bias,
                             proj_weight=attn.proj.weight, proj_bias=attn.proj.bias)
        for gi, (gname, (H, W)) in enumerate(GRIDS.items()):
            seed = 1000 * ci + gi
            torch.manual_seed(seed)
            kwargs = dict(cfg)
            if 'dtype' in kwargs:
                kwargs['dtype'] = DTYPES[kwargs['dtype']]
            rope = RopePositionEmbedding(EMBED_DIMS, num_heads=NUM_HEADS, **kwargs)
            x = torch.randn(1, prefix + H * W, EMBED_DIMS, requires_grad=True)
            case = dict(name=f'{cname}/{gname}', config=cname, training=training,
                        hw=[H, W], prefix=prefix, periods=rope.periods, x=x)
            if training:
                rope.train()
                case['draw_seed'] = seed + 7
                torch.manual_seed(case['draw_seed'])
                draws = [rope(H=H, W=W) for _ in range(NUM_DRAWS)]
                sin = torch.stack([s for s, _ in draws])
                cos = torch.stack([c for _, c in draws])
                sincos = draws[0]
            else:
                rope.eval()
                sincos = rope(H=H, W=W)
                sin, cos = sincos
            half = sin.shape[-1] // 2  # the official tile(2): keep one copy
            assert torch.equal(sin[..., :half], sin[..., half:])
            assert torch.equal(cos[..., :half], cos[..., half:])
            case.update(sin=sin[..., :half], cos=cos[..., :half])
            out = attn(x, rope=sincos)
            wrt = (x, attn.qkv.weight) if gname == 'nonsquare' else (x, )
            grads = grad_of(out, wrt, seed)
            case.update(out=out, probe_seed=seed, grad_x=grads[0])
            if len(grads) > 1:
                case['grad_qkv_weight'] = grads[1]
            cases.append(case)
    save(args, 'dinov3_rope', REPO,
         ['dinov3/layers/rope_position_encoding.py:RopePositionEmbedding',
          'dinov3/layers/attention.py:SelfAttention'], cases,
         extra=dict(configs=CONFIGS, params=params, embed_dims=EMBED_DIMS,
                    num_heads=NUM_HEADS, num_draws=NUM_DRAWS))


if __name__ == '__main__':
    main()
