"""Attention maps of a chosen block / head (CPVT Fig. 5-6), PEG maps and PerViT's Phi_p maps.

Works on a backbone built from a config (``model.backbone``) or by name (``--arch``), with an
optional checkpoint: CPVT, PEViT (any position encoding), PerViT (MPA) and mmpretrain's
``VisionTransformer`` (DeiT).

- **attention**: our attention layers call ``F.scaled_dot_product_attention``, which returns
  no weights, so a forward hook takes the input of the chosen attention module and recomputes
  ``softmax(Q K^T / sqrt(d) + bias)`` from its ``qkv`` projection, with the same position
  encoding terms the module adds (PEViT's ``transform_qk`` / ``attn_bias`` hooks, MPA's
  ``log Phi_p``). Written per head as (a) the ``N x N`` matrix with every query row scaled
  to its maximum (the normalisation of CPVT Fig. 5) and (b) the map of one query over the
  patch grid;
- **PEG**: the conditional encoding a PEG adds, ``PEG(x) - x``, as the per-token L2 norm
  over channels on the patch grid (one map per PEG);
- **Phi_p** (PerViT / PEViT + PeripheralPE): ``mmposenc.analysis.plot_phi_p``.

Usage::

    python tools/analysis/visualize_attention.py --arch cpvt-tiny --checkpoint cpvt.pth \\
        --img demo.jpg --size 224 224 --block 0 --head all --out-dir work_dirs/attn
    python tools/analysis/visualize_attention.py configs/pervit/pervit-tiny_8xb128_in1k.py \\
        --img a.jpg b.jpg --block 5 --query 7 7
"""
import argparse
import os
import os.path as osp
import sys
from typing import Dict, List, Optional, Sequence

import numpy as np
import torch
import torch.nn as nn

# this checkout's mmposenc first (a tool of a clone imports the clone's, installed or not)
sys.path.insert(0, osp.dirname(osp.dirname(osp.dirname(osp.realpath(__file__)))))


IMAGENET_MEAN = (123.675, 116.28, 103.53)
IMAGENET_STD = (58.395, 57.12, 57.375)


# ---------------------------------------------------------------------------- attention
def attention_modules(model: nn.Module) -> List[nn.Module]:
    """The self-attention modules of ``model`` in forward order: every module with a fused
    ``qkv`` linear projection and ``num_heads`` (CPVT, PEViT, PerViT's MPA, mmpretrain ViT),
    or MPA's content-free variant (``v`` and ``position_bias``)."""
    return [
        m for m in model.modules() if hasattr(m, 'num_heads') and (
            isinstance(getattr(m, 'qkv', None), nn.Linear) or hasattr(m, 'position_bias'))
    ]


def attention_weights(module: nn.Module, x: torch.Tensor, args: Sequence = (),
                      kwargs: Optional[dict] = None) -> torch.Tensor:
    """Recompute the attention probabilities ``(B, heads, N, N)`` of ``module`` for its input
    ``x`` (B, N, C) and the other arguments of that call (``hw_shape``, position encodings).
    """
    kwargs = kwargs or {}
    b, n, c = x.shape
    heads = module.num_heads
    hw_shape = args[0] if args else kwargs.get('hw_shape')
    if hasattr(module, 'position_bias'):  # PerViT MPA: logits + log Phi_p
        bias = module.position_bias(hw_shape, x.dtype)
        if getattr(module, 'content_free', False):
            return bias.expand(b, heads, n, n).softmax(-1)
        d = module.head_dims
        q, k, _ = module.qkv(x).reshape(b, n, 3, heads, d).permute(2, 0, 3, 1, 4).unbind(0)
        logits = q @ k.transpose(-2, -1) * module.scale
        return (logits if bias is None else logits + bias).softmax(-1)  # None: no Phi_p
    d = c // heads if not hasattr(module, 'head_dims') else module.head_dims
    q, k, _ = module.qkv(x).reshape(b, n, 3, heads, d).permute(2, 0, 3, 1, 4).unbind(0)
    bias = None
    pos_encodings = args[1] if len(args) > 1 else kwargs.get('pos_encodings', ())
    layer_idx = args[2] if len(args) > 2 else kwargs.get('layer_idx', 0)
    for pe in pos_encodings or ():  # PEMultiheadAttention: the module's own PE hooks
        if 'transform_qk' in pe.hooks:
            q, k = pe.transform_qk(q, k, hw_shape, layer_idx)
    for pe in pos_encodings or ():
        if 'attn_bias' in pe.hooks:
            term = pe.attn_bias(q, k, hw_shape, layer_idx)
            if term is not None:
                bias = term if bias is None else bias + term
    scale = getattr(module, 'scale', None) or d**-0.5
    logits = q @ k.transpose(-2, -1) * scale
    if bias is not None:
        logits = logits + bias
    return logits.softmax(-1)


