"""The dataset check's box bounds at their edges: zero width and height, boxes just outside the
image, boxes within and just beyond the 1 px tolerance.

test_dataset_check.py injects defects far from the edges (a box 60 px outside the image,
width -3); these are the limit cases, where a check moved by one comparison (``<`` for ``<=``)
or by a margin (50 px) would let a defect through. Each case names the kinds of errors the
check reports for annotation 1774 of COCO128 (image 74, 640 x 426) and the end of each line.
"""
import copy
import json
import os
import os.path as osp

import pytest

ANN = 'annotations/instances_train2017.json'
W, H = 640, 426  # image 74, the image of annotation 1774 (the first annotation)


@pytest.fixture(scope='module')
def coco128_json(coco128_root):
    with open(osp.join(coco128_root, ANN)) as f:
        return json.load(f)


def check_with_first_bbox(tmp_path, coco128_root, coco128_json, bbox, area=None):
    """The check's errors, as (kind, line), for COCO128 with its first annotation's box set to
    ``bbox`` (and its area to ``area`` when given)."""
    from mmdet.datasets import CocoDataset

    from mmposenc.datasets.dataset_check import check_dataset
    data = copy.deepcopy(coco128_json)
    ann = data['annotations'][0]
    assert ann['id'] == 1774 and ann['image_id'] == 74
    image = next(i for i in data['images'] if i['id'] == 74)
    assert (image['width'], image['height']) == (W, H)
    ann['bbox'] = bbox
    if area is not None:
        ann['area'] = area
    root = tmp_path / 'coco'
    (root / 'annotations').mkdir(parents=True)
    os.symlink(osp.join(coco128_root, 'train2017'), root / 'train2017')
    (root / ANN).write_text(json.dumps(data))
    dataset = CocoDataset(data_root=f'{root}/', ann_file=ANN,
                          data_prefix=dict(img='train2017/'),
                          filter_cfg=dict(filter_empty_gt=True, min_size=32), lazy_init=True)
    report = check_dataset(dataset, files='none')
    return [(kind, line) for _, kind, line in report.errors]


def _outside(bbox):
    box = ', '.join(str(v) for v in bbox)
    return [('bbox_outside_image', f'bbox [{box}] lies outside the image ({W}x{H})')]


def _beyond(bbox, px):
    box = ', '.join(str(v) for v in bbox)
    return [('bbox_beyond_image', f'bbox [{box}] extends {px} px beyond the image ({W}x{H}); '
             'is it [x1, y1, x2, y2] instead of [x, y, width, height]?')]


CASES = [
    # (id, bbox, expected (kind, end of line) errors)
    ('zero-width', [61.87, 276.25, 0, 103.18], [('bbox_size', 'bbox width 0 <= 0')]),
    ('zero-height', [61.87, 276.25, 296.42, 0], [('bbox_size', 'bbox height 0 <= 0')]),
    ('zero-width-and-height', [61.87, 276.25, 0, 0],
     [('bbox_size', 'bbox width 0 <= 0'), ('bbox_size', 'bbox height 0 <= 0')]),
    ('tiny-width', [61.87, 276.25, 0.01, 103.18], []),  # > 0: a counted drop, not an error
    # no pixel inside: touching the right / bottom edge from outside, 0.5 px left / above
    ('just-outside-right', [640, 10, 20, 20], _outside([640, 10, 20, 20])),
    ('just-outside-bottom', [10, 426, 20, 20], _outside([10, 426, 20, 20])),
    ('just-outside-left', [-20.5, 10, 20, 20], _outside([-20.5, 10, 20, 20])),
    ('just-outside-top', [10, -20.5, 20, 20], _outside([10, -20.5, 20, 20])),
    ('5px-outside-right', [645, 10, 20, 20], _outside([645, 10, 20, 20])),
    ('49px-outside-bottom', [10, 475, 20, 20], _outside([10, 475, 20, 20])),
    # one pixel column inside: not outside
    ('1px-inside-right', [639, 10, 1, 20], []),
    # the whole image and up to the 1 px tolerance beyond it: accepted
    ('whole-image', [0, 0, 640, 426], []),
    ('within-tolerance', [-0.5, -1, 641.5, 427], []),
    ('just-beyond-tolerance', [10, 10, 631.5, 20], _beyond([10, 10, 631.5, 20], 1.5)),
    ('just-beyond-tolerance-top', [10, -1.25, 20, 20], _beyond([10, -1.25, 20, 20], 1.25)),
]


@pytest.mark.parametrize('bbox, expected', [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bbox_at_the_edges(bbox, expected, tmp_path, coco128_root, coco128_json):
    errors = check_with_first_bbox(tmp_path, coco128_root, coco128_json, bbox,
                                   area=max(bbox[2] * bbox[3], 1.0))
    assert [kind for kind, _ in errors] == [kind for kind, _ in expected], errors
    for (_, line), (_, end) in zip(errors, expected):
        assert 'annotation id 1774 (image 74): ' in line and line.endswith(end), line
