"""Build a semantic-segmentation set from COCO instance masks (mmseg layout).

Pixels of instances of the ``--num-classes`` most frequent categories get labels 1..K, all
other pixels 0 (background); where instances overlap the later (smaller, drawn last) one wins.
Images are resized so the longer side is ``--max-size``::

    OUT/img_dir/{train,val}/<image id>.jpg
    OUT/ann_dir/{train,val}/<image id>.png     (uint8 labels)
    OUT/classes.txt                           (background first)

Usage::

    python tools/dataset_converters/coco_to_semseg.py ../shared/data/coco128 /tmp/coco_semseg
"""
import argparse
import json
import os
import os.path as osp
from collections import Counter, defaultdict

import numpy as np
from PIL import Image, ImageDraw


def _instance_mask(ann, h, w):
    seg = ann['segmentation']
    if isinstance(seg, list):  # polygons
        canvas = Image.new('L', (w, h), 0)
        draw = ImageDraw.Draw(canvas)
        for poly in seg:
            if len(poly) >= 6:
                draw.polygon([(poly[i], poly[i + 1]) for i in range(0, len(poly), 2)], fill=1)
        return np.asarray(canvas, dtype=bool)
    from pycocotools import mask as mask_utils  # RLE (crowd) annotations
    rle = mask_utils.frPyObjects(seg, h, w) if isinstance(seg['counts'], list) else seg
    return mask_utils.decode(rle).astype(bool)


def convert(coco_root, out_dir, ann_file='annotations/instances_train2017.json',
            img_dir='train2017', num_classes=5, max_size=256, val_every=4):
    """Write images and label maps; returns ``{'classes': [...], 'train': n, 'val': n}``."""
    with open(osp.join(coco_root, ann_file)) as f:
        coco = json.load(f)
    cats = {c['id']: c['name'] for c in coco['categories']}
    counts = Counter(a['category_id'] for a in coco['annotations'])
    keep = [c for c, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:num_classes]]
    label_of = {c: i + 1 for i, c in enumerate(keep)}
    by_image = defaultdict(list)
    for a in coco['annotations']:
        by_image[a['image_id']].append(a)
    written = Counter()
    for im in sorted(coco['images'], key=lambda im: im['id']):
        path = osp.join(coco_root, img_dir, im['file_name'])
        if not osp.exists(path):
            continue
        h, w = im['height'], im['width']
        label = np.zeros((h, w), np.uint8)
        for a in sorted(by_image[im['id']], key=lambda a: -a.get('area', 0)):
            if a['category_id'] in label_of:
                label[_instance_mask(a, h, w)] = label_of[a['category_id']]
        split = 'val' if im['id'] % val_every == 0 else 'train'
        scale = min(1.0, max_size / max(h, w))
        size = (max(1, round(w * scale)), max(1, round(h * scale)))
        img = Image.open(path).convert('RGB').resize(size, Image.BILINEAR)
        lab = Image.fromarray(label).resize(size, Image.NEAREST)
        for sub in ('img_dir', 'ann_dir'):
            os.makedirs(osp.join(out_dir, sub, split), exist_ok=True)
        img.save(osp.join(out_dir, 'img_dir', split, f'{im["id"]:012d}.jpg'), quality=95)
        lab.save(osp.join(out_dir, 'ann_dir', split, f'{im["id"]:012d}.png'))
        written[split] += 1
    classes = ['background'] + [cats[c] for c in keep]
    with open(osp.join(out_dir, 'classes.txt'), 'w') as f:
        f.write('\n'.join(classes) + '\n')
    return dict(classes=classes, train=written['train'], val=written['val'])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('coco_root')
    parser.add_argument('out_dir')
    parser.add_argument('--ann-file', default='annotations/instances_train2017.json')
    parser.add_argument('--img-dir', default='train2017')
    parser.add_argument('--num-classes', type=int, default=5)
    parser.add_argument('--max-size', type=int, default=256)
    parser.add_argument('--val-every', type=int, default=4)
    args = parser.parse_args()
    print(convert(args.coco_root, args.out_dir, args.ann_file, args.img_dir,
                  args.num_classes, args.max_size, args.val_every))


if __name__ == '__main__':
    main()