@torch.no_grad()
def record_attention(model: nn.Module, img: torch.Tensor, block: int) -> torch.Tensor:
    """Run ``model`` on ``img`` and return the attention ``(B, heads, N, N)`` of attention
    module ``block`` (see :func:`attention_modules`; negative indices count from the end)."""
    mods = attention_modules(model)
    if not mods:
        raise ValueError(f'{type(model).__name__} has no attention module with a qkv '
                         'projection')
    if not -len(mods) <= block < len(mods):
        raise ValueError(f'block {block} out of range: the model has {len(mods)} attention '
                         'blocks')
    captured = {}

    def hook(module, args, kwargs, output):
        captured['attn'] = attention_weights(module, args[0], args[1:], kwargs)

    handle = mods[block].register_forward_hook(hook, with_kwargs=True)
    try:
        model(img)
    finally:
        handle.remove()
    return captured['attn']


def row_normalise(attn: torch.Tensor) -> torch.Tensor:
    """Scale every query row to a maximum of 1 (CPVT Fig. 5's per-row normalisation)."""
    return attn / attn.amax(-1, keepdim=True).clamp_min(1e-12)


def query_map(attn: torch.Tensor, hw_shape: Sequence[int], query: Sequence[int],
              num_extra_tokens: int = 0) -> torch.Tensor:
    """``(..., H, W)`` attention of the patch query ``(qy, qx)`` over the patch keys,
    normalised to a maximum of 1."""
    h, w = hw_shape
    qy, qx = query
    if not (0 <= qy < h and 0 <= qx < w):
        raise ValueError(f'query {tuple(query)} outside the {h}x{w} patch grid')
    e = num_extra_tokens
    row = attn[..., e + qy * w + qx, e:]
    row = row / row.amax(-1, keepdim=True).clamp_min(1e-12)
    return row.reshape(*row.shape[:-1], h, w)


# --------------------------------------------------------------------------------- PEG
def peg_modules(model: nn.Module) -> List[nn.Module]:
    """PEG modules in forward order (``PEG``, ``MaskedPEG``, ``PEGPositionEncoding``'s)."""
    from mmposenc.models.layers import PEG, MaskedPEG
    return [m for m in model.modules() if isinstance(m, (PEG, MaskedPEG))]


@torch.no_grad()
def record_peg_maps(model: nn.Module, img: torch.Tensor) -> List[torch.Tensor]:
    """``||PEG(x) - x||_2`` over channels on the patch grid, ``(B, H, W)`` per PEG."""
    maps, handles = [], []

    def hook(module, args, output):
        x, hw_shape = args[0], args[1]
        diff = (output - x)[:, x.shape[1] - hw_shape[0] * hw_shape[1]:]
        maps.append(diff.norm(dim=-1).reshape(x.shape[0], *hw_shape))

    for m in peg_modules(model):
        handles.append(m.register_forward_hook(hook))
    try:
        model(img)
    finally:
        for h in handles:
            h.remove()
    return maps


