"""Generate ``shapes_coco``: a small synthetic detection dataset in COCO format.

Coloured rectangles, ellipses and triangles (3 classes) on textured backgrounds, images of
random size (128-192 px by default, so batches are padded), 1-4 non-overlapping objects per
image. Everything is derived from a seed: the same arguments give byte-identical files.
It needs only numpy and OpenCV, no network; ``tools/demo.py`` calls it on first use, and
``tools/dataset_converters/make_shapes_coco.py`` is its command line.

Layout (a COCO tree that mmdet's ``CocoDataset`` reads as is)::

    <out_dir>/annotations/instances_train.json
    <out_dir>/annotations/instances_val.json
    <out_dir>/train/000000.png ...
    <out_dir>/val/000000.png ...

Usage::

    python tools/dataset_converters/make_shapes_coco.py data/shapes_coco --num-train 400

Examples:
    >>> from mmposenc.utils.tools.shapes_coco import make_shapes_coco
    >>> root = make_shapes_coco('data/shapes_coco', num_train=8, num_val=4)  # doctest: +SKIP
"""
import json
import os
import os.path as osp

import cv2
import numpy as np

CLASSES = ('rectangle', 'ellipse', 'triangle')
STAMP = '.shapes_coco_stamp.json'


def _background(rng, h, w):
    """Smooth colour noise plus a random stripe or checker texture, uint8 (h, w, 3)."""
    base = rng.uniform(40, 215, size=3)
    coarse = rng.normal(0, 28, size=(rng.integers(3, 7), rng.integers(3, 7), 3))
    noise = cv2.resize(coarse.astype(np.float32), (w, h), interpolation=cv2.INTER_CUBIC)
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    period = rng.uniform(6, 20)
    angle = rng.uniform(0, np.pi)
    kind = rng.integers(3)
    if kind == 0:  # stripes
        tex = np.sin((xx * np.cos(angle) + yy * np.sin(angle)) * 2 * np.pi / period)
    elif kind == 1:  # checker
        tex = np.sign(np.sin(xx * 2 * np.pi / period) * np.sin(yy * 2 * np.pi / period))
    else:  # fine noise
        tex = rng.normal(0, 0.6, size=(h, w)).astype(np.float32)
    tex = tex[..., None] * rng.uniform(6, 18)
    img = base[None, None] + noise + tex
    return np.clip(img, 0, 255)


def _shape_mask(rng, label, h, w, size):
    """Draw one shape of class ``label`` into a (h, w) uint8 mask; returns the mask."""
    mask = np.zeros((h, w), np.uint8)
    cx = rng.uniform(size / 2, w - size / 2)
    cy = rng.uniform(size / 2, h - size / 2)
    if label == 0:
        bw, bh = size * rng.uniform(0.5, 1.0), size * rng.uniform(0.5, 1.0)
        theta = rng.uniform(0, 180)
        box = cv2.boxPoints(((cx, cy), (bw, bh), theta))
        cv2.fillPoly(mask, [np.round(box).astype(np.int32)], 1)
    elif label == 1:
        axes = (int(size * rng.uniform(0.25, 0.5)), int(size * rng.uniform(0.25, 0.5)))
        cv2.ellipse(mask, (int(cx), int(cy)), axes, rng.uniform(0, 180), 0, 360, 1, -1)
    else:
        angles = rng.uniform(0, 2 * np.pi) + np.array([0, 2.1, 4.2]) + rng.uniform(-.3, .3, 3)
        r = size / 2 * rng.uniform(0.7, 1.0, 3)
        pts = np.stack([cx + r * np.cos(angles), cy + r * np.sin(angles)], 1)
        cv2.fillPoly(mask, [np.round(pts).astype(np.int32)], 1)
    return mask


