"""tools/analysis/batch_consistency.py: --quick trains, evaluates batch 1 vs 4, and with the
backbone run per image our Deformable-DETR gives the same scores in both (mmdet's does not);
--demo-work-dir does the same on the checkpoints tools/demo.py wrote (here fake ones)."""
import json
import os
import os.path as osp

import pytest

from tool_files import load_tool

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))


@pytest.mark.slow
def test_quick_run_rows_and_equal_backbone_consistency(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # --quick generates its data in the working directory's data/
    tool = load_tool('analysis/batch_consistency.py', 'mmposenc_batch_consistency')
    rows = tool.main(['--quick', '--detectors', 'deformable-detr', '--work-dir',
                      str(tmp_path), '--out', str(tmp_path / 'rows.json')])
    by_model = {r['model']: r for r in rows}
    assert set(by_model) == {'PEG (ours)', 'sine (ours)', 'sine, stock mmdet',
                             'PEG (ours), ChannelMapper'}
    for r in rows:
        assert 0.0 <= r['mAP_b1'] <= 1.0 and 0.0 <= r['mAP_b4'] <= 1.0
    for name in ('PEG (ours)', 'sine (ours)'):
        assert by_model[name]['score_gap_equal_backbone'] <= 1e-5
    for name in ('sine, stock mmdet', 'PEG (ours), ChannelMapper'):
        assert by_model[name]['score_gap_equal_backbone'] > 1e-4
    assert (tmp_path / 'rows.json').is_file()


def _fake_demo_run(tmp_path):
    """A tools/demo.py work dir as the demo leaves it (``<dir>/{sine,peg}/<config>.py`` as the
    Runner dumps it, ``iter_N.pth``, ``last_checkpoint``), with randomly initialised models on
    a 4-image shapes_coco_demo-like val set (96-128 px, so batches are padded)."""
    import torch
    from mmengine.registry import init_default_scope

    from mmposenc.registry import MODELS
    from mmposenc.utils.tools.shapes_coco import make_shapes_coco
    demo = load_tool('demo.py', 'mmposenc_demo_for_batch_consistency')
    data_root = make_shapes_coco(str(tmp_path / 'data'), num_train=2, num_val=4, min_size=96,
                                 max_size=128, object_size=(0.25, 0.5), seed=0)
    work_dir = tmp_path / 'demo'
    args = demo.parse_args(['--work-dir', str(work_dir)])
    init_default_scope('mmdet')
    torch.manual_seed(0)
    ckpts = {}
    for pe in ('sine', 'peg'):
        cfg = demo.build_cfg(pe, args, data_root)
        os.makedirs(cfg.work_dir)
        cfg.dump(osp.join(cfg.work_dir, osp.basename(demo.CONFIGS[pe])))
        model = MODELS.build(cfg.model)
        model.init_weights()
        with torch.no_grad():  # scores near 0.5 rather than the 0.01 prior: differences show
            for branch in model.bbox_head.cls_branches:
                branch.bias.zero_()
        ckpts[pe] = osp.join(cfg.work_dir, f'iter_{cfg.train_cfg.max_iters}.pth')
        torch.save(dict(meta=dict(iter=cfg.train_cfg.max_iters),
                        state_dict=model.state_dict()), ckpts[pe])
        with open(osp.join(cfg.work_dir, 'last_checkpoint'), 'w') as f:
            f.write(ckpts[pe])
    return work_dir, ckpts


def test_demo_work_dir_evaluates_the_demo_checkpoints(tmp_path):
    """--demo-work-dir trains nothing: it evaluates the demo's sine and PEG checkpoints with
    their dumped configs on their val set, in our models and in mmdet's, batch 1 vs 4."""
    tool = load_tool('analysis/batch_consistency.py', 'mmposenc_batch_consistency_demo')
    work_dir, ckpts = _fake_demo_run(tmp_path)
    rows = tool.main(['--demo-work-dir', str(work_dir), '--work-dir', str(tmp_path / 'unused'),
                      '--out', str(tmp_path / 'rows.json')])
    assert not (tmp_path / 'unused').exists()  # nothing trained
    by_model = {r['model']: r for r in rows}
    assert set(by_model) == {'PEG (ours)', 'sine (ours)', 'sine, stock mmdet',
                             'PEG (ours), ChannelMapper'}
    assert {r['detector'] for r in rows} == {'deformable-detr'}
    for name, pe in (('PEG (ours)', 'peg'), ('PEG (ours), ChannelMapper', 'peg'),
                     ('sine (ours)', 'sine'), ('sine, stock mmdet', 'sine')):
        assert by_model[name]['checkpoint'] == ckpts[pe]
        assert by_model[name]['iters'] == 2500 and by_model[name]['num_val'] == 4
    for name in ('PEG (ours)', 'sine (ours)'):
        assert by_model[name]['score_gap_equal_backbone'] <= 1e-5
    for name in ('sine, stock mmdet', 'PEG (ours), ChannelMapper'):
        assert by_model[name]['score_gap_equal_backbone'] > 1e-4
    assert json.load(open(tmp_path / 'rows.json')) == rows


def test_demo_work_dir_without_a_finished_run_says_so(tmp_path):
    tool = load_tool('analysis/batch_consistency.py', 'mmposenc_batch_consistency_missing')
    (tmp_path / 'sine').mkdir()
    with pytest.raises(FileNotFoundError, match=r"'peg' model .*run tools/demo.py first"):
        tool.main(['--demo-work-dir', str(tmp_path)])