# ------------------------------------------------------------------------------ drawing
def _save_grid(images: Sequence[np.ndarray], titles: Sequence[str], out_file: str,
               cols: int, background: Optional[np.ndarray] = None) -> str:
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    rows = (len(images) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, squeeze=False, figsize=(2.2 * cols, 2.2 * rows))
    for ax in axes.ravel():
        ax.set_axis_off()
    for ax, im, title in zip(axes.ravel(), images, titles):
        if background is not None:
            ax.imshow(background, extent=(0, 1, 1, 0))
            ax.imshow(im, cmap='jet', alpha=0.5, extent=(0, 1, 1, 0),
                      interpolation='nearest')
        else:
            ax.imshow(im, cmap='viridis', interpolation='nearest')
        ax.set_title(title, fontsize=7)
    fig.tight_layout()
    os.makedirs(osp.dirname(osp.abspath(out_file)), exist_ok=True)
    fig.savefig(out_file, dpi=100)
    plt.close(fig)
    return out_file


def load_image(path: str, size: Sequence[int], mean=IMAGENET_MEAN, std=IMAGENET_STD):
    """``(1, 3, H, W)`` normalised RGB tensor and the resized RGB uint8 image."""
    import mmcv
    img = mmcv.imread(path, channel_order='rgb')
    if img is None:
        raise FileNotFoundError(f'cannot read image {path}')
    img = mmcv.imresize(img, (size[1], size[0]))
    x = (torch.from_numpy(img).float() - torch.tensor(mean)) / torch.tensor(std)
    return x.permute(2, 0, 1)[None].contiguous(), img


