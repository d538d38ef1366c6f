"""Generate ``shapes_coco``: a small synthetic detection dataset in COCO format.

The command line of :func:`mmposenc.utils.tools.shapes_coco.make_shapes_coco` (its docstring
describes the images and the layout; ``tools/demo.py`` calls it on first use).

Usage::

    python tools/dataset_converters/make_shapes_coco.py data/shapes_coco --num-train 400
"""
import argparse
import os.path as osp
import sys

# this checkout's mmposenc first (a tool of a clone imports the clone's, installed or not)
sys.path.insert(0, osp.dirname(osp.dirname(osp.dirname(osp.realpath(__file__)))))
from mmposenc.utils.tools.shapes_coco import make_shapes_coco  # noqa: E402


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('out_dir', nargs='?', default='data/shapes_coco')
    parser.add_argument('--num-train', type=int, default=400)
    parser.add_argument('--num-val', type=int, default=100)
    parser.add_argument('--min-size', type=int, default=128)
    parser.add_argument('--max-size', type=int, default=192)
    parser.add_argument('--seed', type=int, default=0)
    parser.add_argument('--force', action='store_true')
    return parser.parse_args()


if __name__ == '__main__':
    args = parse_args()
    make_shapes_coco(args.out_dir, args.num_train, args.num_val, args.min_size, args.max_size,
                     seed=args.seed, force=args.force)
    print(f'shapes_coco written to {args.out_dir}')
