"""Build a small image-classification set from COCO object crops.

Every instance box of the ``--num-classes`` most frequent categories (boxes with both sides of at
least ``--min-size`` pixels, not crowd) is cropped, resized so its longer side is ``--max-size``
and written in mmpretrain's ``CustomDataset`` folder layout::

    OUT/train/<category>/<image id>_<annotation id>.jpg
    OUT/val/<category>/...            (images whose id % --val-every == 0)
    OUT/classes.txt

Usage::

    python tools/dataset_converters/coco_crops_cls.py ../shared/data/coco128 /tmp/coco_crops
"""
import argparse
import json
import os
import os.path as osp
from collections import Counter, defaultdict

from PIL import Image


def convert(coco_root, out_dir, ann_file='annotations/instances_train2017.json',
            img_dir='train2017', num_classes=4, min_size=32, max_size=96, val_every=4,
            max_per_class=None):
    """Write the crops; returns ``{'classes': [...], 'train': n, 'val': n}``."""
    with open(osp.join(coco_root, ann_file)) as f:
        coco = json.load(f)
    cats = {c['id']: c['name'].replace(' ', '_') for c in coco['categories']}
    images = {im['id']: im for im in coco['images']}
    anns = [a for a in coco['annotations']
            if not a.get('iscrowd', 0) and min(a['bbox'][2:]) >= min_size
            and osp.exists(osp.join(coco_root, img_dir, images[a['image_id']]['file_name']))]
    counts = Counter(a['category_id'] for a in anns)
    keep = [c for c, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:num_classes]]
    classes = [cats[c] for c in keep]
    written = Counter()
    per_class = defaultdict(int)
    by_image = defaultdict(list)
    for a in anns:
        if a['category_id'] in keep:
            by_image[a['image_id']].append(a)
    for image_id in sorted(by_image):
        split = 'val' if image_id % val_every == 0 else 'train'
        img = Image.open(osp.join(coco_root, img_dir, images[image_id]['file_name']))
        img = img.convert('RGB')
        for a in by_image[image_id]:
            name = cats[a['category_id']]
            if max_per_class and per_class[(split, name)] >= max_per_class:
                continue
            x, y, w, h = a['bbox']
            crop = img.crop((int(x), int(y), int(x + w), int(y + h)))
            scale = max_size / max(crop.size)
            crop = crop.resize((max(1, round(crop.width * scale)),
                                max(1, round(crop.height * scale))), Image.BICUBIC)
            d = osp.join(out_dir, split, name)
            os.makedirs(d, exist_ok=True)
            crop.save(osp.join(d, f'{image_id:012d}_{a["id"]}.jpg'), quality=95)
            per_class[(split, name)] += 1
            written[split] += 1
    with open(osp.join(out_dir, 'classes.txt'), 'w') as f:
        f.write('\n'.join(classes) + '\n')
    return dict(classes=classes, train=written['train'], val=written['val'])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('coco_root')
    parser.add_argument('out_dir')
    parser.add_argument('--ann-file', default='annotations/instances_train2017.json')
    parser.add_argument('--img-dir', default='train2017')
    parser.add_argument('--num-classes', type=int, default=4)
    parser.add_argument('--min-size', type=int, default=32)
    parser.add_argument('--max-size', type=int, default=96)
    parser.add_argument('--val-every', type=int, default=4)
    parser.add_argument('--max-per-class', type=int, default=None)
    args = parser.parse_args()
    stats = convert(args.coco_root, args.out_dir, args.ann_file, args.img_dir,
                    args.num_classes, args.min_size, args.max_size, args.val_every,
                    args.max_per_class)
    print(stats)


if __name__ == '__main__':
    main()
