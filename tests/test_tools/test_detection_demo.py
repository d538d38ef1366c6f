"""tools/demo.py: the shapes_coco generator, the three demo configs (none / sine / PEG, identical
otherwise), the schedule it derives from --iters, and a --quick run (CocoMetric, table, figure)."""
import hashlib
import json
import os
import os.path as osp

import numpy as np
import pytest

from tool_files import load_tool


def test_shapes_coco_is_deterministic_and_valid(tmp_path):
    from mmposenc.utils.tools.shapes_coco import CLASSES, make_shapes_coco
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


def _box_sides(root, split='train'):
    ann = json.load(open(osp.join(root, 'annotations', f'instances_{split}.json')))
    return np.array([max(a['bbox'][2:]) for a in ann['annotations']])


def test_shapes_coco_object_size_and_disjoint_splits(tmp_path):
    from mmposenc.utils.tools.shapes_coco import make_shapes_coco
    kw = dict(num_train=40, num_val=20, min_size=96, max_size=128, seed=0)
    small = make_shapes_coco(str(tmp_path / 'small'), **kw)
    large = make_shapes_coco(str(tmp_path / 'large'), object_size=(0.3, 0.5), **kw)
    assert np.median(_box_sides(large)) > 1.3 * np.median(_box_sides(small))
    assert _box_sides(large).min() >= 0.3 * 0.5 * 96 - 1  # the smallest ellipse's width
    # the demo evaluates on val: no val image is a training image
    digest = lambda root, split: {  # noqa: E731
        hashlib.sha1(open(osp.join(root, split, f), 'rb').read()).hexdigest()
        for f in os.listdir(osp.join(root, split))}
    assert not digest(large, 'train') & digest(large, 'val')
    assert len(digest(large, 'train')) == 40 and len(digest(large, 'val')) == 20


def test_demo_models_differ_only_in_the_encoder_position_encoding(tmp_path):
    demo = load_tool('demo.py', 'mmposenc_tools_demo')
    args = demo.parse_args(['--work-dir', str(tmp_path)])
    cfgs = {pe: demo.build_cfg(pe, args, str(tmp_path)).to_dict() for pe in demo.ENCODINGS}
    assert list(cfgs) == ['none', 'sine', 'peg']  # the rows of CPVT Table 4
    assert {pe: c['model']['encoder_pos'] for pe, c in cfgs.items()} == \
        dict(none='none', sine='sine', peg='peg')
    # the mode's default: one PEG after the first encoder layer (CPVT)
    assert 'peg_after' not in cfgs['peg']['model']
    for c in cfgs.values():
        for key in ('encoder_pos', 'peg_after', 'peg_cfg', 'level_embed'):
            c['model'].pop(key, None)
        c.pop('work_dir')
    assert cfgs['none'] == cfgs['sine'] == cfgs['peg']
    train = cfgs['peg']['train_dataloader']['dataset']
    val = cfgs['peg']['val_dataloader']['dataset']
    assert (train['ann_file'], train['data_prefix']) != (val['ann_file'], val['data_prefix'])
    assert cfgs['peg']['val_evaluator']['ann_file'].endswith(val['ann_file'])


def test_demo_models_build_and_differ_by_the_peg_weights_only(tmp_path):
    demo = load_tool('demo.py', 'mmposenc_tools_demo')
    from mmengine.registry import init_default_scope

    import mmposenc.models  # noqa: F401
    from mmposenc.registry import MODELS
    init_default_scope('mmdet')
    args = demo.parse_args(['--work-dir', str(tmp_path)])
    params = {}
    for pe in demo.ENCODINGS:
        cfg = demo.build_cfg(pe, args, str(tmp_path))
        model = MODELS.build(cfg.model)
        params[pe] = {n: p.shape for n, p in model.named_parameters()}
        for key in cfg.optim_wrapper.paramwise_cfg.custom_keys:
            assert any(key in n for n in params[pe]), f'custom key {key!r} matches no parameter'
    assert params['none'] == params['sine']
    extra = {n: s for n, s in params['peg'].items() if n not in params['sine']}
    assert {n: s for n, s in params['peg'].items() if n in params['sine']} == params['sine']
    assert extra and all(n.startswith('encoder.pegs.0.') for n in extra)
    # per level (3, width 64): a depthwise 3x3 kernel and the affine of its norm
    assert sum(s.numel() for s in extra.values()) == 3 * (64 * 9 + 2 * 64)


def test_demo_iters_stretch_the_configured_schedule(tmp_path):
    demo = load_tool('demo.py', 'mmposenc_tools_demo')
    base = demo.build_cfg('peg', demo.parse_args(['--work-dir', str(tmp_path)]), str(tmp_path))
    cfg = demo.build_cfg('peg', demo.parse_args(['--work-dir', str(tmp_path), '--iters', '1000']),
                         str(tmp_path))
    n0, n = base.train_cfg.max_iters, 1000
    assert cfg.train_cfg.max_iters == n
    assert n0 // base.train_cfg.val_interval == n // cfg.train_cfg.val_interval
    (w0, s0), (w, s) = base.param_scheduler, cfg.param_scheduler
    assert (w.type, s.type) == ('LinearLR', 'MultiStepLR') and s.end == n
    assert [m / n for m in s.milestones] == [m / n0 for m in s0.milestones]
    assert w.end == min(w0.end, n // 10)
    assert cfg.default_hooks.checkpoint.interval == n
    cfg = demo.build_cfg('peg', demo.parse_args(
        ['--work-dir', str(tmp_path), '--cfg-options', 'model.num_queries=7']), str(tmp_path))
    assert cfg.model.num_queries == 7


@pytest.mark.slow
def test_demo_quick_runs_the_three_models_and_writes_table_and_figure(tmp_path, monkeypatch,
                                                                       capsys):
    """``tools/demo.py --quick --work-dir runs`` from the user's folder: shapes_coco generated
    in the user's data/, the three models trained and evaluated (each by ``python
    tools/demo.py --worker ...`` in a fresh process, as always), the table, and the outputs
    (one folder per model, demo.png) in the relative --work-dir there. The demo's ``main``
    runs in this process: the processes it starts are the command line's."""
    demo = load_tool('demo.py', 'mmposenc_tools_demo')
    monkeypatch.chdir(tmp_path)
    results = demo.main(['--quick', '--work-dir', 'runs'])
    stdout = capsys.readouterr().out
    assert [r['pe'] for r in results] == ['none', 'sine', 'peg']
    assert osp.isfile(tmp_path / 'data' / 'shapes_coco_demo_quick' / 'annotations' /
                      'instances_val.json')
    table = stdout[stdout.index('| encoder PE'):]
    rows = [line for line in table.splitlines() if line.startswith('| ')][1:]
    assert [r.split('|')[1].strip() for r in rows] == ['none', 'sine', 'peg']
    for row in rows:
        mAP = float(row.split('|')[3])
        assert 0.0 <= mAP <= 1.0
    for pe in ('none', 'sine', 'peg'):
        result = json.load(open(tmp_path / 'runs' / pe / 'result.json'))
        assert [p['iter'] for p in result['curve']] == [3, 6]  # val every 3 of 6 iterations
        assert result['metrics'] == result['curve'][-1]['metrics']
        assert len(result['samples']) == (4 if pe == 'peg' else 0)
    with open(tmp_path / 'runs' / 'demo.png', 'rb') as f:
        assert f.read(8) == b'\x89PNG\r\n\x1a\n'
