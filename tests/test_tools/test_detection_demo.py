"""tools/demo.py --quick: the shapes_coco generator, both demo configs, CocoMetric, the table."""
import json
import os.path as osp
import subprocess
import sys

import pytest

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
sys.path.insert(0, osp.join(REPO, 'tools', 'dataset_converters'))


def test_shapes_coco_is_deterministic_and_valid(tmp_path):
    from make_shapes_coco import CLASSES, make_shapes_coco
    a = make_shapes_coco(str(tmp_path / 'a'), num_train=6, num_val=3, seed=3)
    b = make_shapes_coco(str(tmp_path / 'b'), num_train=6, num_val=3, seed=3)
    for split in ('train', 'val'):
        ann_a = json.load(open(osp.join(a, 'annotations', f'instances_{split}.json')))
        ann_b = json.load(open(osp.join(b, 'annotations', f'instances_{split}.json')))
        assert ann_a == ann_b
        assert [c['name'] for c in ann_a['categories']] == list(CLASSES)
        for img in ann_a['images']:
            assert 128 <= img['height'] <= 192 and 128 <= img['width'] <= 192
            with open(osp.join(a, split, img['file_name']), 'rb') as fa, \
                    open(osp.join(b, split, img['file_name']), 'rb') as fb:
                assert fa.read() == fb.read()
        by_img = {}
        for ann in ann_a['annotations']:
            x, y, w, h = ann['bbox']
            img = ann_a['images'][ann['image_id'] - 1]
            assert w > 0 and h > 0 and x >= 0 and y >= 0
            assert x + w <= img['width'] and y + h <= img['height']
            assert 0 < ann['area'] <= w * h
            by_img.setdefault(ann['image_id'], []).append(ann)
        assert len(by_img) == len(ann_a['images'])  # every image has an object
    other = make_shapes_coco(str(tmp_path / 'c'), num_train=6, num_val=3, seed=4)
    assert json.load(open(osp.join(other, 'annotations', 'instances_train.json'))) != \
        json.load(open(osp.join(a, 'annotations', 'instances_train.json')))


@pytest.mark.slow
def test_demo_quick_runs_both_models_and_prints_the_table(tmp_path):
    res = subprocess.run(
        [sys.executable, 'tools/demo.py', '--quick', '--work-dir', str(tmp_path)],
        cwd=REPO, capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-5000:]
    table = res.stdout[res.stdout.index('| encoder PE'):]
    rows = [line for line in table.splitlines() if line.startswith('| ')][1:]
    assert [r.split('|')[1].strip() for r in rows] == ['peg', 'sine']
    for row in rows:
        mAP = float(row.split('|')[3])
        assert 0.0 <= mAP <= 1.0
