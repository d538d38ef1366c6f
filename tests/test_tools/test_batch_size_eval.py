"""tools/analysis/batch_size_eval.py (issue 20, item 4), from a folder of the user's (its
command line in this process, tests/forked_runs.py's run_in_process; the tool as
``python <tool>`` in a fresh process from a clone is test_tools_as_users_run_them's), the shipped demo config through mmengine's Runner.test at batch 1
and 2 (and 2 in aspect-ratio order) on generated shapes images of different sizes, random
weights with trained-like norms. Ours (the model's switch on: the demo config ships with it
off, its cost on that small model being above 3 %) gives every image the same
predictions and the same mAP at every batch size; mmdet's own classes on the same weights do
not. No timing is asserted."""
import json
import os.path as osp

import pytest
import torch

from conftest import REPO_ROOT
from forked_runs import run_in_process
from tool_files import load_tool

pytest.importorskip('mmdet')

TOOL = osp.join(REPO_ROOT, 'tools', 'analysis', 'batch_size_eval.py')
CONFIG = osp.join(REPO_ROOT, 'configs', 'peg_deformable_detr',
                  'deformable-detr-sine_r18-quarter_1xb4-2500i_shapes.py')


def _tool():
    return load_tool('analysis/batch_size_eval.py')


def test_ours_is_batch_size_exact_and_stock_is_not(tmp_path):
    from mmposenc.utils.tools.shapes_coco import make_shapes_coco
    # the config's data_root, relative to the user's folder: images of 96-128 px, padded
    make_shapes_coco(str(tmp_path / 'data' / 'shapes_coco'), num_train=2, num_val=6,
                     min_size=96, max_size=128, seed=0)
    res = run_in_process(dict(cwd=str(tmp_path), argv=[
        TOOL, '--random-weights', '--keep-data', '--num-images', '6',
        '--batch-sizes', '1', '2', '--sort-by-aspect', 'ours', '--work-dir', 'work',
        '--model', 'ours', 'on:' + CONFIG, '--model', 'stock mmdet', 'stock:' + CONFIG,
        '--out', 'rows.json', '--table', 'table.md', '--plot', 'figure.png']))
    assert res.returncode == 0, res.stderr[-3000:]
    rows = {r['model']: r for r in json.loads((tmp_path / 'rows.json').read_text())}
    # both models on the same random weights (the same state-dict keys)
    assert rows['ours']['checkpoint'] == rows['stock mmdet']['checkpoint']
    for name, row in rows.items():  # sorted by aspect ratio: ours only
        runs = {(r['batch_size'], r['sorted']): r for r in row['runs']}
        sorted_runs = {(2, True)} if name == 'ours' else set()
        assert set(runs) == {(1, False), (2, False)} | sorted_runs
        assert all(r['images'] == 6 for r in row['runs'])
    ours = {(r['batch_size'], r['sorted']): r for r in rows['ours']['runs']}
    for key in ((2, False), (2, True)):
        assert ours[key]['identical'] and ours[key]['labels_equal'], ours[key]
        assert ours[key]['same_images'] == 6
        assert f'{ours[key]["mAP"]:.4f}' == f'{ours[(1, False)]["mAP"]:.4f}'
    stock = {(r['batch_size'], r['sorted']): r for r in rows['stock mmdet']['runs']}
    assert not stock[(2, False)]['identical'], stock[(2, False)]
    assert stock[(2, False)]['max_score_diff'] > 1e-4
    assert stock[(2, False)]['same_images'] < 6
    table = (tmp_path / 'table.md').read_text().splitlines()
    assert len(table) == 4 and table[2].startswith('| ours |')
    assert table[3].endswith(' |  |')  # no sorted run for stock
    assert (tmp_path / 'figure.png').stat().st_size > 10_000


def _preds(scores, boxes, labels):
    import torch
    return dict(scores=torch.tensor(scores), bboxes=torch.tensor(boxes),
                labels=torch.tensor(labels))


def test_compare_counts_the_images_that_stay_the_same():
    """Per image: equal, within the bar (scores 1e-4, boxes 0.01 px), a moved box, a moved
    score; same_images counts the first two, identical is False, the table says how many."""
    compare, table = _tool().compare, _tool().table
    box = [[1., 2., 30., 40.], [5., 5., 9., 9.]]
    ref = {i: _preds([0.9, 0.5], box, [3, 7]) for i in range(4)}
    other = {0: _preds([0.9, 0.5], box, [3, 7]),
             1: _preds([0.9 + 5e-5, 0.5], [[1., 2., 30.005, 40.], box[1]], [3, 7]),
             2: _preds([0.9, 0.5], [[1., 2., 31., 40.], box[1]], [3, 7]),
             3: _preds([0.9, 0.52], box, [3, 7])}
    result = compare(ref, other)
    assert (result['same_images'], result['bitwise_images'], result['images']) == (2, 1, 4)
    assert not result['identical']
    assert abs(result['max_score_diff'] - 0.02) < 1e-6
    assert compare(ref, {0: other[0], 1: other[1], 2: other[1], 3: other[0]})['identical']
    run = dict(batch_size=2, sorted=False, mAP=0.1, seconds=1., cpu_seconds=1., **result)
    ref_run = dict(run, batch_size=1, same_images=4, bitwise_images=4, identical=True)
    row = table([dict(model='m', runs=[ref_run, run])]).splitlines()[2]
    assert '| no, 2/4 (2.0e-02 /' in row
    # an instance-mask model's runs carry the mask mAP: box / mask in the table
    masks = [dict(ref_run, segm_mAP=0.25), dict(run, segm_mAP=0.125)]
    row = table([dict(model='m', runs=masks)]).splitlines()[2]
    assert row.startswith('| m | 0.1000 / 0.2500 | 0.1000 / 0.1250 | no, 2/4')


def test_sort_by_aspect_refuses_an_unknown_label(tmp_path):
    main = _tool().main
    with pytest.raises(ValueError, match="--sort-by-aspect 'stock': no model has this label"):
        main(['--model', 'ours', CONFIG, '--sort-by-aspect', 'stock',
              '--work-dir', str(tmp_path / 'work')])
    assert not (tmp_path / 'work').exists()
