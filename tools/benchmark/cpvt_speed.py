"""Forward time of CPVT-Ti against mmpretrain's DeiT-Ti (``VisionTransformer``, ``deit-tiny``).

CPVT-Ti is DeiT-Ti without the learnable absolute position embedding and with one PEG (3 x 3
depthwise convolution, 192 x 9 + 192 parameters) after the first encoder layer; CPVT reports
the PEG as "negligible" extra cost. Both backbones get the same batch in evaluation mode
(``no_grad``); the repetitions of the two models are interleaved and the medians compared
(a ratio measured in one process, not an absolute claim)::

    python tools/benchmark/cpvt_speed.py                         # batch 8, 224 x 224
    python tools/benchmark/cpvt_speed.py --batch 1 --size 384 384 --repeats 30
"""
import argparse
import os.path as osp
import sys
from typing import Dict

import torch

# this checkout's mmposenc first (a tool of a clone imports the clone's, installed or not)
sys.path.insert(0, osp.dirname(osp.dirname(osp.dirname(osp.realpath(__file__)))))
from mmposenc.utils.tools.machine import interleaved_medians


def build_pair(img_size=224):
    """CPVT-Ti (mmposenc) and DeiT-Ti (mmpretrain ``VisionTransformer``), eval mode."""
    from mmpretrain.models import VisionTransformer

    from mmposenc.models.backbones import CPVT
    torch.manual_seed(0)
    cpvt = CPVT('tiny', img_size=img_size).eval()
    deit = VisionTransformer('deit-tiny', img_size=img_size, out_type='cls_token')
    deit.eval()  # (mmpretrain's ViT.train() returns None)
    return cpvt, deit


def bench(batch: int = 8, size=(224, 224), repeats: int = 20, warmup: int = 2
          ) -> Dict[str, float]:
    """Median forward seconds ``{'cpvt': ..., 'deit': ...}`` on one random batch."""
    cpvt, deit = build_pair(img_size=size[0] if size[0] == size[1] else tuple(size))
    x = torch.randn(batch, 3, *size)

    def run(model):
        def fn():
            with torch.no_grad():
                model(x)
        return fn

    return interleaved_medians({'cpvt': run(cpvt), 'deit': run(deit)}, repeats, warmup)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--batch', type=int, default=8)
    parser.add_argument('--size', type=int, nargs=2, default=[224, 224])
    parser.add_argument('--repeats', type=int, default=20)
    parser.add_argument('--threads', type=int, default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    t = bench(args.batch, tuple(args.size), args.repeats)
    print(f'batch {args.batch} x {tuple(args.size)}, median of {args.repeats}, '
          f'{torch.get_num_threads()} threads: CPVT-Ti {t["cpvt"] * 1e3:.1f} ms, DeiT-Ti '
          f'{t["deit"] * 1e3:.1f} ms, ratio {t["cpvt"] / t["deit"]:.3f}')


if __name__ == '__main__':
    main()
