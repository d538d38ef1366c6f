"""projects/batch_exact_map (study 8, issue 33.1): the CPU-scale configs keep every class and
padding-exact switch of the shipped ones, and one quick run through the standard tools."""
import json
import os.path as osp
import subprocess

import pytest

from conftest import REPO_ROOT

from tool_files import load_project, project_argv, project_env

STUDY = 'batch_exact_map.batch_exact_map'
study = load_project(STUDY)


def types(node, path=''):
    """Every ``type`` (and ``padding_exact`` switch) in a config dict, by its key path."""
    found = {}
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ('type', 'padding_exact'):
                found[f'{path}.{key}'] = value
            found.update(types(value, f'{path}.{key}'))
    elif isinstance(node, (list, tuple)):
        for i, value in enumerate(node):
            found.update(types(value, f'{path}[{i}]'))
    return found


@pytest.mark.parametrize('label', sorted(study.FAMILIES))
def test_cpu_scale_keeps_the_shipped_classes(label, coco128_root):
    from mmposenc.utils.tools.runner import load_config
    path = osp.join(REPO_ROOT, study.FAMILIES[label])
    shipped = load_config(path, work_dir='/tmp/unused')
    cfg = load_config(path, work_dir='/tmp/unused')
    study.cpu_scale(cfg, coco128_root, iters=10, batch_size=2)
    before, after = types(shipped.model.to_dict()), types(cfg.model.to_dict())
    assert before.pop('.backbone.init_cfg.type') == 'Pretrained'  # from scratch: no download
    if label == 'mask2former':  # its 1024 x 1024 training pad only
        assert before.pop('.data_preprocessor.batch_augments[0].type') == 'BatchFixedSizePad'
    assert after == before
    assert cfg.model.get('padding_exact', True) is not False
    # the test images are resized to the study's scale, nothing else of the test pipeline moves
    test = [t.to_dict() if hasattr(t, 'to_dict') else t
            for t in cfg.test_dataloader.dataset.pipeline]
    ref = [t.to_dict() if hasattr(t, 'to_dict') else t
           for t in shipped.test_dataloader.dataset.pipeline]
    for t in ref:
        if t['type'] == 'Resize':
            t['scale'] = study.SCALE
    assert test == ref
    assert cfg.train_cfg.max_iters == 10 and cfg.val_cfg is None


def test_published_tables_are_the_committed_rows():
    """The table in results/, the study's README and the padding-exact guide is the driver's
    table of the committed rows (results/runs/*.json, one per family and switch, in FAMILIES
    order): a number edited by hand, or a row without its run, fails here."""
    results = osp.join(REPO_ROOT, 'projects', 'batch_exact_map', 'results')
    rows = []
    for label in study.FAMILIES:
        for suffix in ('', '__off'):
            path = osp.join(results, 'runs', f'{label}{suffix}.json')
            if osp.isfile(path):
                with open(path) as f:
                    rows.append(json.load(f))
    assert {r['shipped'] for r in rows} == set(study.FAMILIES.values())  # every family run
    table = study.table(rows)
    with open(osp.join(results, 'batch_exact_map.md')) as f:
        assert f.read() == table
    for page in ('projects/batch_exact_map/README.md', 'docs/user_guides/padding_exact_eval.md'):
        with open(osp.join(REPO_ROOT, page)) as f:
            assert table in f.read(), page


@pytest.mark.slow
def test_quick_run_through_the_tools(tmp_path, coco128_root):
    out = tmp_path / 'out'
    subprocess.run(project_argv(STUDY, '--quick', '--out-dir', str(out), '--data-root',
                                coco128_root),
                   cwd=tmp_path, env=project_env(), check=True, capture_output=True)
    rows = json.loads((out / 'batch_exact_map.json').read_text())
    assert [(r['model'], r['switch']) for r in rows] == [('detr', 'on'), ('detr (off)', 'off')]
    assert rows[1]['config'] == 'off:' + rows[0]['config']
    assert rows[0]['checkpoint'] == rows[1]['checkpoint'] and rows[0]['iters'] == 2
    runs = rows[0]['runs']
    assert [r['batch_size'] for r in runs] == [1, 2]
    assert all(r['images'] == 4 and r['same_images'] == 4 and r['labels_equal'] for r in runs)
    assert runs[1]['max_score_diff'] <= 1e-4 and runs[1]['mAP'] == runs[0]['mAP']
    assert (out / 'configs' / 'detr.py').is_file() and (out / 'detr' / 'iter_2.pth').is_file()
    table = (out / 'batch_exact_map.md').read_text()
    assert '| detr (`configs/peg_detr/detr-peg_r50_16xb2-50e_coco.py`) | 2 |' in table
    assert '| detr (off) (`configs/peg_detr/detr-peg_r50_16xb2-50e_coco.py`) | same weights |' \
        in table
    # --reevaluate: the same checkpoint tested again, its training's seconds kept
    subprocess.run(project_argv(STUDY, '--quick', '--reevaluate', '--out-dir', str(out),
                                '--data-root', coco128_root),
                   cwd=tmp_path, env=project_env(), check=True, capture_output=True)
    again = json.loads((out / 'batch_exact_map.json').read_text())
    assert [r['train_seconds'] for r in again] == [r['train_seconds'] for r in rows]
    assert [[x['mAP'] for x in r['runs']] for r in again] == \
        [[x['mAP'] for x in r['runs']] for r in rows]
    assert again != rows  # evaluated again: other test-loop seconds
    # resumed: the row file is read back, nothing is trained or evaluated again
    (out / 'detr' / 'iter_2.pth').unlink()
    subprocess.run(project_argv(STUDY, '--quick', '--out-dir', str(out), '--data-root',
                                coco128_root),
                   cwd=tmp_path, env=project_env(), check=True, capture_output=True)
    assert json.loads((out / 'batch_exact_map.json').read_text()) == again
