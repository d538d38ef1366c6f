"""Fixtures of the timm baselines from huggingface/pytorch-image-models, for
``tests/test_reference/test_parity_timm.py``:

- ``timm.layers.pos_embed_sincos.build_sincos2d_pos_embed`` (2D sin-cos, MoCo v3 / MAE style)
  with ``interleave_sin_cos=True`` on every grid;
- ``timm.layers.pos_embed_rel.RelPosBias`` (Swin / BEiT relative position bias, no prefix
  token): its table, ``get_bias()`` and the gradient w.r.t. the table, on windows 4x4, 3x5
  and 6x5; the 6x5 table is made clip-consistent for a clipping distance of 4 (the entries
  of the displacements beyond 4 rows are copies of those at 4) so that a clipped table can
  hold it;
- ``timm.layers.pos_embed.resample_abs_pos_embed`` (learnable absolute embedding of a 4x4
  grid and a class token, resampled bicubically) to 4x4, 3x5 and 6x5, with timm's default
  ``antialias=True`` and with ``antialias=False`` (DeiT's resize), and its gradient.

Usage::

    python tests/reference/generate/timm.py --src /path/to/pytorch-image-models [--commit SHA]
"""
import os.path as osp
import sys

import torch

sys.path.insert(0, osp.dirname(osp.abspath(__file__)))
from _common import GRIDS, grad_of, parse_args, save  # noqa: E402

REPO = 'huggingface/pytorch-image-models'
C, NUM_HEADS, CLIP = 16, 2, 4
TRAIN_GRID = (4, 4)


def main():
    args = parse_args(__doc__.splitlines()[0], REPO)
    import timm
    from timm.layers.pos_embed import resample_abs_pos_embed
    from timm.layers.pos_embed_rel import RelPosBias
    from timm.layers.pos_embed_sincos import build_sincos2d_pos_embed
    assert osp.dirname(osp.dirname(timm.__file__)) == args.src, timm.__file__

    cases = []
    for gi, (gname, (H, W)) in enumerate(GRIDS.items()):
        cases.append(dict(name=f'sincos/{gname}', kind='sincos', hw=[H, W],
                          emb=build_sincos2d_pos_embed([H, W], C, interleave_sin_cos=True)))
    for gi, (gname, (H, W)) in enumerate(GRIDS.items()):
        torch.manual_seed(gi)
        rpb = RelPosBias((H, W), NUM_HEADS)
        with torch.no_grad():  # clip-consistent: rows beyond CLIP copy the row at CLIP
            t = rpb.relative_position_bias_table.view(2 * H - 1, 2 * W - 1, NUM_HEADS)
            for dy in range(CLIP + 1, H):
                t[H - 1 + dy] = t[H - 1 + CLIP]
                t[H - 1 - dy] = t[H - 1 - CLIP]
            assert W - 1 <= CLIP
        bias = rpb.get_bias()
        seed = 10 + gi
        (grad, ) = grad_of(bias, [rpb.relative_position_bias_table], seed)
        cases.append(dict(name=f'rel_pos_bias/{gname}', kind='rel_pos_bias', hw=[H, W],
                          table=rpb.relative_position_bias_table, bias=bias, probe_seed=seed,
                          grad_table=grad))
    torch.manual_seed(100)
    pos_embed = torch.nn.Parameter(0.02 * torch.randn(1, 1 + TRAIN_GRID[0] * TRAIN_GRID[1], C))
    for gi, (gname, (H, W)) in enumerate(GRIDS.items()):
        for aa in (True, False):
            out = resample_abs_pos_embed(pos_embed, [H, W], list(TRAIN_GRID), 1,
                                         antialias=aa)
            seed = 20 + gi
            (grad, ) = grad_of(out, [pos_embed], seed)
            cases.append(dict(name=f'abs_resample/{gname}/' + ('aa' if aa else 'no_aa'),
                              kind='abs_resample', hw=[H, W], antialias=aa, out=out,
                              probe_seed=seed, grad_pos_embed=grad))
    save(args, 'timm', REPO, ['timm/layers/pos_embed_sincos.py:build_sincos2d_pos_embed',
                              'timm/layers/pos_embed_rel.py:RelPosBias',
                              'timm/layers/pos_embed.py:resample_abs_pos_embed'], cases,
         extra=dict(channels=C, num_heads=NUM_HEADS, clip=CLIP, train_grid=list(TRAIN_GRID),
                    pos_embed=pos_embed),
         extra_versions=('timm', ))


if __name__ == '__main__':
    main()