def _make_image(rng, min_size, max_size, max_objects, object_size):
    h, w = (int(v) for v in rng.integers(min_size, max_size + 1, size=2))
    img = _background(rng, h, w)
    occupied = np.zeros((h, w), bool)
    anns = []
    for _ in range(int(rng.integers(1, max_objects + 1))):
        for _attempt in range(20):
            label = int(rng.integers(len(CLASSES)))
            size = rng.uniform(*object_size) * min(h, w)
            mask = _shape_mask(rng, label, h, w, size).astype(bool)
            ys, xs = np.nonzero(mask)
            if len(xs) < 30:
                continue
            x0, y0, x1, y1 = xs.min(), ys.min(), xs.max() + 1, ys.max() + 1
            if occupied[max(y0 - 2, 0):y1 + 2, max(x0 - 2, 0):x1 + 2].any():
                continue
            occupied[y0:y1, x0:x1] = True
            colour = rng.uniform(0, 255, size=3)
            # keep the object visible against its local background
            local = img[mask].mean(0)
            if np.abs(colour - local).sum() < 150:
                colour = 255 - local
            shade = rng.normal(0, 6, size=(int(mask.sum()), 3))
            img[mask] = np.clip(colour[None] + shade, 0, 255)
            anns.append(dict(
                category_id=label + 1,
                bbox=[float(x0), float(y0), float(x1 - x0), float(y1 - y0)],
                area=float(mask.sum()), iscrowd=0))
            break
    img = np.clip(img + rng.normal(0, 3, size=img.shape), 0, 255).astype(np.uint8)
    return img, anns


def make_shapes_coco(out_dir, num_train=400, num_val=100, min_size=128, max_size=192,
                     max_objects=4, object_size=(0.15, 0.45), seed=0, force=False):
    """Write the dataset to ``out_dir`` (skipped when an identical one is already there).

    Args:
        out_dir (str): Root of the COCO tree to write.
        num_train (int): Training images. Defaults to 400.
        num_val (int): Validation images. Defaults to 100.
        min_size (int): Smallest image side. Defaults to 128.
        max_size (int): Largest image side. Defaults to 192.
        max_objects (int): Most objects per image. Defaults to 4.
        object_size (tuple[float]): Range of an object's nominal size (its bounding square
            before the random aspect / rotation) as a fraction of the shorter image side.
            Defaults to (0.15, 0.45).
        seed (int): Seed of everything. Defaults to 0.
        force (bool): Regenerate even if the stamp matches. Defaults to False.

    Returns:
        str: ``out_dir``.
    """
    params = dict(num_train=num_train, num_val=num_val, min_size=min_size, max_size=max_size,
                  max_objects=max_objects, seed=seed, version=2)
    if tuple(object_size) != (0.15, 0.45):  # the stamp of older trees stays valid
        params['object_size'] = [float(v) for v in object_size]
    stamp = osp.join(out_dir, STAMP)
    if not force and osp.isfile(stamp):
        with open(stamp) as f:
            if json.load(f) == params:
                return out_dir
    os.makedirs(osp.join(out_dir, 'annotations'), exist_ok=True)
    categories = [dict(id=i + 1, name=n, supercategory='shape') for i, n in enumerate(CLASSES)]
    for split, num, split_seed in (('train', num_train, seed), ('val', num_val, seed + 1)):
        rng = np.random.default_rng(split_seed)
        os.makedirs(osp.join(out_dir, split), exist_ok=True)
        images, annotations = [], []
        for i in range(num):
            img, anns = _make_image(rng, min_size, max_size, max_objects, object_size)
            name = f'{i:06d}.png'
            cv2.imwrite(osp.join(out_dir, split, name), img)
            images.append(dict(id=i + 1, file_name=name, height=img.shape[0], width=img.shape[1]))
            for ann in anns:
                annotations.append(dict(ann, id=len(annotations) + 1, image_id=i + 1))
        with open(osp.join(out_dir, 'annotations', f'instances_{split}.json'), 'w') as f:
            json.dump(dict(info=dict(description=f'shapes_coco {split} (synthetic)',
                                     version='2', year=2024),
                           licenses=[], images=images, annotations=annotations,
                           categories=categories), f)
    with open(stamp, 'w') as f:
        json.dump(params, f)
    return out_dir