def visualize(model: nn.Module, image_files: Sequence[str], out_dir: str,
              size: Sequence[int] = (224, 224), block: int = 0, heads='all',
              query: Optional[Sequence[int]] = None, patch_size: int = 16,
              num_extra_tokens: int = 0) -> Dict[str, List[str]]:
    """Write the attention / PEG / Phi_p PNGs of every image; returns the files per kind."""
    from tqdm import tqdm
    hw = (size[0] // patch_size, size[1] // patch_size)
    query = tuple(query) if query is not None else (hw[0] // 2, hw[1] // 2)
    written = dict(attention=[], peg=[], phi_p=[])
    os.makedirs(out_dir, exist_ok=True)
    for path in tqdm(image_files, desc='images', unit='img'):
        x, rgb = load_image(path, size)
        name = osp.splitext(osp.basename(path))[0]
        attn = record_attention(model, x, block)[0]  # (heads, N, N)
        if attn.shape[-1] != num_extra_tokens + hw[0] * hw[1]:
            raise ValueError(f'the attention has {attn.shape[-1]} tokens, expected '
                             f'{num_extra_tokens} + {hw[0]}x{hw[1]}: check --patch-size and '
                             '--size')
        head_ids = range(attn.shape[0]) if heads == 'all' else [int(h) for h in heads]
        mats = [row_normalise(attn[h]).numpy() for h in head_ids]
        maps = [query_map(attn[h], hw, query, num_extra_tokens).numpy() for h in head_ids]
        titles = [f'block {block} head {h}' for h in head_ids]
        written['attention'].append(_save_grid(
            mats, titles, osp.join(out_dir, f'{name}_block{block}_matrix.png'),
            cols=len(mats)))
        written['attention'].append(_save_grid(
            maps, [f'{t} query {query}' for t in titles],
            osp.join(out_dir, f'{name}_block{block}_query{query[0]}-{query[1]}.png'),
            cols=len(maps), background=rgb))
        pegs = record_peg_maps(model, x)
        if pegs:
            written['peg'].append(_save_grid(
                [p[0].numpy() for p in pegs], [f'PEG {i}: |PEG(x) - x|' for i in
                                              range(len(pegs))],
                osp.join(out_dir, f'{name}_peg.png'), cols=len(pegs), background=rgb))
    from mmposenc.analysis import collect_phi_p, plot_phi_p
    phis = collect_phi_p(model, hw)
    if phis:
        written['phi_p'].append(plot_phi_p(
            phis, hw, osp.join(out_dir, f'phi_p_{hw[0]}x{hw[1]}.png'), query=query))
    return written


# --------------------------------------------------------------------------------- CLI
ARCHS = {
    'cpvt-tiny': lambda: _mmposenc('CPVT', arch='tiny'),
    'deit-tiny': lambda: _deit('deit-tiny'),
    'pervit-tiny': lambda: _mmposenc('PerViT', arch='tiny'),
}


def _mmposenc(name, **kwargs):
    import mmposenc.models  # noqa: F401
    from mmposenc.registry import MODELS
    return MODELS.build(dict(type=f'mmposenc.{name}', **kwargs))


def _deit(arch):
    from mmpretrain.models import VisionTransformer
    return VisionTransformer(arch, img_size=224)


def build_backbone(config: Optional[str], arch: str, checkpoint: Optional[str]) -> nn.Module:
    if config:
        from mmengine.config import Config
        from mmengine.registry import DefaultScope
        from mmpretrain.utils import register_all_modules

        import mmposenc.models  # noqa: F401
        from mmposenc.registry import MODELS
        register_all_modules(init_default_scope=False)
        cfg = Config.fromfile(config)
        bcfg = cfg.model.get('backbone', cfg.model)
        bcfg.pop('init_cfg', None)
        with DefaultScope.overwrite_default_scope(cfg.get('default_scope', 'mmpretrain')):
            model = MODELS.build(bcfg)
    else:
        if arch not in ARCHS:
            raise SystemExit(f'--arch must be one of {sorted(ARCHS)}, got {arch!r}')
        model = ARCHS[arch]()
    if checkpoint:
        from mmposenc.engine import load_local_checkpoint
        state = load_local_checkpoint(checkpoint, map_location='cpu')  # weights_only=True
        state = state.get('state_dict', state)
        if any(k.startswith('backbone.') for k in state):
            state = {k[len('backbone.'):]: v for k, v in state.items()
                     if k.startswith('backbone.')}
        model.load_state_dict(state, strict=True)
    model.eval()
    return model


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('config', nargs='?', default=None)
    parser.add_argument('--arch', default='cpvt-tiny', help=f'without a config: {sorted(ARCHS)}')
    parser.add_argument('--checkpoint', default=None)
    parser.add_argument('--img', nargs='+', required=True)
    parser.add_argument('--size', type=int, nargs=2, default=(224, 224), metavar=('H', 'W'))
    parser.add_argument('--block', type=int, default=0)
    parser.add_argument('--head', nargs='+', default=['all'])
    parser.add_argument('--query', type=int, nargs=2, default=None,
                        help='patch (row, col) of the query maps; defaults to the centre')
    parser.add_argument('--patch-size', type=int, default=None,
                        help='stride of the token grid (default: read from the model)')
    parser.add_argument('--out-dir', default='work_dirs/attention_maps')
    args = parser.parse_args(argv)
    model = build_backbone(args.config, args.arch, args.checkpoint)
    patch = args.patch_size or getattr(model, 'patch_size', None) or getattr(
        getattr(model, 'patch_embed', None), 'projection', nn.Conv2d(1, 1, 16)).kernel_size[0]
    patch = patch if isinstance(patch, int) else patch[0]
    extra = getattr(model, 'num_extra_tokens', int(getattr(model, 'with_cls_token', False)))
    heads = 'all' if args.head == ['all'] else args.head
    files = visualize(model, args.img, args.out_dir, args.size, args.block, heads, args.query,
                      patch_size=patch, num_extra_tokens=extra)
    for kind, paths in files.items():
        for p in paths:
            print(f'{kind}: {p}')
    return files


if __name__ == '__main__':
    main()
