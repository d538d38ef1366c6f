"""tools/analysis/batch_consistency.py --quick: trains, evaluates batch 1 vs 4, and with the
backbone run per image our Deformable-DETR gives the same scores in both (mmdet's does not)."""
import importlib.util
import os.path as osp

import pytest

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))


@pytest.mark.slow
def test_quick_run_rows_and_equal_backbone_consistency(tmp_path):
    spec = importlib.util.spec_from_file_location(
        'mmposenc_batch_consistency', osp.join(REPO, 'tools', 'analysis',
                                               'batch_consistency.py'))
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
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
