"""projects/detection_resolution (issue 23.2) and tools/analysis/detection_scales.py: the
test-scale specs, the rewrite
of the shipped shapes configs' test pipeline (run by mmdet's transforms on a generated image),
the variants' encodings, the report rebuilt from stored run files in a fresh process, the
MSDA switch, and one quick end-to-end run (a failed GPU run retried on the CPU, evaluated at
two scales, resumed, its checkpoint evaluated by the tool)."""
import json
import os.path as osp
import shutil
import subprocess

import pytest
import torch

from conftest import REPO_ROOT

from tool_files import load_project, load_tool, project_argv, project_env

STUDY = 'detection_resolution.detection_resolution_study'
study = load_project(STUDY)
scales_tool = load_tool('analysis/detection_scales.py')
DD_SINE = osp.join(REPO_ROOT, 'configs', 'peg_deformable_detr',
                   'deformable-detr-sine_r18-quarter_1xb4-2500i_shapes.py')


@pytest.mark.parametrize('spec, scale', [
    ('0.5', (0.5, 0.5)), ('2', (2.0, 2.0)), (1.25, (1.25, 1.25)), ('1x0.75', (1.0, 0.75)),
    ('0.75X1', (0.75, 1.0))])
def test_parse_scale(spec, scale):
    assert study.parse_scale(spec) == scale
    assert study.parse_scale(study.scale_label(scale)) == scale


@pytest.mark.parametrize('spec', ['0', '-1', 'x', '1x', '1x2x3', 'nan', 'inf', 'big', ''])
def test_parse_scale_refuses(spec):
    with pytest.raises(ValueError, match='S or SXxSY'):
        study.parse_scale(spec)


def test_parse_scales_refuses_duplicates():
    assert study.parse_scales(['1', '0.5']) == [(1.0, 1.0), (0.5, 0.5)]
    with pytest.raises(ValueError, match='given twice'):
        study.parse_scales(['1', '1x1'])


@pytest.mark.parametrize('specs, dd, detr', [
    (None, None, None), (['1500'], 1500, 1500), (['1500', 'DETR=3000'], 1500, 3000),
    (['DETR=3000'], None, 3000), (['DETR=3000', '1000'], 1000, 1000)])
def test_iters_per_family(specs, dd, detr):
    assert study.iters_of(specs, 'Deformable-DETR') == dd
    assert study.iters_of(specs, 'DETR') == detr


@pytest.mark.parametrize('spec', ['0', 'DINO=10', 'DETR=', 'DETR=-5', 'many'])
def test_iters_refuses(spec):
    with pytest.raises(ValueError, match='FAMILY=N'):
        study.iters_of([spec], 'DETR')


@pytest.fixture(scope='module')
def shapes_image(tmp_path_factory):
    """One generated shapes_coco val image (the demo's generator), path and (h, w)."""
    from mmposenc.utils.tools.shapes_coco import make_shapes_coco
    root = make_shapes_coco(str(tmp_path_factory.mktemp('shapes')), num_train=1, num_val=1,
                            min_size=96, max_size=128, seed=0)
    img = json.load(open(osp.join(root, 'annotations', 'instances_val.json')))['images'][0]
    return osp.join(root, 'val', img['file_name']), (img['height'], img['width'])


@pytest.mark.parametrize('spec', ['0.5', '1', '1.5', '2', '1x0.75', '0.75x1'])
def test_shipped_test_pipeline_at_each_scale(shapes_image, spec):
    """The rewritten test pipeline of the shipped config, run by mmdet's transforms: the image
    the model gets is the original resized by the factors, and ``scale_factor`` records them
    (what the heads divide the boxes by)."""
    from mmengine.config import Config
    from mmengine.dataset import Compose
    from mmdet.utils import register_all_modules
    register_all_modules(init_default_scope=True)
    cfg = Config.fromfile(DD_SINE)
    original = cfg.test_dataloader.dataset.pipeline
    pipeline = study.set_test_scale(original, spec)
    assert [s['type'] for s in pipeline] == [s['type'] for s in original]
    path, (h, w) = shapes_image
    out = Compose(pipeline)(dict(img_path=path, img_id=1, instances=[]))
    sx, sy = study.parse_scale(spec)
    assert tuple(out['inputs'].shape[-2:]) == (int(h * sy + 0.5), int(w * sx + 0.5))
    fx, fy = out['data_samples'].scale_factor
    assert fx == pytest.approx(sx, rel=0.02) and fy == pytest.approx(sy, rel=0.02)
    assert original[1]['scale_factor'] == 1.0  # the config's pipeline is not modified


def test_set_test_scale_fixed_size_and_refusals():
    coco = [dict(type='LoadImageFromFile'), dict(type='Resize', scale=(1333, 800),
                                                 keep_ratio=True), dict(type='PackDetInputs')]
    assert study.set_test_scale(coco, '0.5')[1]['scale'] == (666, 400)
    with pytest.raises(ValueError, match='keep_ratio=True'):
        study.set_test_scale(coco, '1x0.75')
    fixed = [dict(coco[1], keep_ratio=False)]
    assert study.set_test_scale(fixed, '1x0.75')[0]['scale'] == (1333, 600)
    with pytest.raises(ValueError, match='no Resize step'):
        study.set_test_scale([dict(type='LoadImageFromFile')], '2')
    with pytest.raises(ValueError, match='RandomResize'):
        study.set_test_scale([dict(type='RandomResize', scale=(64, 64)), coco[1]], '2')


@pytest.mark.parametrize('variant', list(study.VARIANTS))
def test_variant_configs(variant):
    """Each variant is its config file plus the encoding its label names; everything else is
    the shipped shapes config's (data, schedule, optimizer)."""
    family, label, path, _ = study.VARIANTS[variant]
    cfg = study.variant_config(variant)
    expected = {'none': 'none', 'sine': 'sine', 'PEG': 'peg', 'CAPE': 'cape',
                'RoPE-Mixed': 'rope_mixed'}[label]
    assert cfg.model.encoder_pos == expected
    assert cfg.model.type == {'DETR': 'mmposenc.PEGDETR',
                              'Conditional-DETR': 'mmposenc.PEGConditionalDETR',
                              'Deformable-DETR': 'mmposenc.PEGDeformableDETR'}[family]
    assert cfg.train_cfg.max_iters == 2500 and cfg.train_dataloader.batch_size == 4
    assert cfg.test_dataloader.dataset.pipeline[1] == dict(type='Resize', scale_factor=1.0,
                                                          keep_ratio=True)


def _record(variant, seed, aps):
    family, label, config, overrides = study.VARIANTS[variant]
    return dict(variant=variant, family=family, label=label, config=config, seed=seed,
                params=1000, iters=10, batch_size=4, train_wall=5.0, train_cpu=5.0,
                device='cpu', code=dict(commit='0123456789abcdef'),
                scales=[dict(scale=study.scale_label(s), sx=s[0], sy=s[1],
                             metrics={'coco/bbox_mAP': ap}) for s, ap in aps.items()])


def test_report_only_rebuilds_table_and_figure(tmp_path):
    """``--report-only`` in a fresh process, from stored run files: mean ± std over the seeds,
    paired differences to scale 1, columns ordered square by size then non-square."""
    runs = tmp_path / 'runs'
    runs.mkdir()
    data = {('dd-peg', 0): {(1.0, 1.0): 0.60, (0.5, 0.5): 0.30, (2.0, 2.0): 0.40,
                            (1.0, 0.75): 0.50},
            ('dd-peg', 1): {(1.0, 1.0): 0.64, (0.5, 0.5): 0.36, (2.0, 2.0): 0.44,
                            (1.0, 0.75): 0.52},
            ('detr-sine', 0): {(1.0, 1.0): 0.20, (0.5, 0.5): 0.10, (2.0, 2.0): 0.05,
                               (1.0, 0.75): 0.15}}
    for (v, s), aps in data.items():
        (runs / f'{v}__seed{s}.json').write_text(json.dumps(_record(v, s, aps)))
    fig = tmp_path / 'fig' / 'scales.png'
    out = subprocess.run(project_argv(STUDY, '--report-only', '--out-dir', str(tmp_path),
                                      '--figure', str(fig)),
                         capture_output=True, text=True, cwd=tmp_path, env=project_env())
    assert out.returncode == 0, out.stderr[-2000:]
    table = (tmp_path / 'detection_resolution.md').read_text()
    assert '| 0.5 | 1 (train) | 2 | 1x0.75 | mean off-train |' in table
    assert '| Deformable-DETR | PEG | 2 | 33.0 ± 4.2 | 62.0 ± 2.8 | 42.0 ± 2.8 | 51.0 ± 1.4 |' \
        in table
    assert '| Deformable-DETR | PEG | -29.0 ± 1.4 | -20.0 ± 0.0 | -11.0 ± 1.4 |' in table
    assert '| DETR | sine | 1 | 10.0 | 20.0 | 5.0 | 15.0 | 10.0 |' in table
    summary = json.loads((tmp_path / 'detection_resolution.json').read_text())
    assert summary['variants']['dd-peg']['scales']['2']['min'] == pytest.approx(40.0)
    assert fig.stat().st_size > 10000
    empty = subprocess.run(project_argv(STUDY, '--report-only', '--out-dir',
                                        str(tmp_path / 'none')),
                           capture_output=True, text=True, env=project_env())
    assert empty.returncode != 0 and 'no run files' in empty.stderr


def test_msda_pytorch_switch(monkeypatch):
    """``--msda pytorch`` makes mmcv's MultiScaleDeformableAttention take its PyTorch path on
    CUDA tensors (an mmcv built without CUDA ops); on the CPU nothing changes."""
    import mmcv.ops.multi_scale_deform_attn as msda
    monkeypatch.setattr(msda, 'IS_CUDA_AVAILABLE', True)
    assert study.use_msda_pytorch('pytorch', 'cpu') == 'pytorch'
    assert msda.IS_CUDA_AVAILABLE is True
    assert study.use_msda_pytorch('pytorch', 'cuda') == 'pytorch'
    assert msda.IS_CUDA_AVAILABLE is False


def test_quick_study_retry_on_cpu_resume_and_checkpoint(tmp_path, monkeypatch):
    """``--quick`` in a temporary working directory, the demo-sized DETR trained for a few
    iterations and evaluated at scale 1 (added) and 1x0.75. The run starts in the GPU slot
    (``--device cuda --retry-on-cpu``; no CUDA in the workers, CUDA_VISIBLE_DEVICES=''),
    fails there, is started again on the CPU and its record says so; the failed attempt's log
    is kept. (The study's own functions, as ``main`` calls them: the command line refuses
    ``--device cuda`` where there is no CUDA.) Then the command line from the user's folder:
    a second call resumes (nothing to do), makes the data again in the user's data/ and
    rebuilds the report; tools/analysis/detection_scales.py on the run's checkpoint gives the
    study's numbers. (The resuming command line in a fresh process, the tool through ``main`` in
    this one.)"""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv('OMP_NUM_THREADS', '1')
    monkeypatch.setenv('CUDA_VISIBLE_DEVICES', '')  # the GPU slot's worker finds no CUDA
    quick = ['--quick', '--variants', 'detr-rope-mixed', '--seeds', '0', '--scales', '1x0.75',
             '--out-dir', 'out']
    args = study.parse_args(quick + ['--device', 'cuda', '--jobs', '1', '--retry-on-cpu'])
    args.data_dir = study.prepare_data(args.data_dir, quick=True)
    assert study.run_study(args) == []
    rec = json.loads((tmp_path / 'out' / 'runs' / 'detr-rope-mixed__seed0.json').read_text())
    assert [r['scale'] for r in rec['scales']] == ['1', '1x0.75']
    assert all(0 <= r['metrics']['coco/bbox_mAP'] <= 1 for r in rec['scales'])
    assert rec['iters'] == 4 and rec['device'] == 'cpu' and rec['label'] == 'RoPE-Mixed'
    failed_log = (tmp_path / 'out' / 'work' / 'detr-rope-mixed__seed0.cuda-failed.log')
    assert 'torch.cuda.is_available() is False' in failed_log.read_text()
    # the command line: the data made again in the user's data/, the run resumed, the report;
    # the run's checkpoint through the tool: the same numbers as the study's evaluation
    shutil.rmtree(tmp_path / 'data')
    data = 'data/shapes_coco_demo_quick/'
    ann = data + 'annotations/instances_val.json'
    ckpt = tmp_path / 'out' / 'work' / 'detr-rope-mixed__seed0' / 'iter_4.pth'
    again = subprocess.run(project_argv(STUDY, *quick), capture_output=True, text=True,
                           env=project_env())
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert '0 run(s) to do' in again.stdout
    assert (tmp_path / 'data' / 'shapes_coco_demo_quick').is_dir()  # the user's paths
    assert (tmp_path / 'out' / 'detection_resolution.png').is_file()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the study's worker evaluated (--threads 1)
    try:
        scales_tool.main(['--config', osp.join(REPO_ROOT, study.DETR_SHAPES), '--checkpoint',
                    str(ckpt), '--scales', '1x0.75', '1', '--out', 'ckpt.json',
                    '--cfg-options', 'model.encoder_pos=rope_mixed',
                    f'test_dataloader.dataset.data_root={data}',
                    f'test_evaluator.ann_file={ann}'])
    finally:
        torch.set_num_threads(threads)
    rows = json.loads((tmp_path / 'ckpt.json').read_text())['scales']
    assert [r['scale'] for r in rows] == ['1x0.75', '1']
    study_ap = {r['scale']: r['metrics']['coco/bbox_mAP'] for r in rec['scales']}
    assert {r['scale']: r['metrics']['coco/bbox_mAP'] for r in rows} == study_ap


def test_deadline_stops_the_runs_and_the_archive_keeps_the_finished(tmp_path, monkeypatch):
    """``--deadline``: the runs still going are stopped and, with those not started, returned
    as failed; ``--archive`` holds the out-dir's run files and report, not the work dirs."""
    import tarfile
    monkeypatch.chdir(tmp_path)
    args = study.parse_args(['--quick', '--variants', 'detr-sine', 'dd-sine', '--seeds', '0',
                             '--jobs', '1', '--deadline', '1', '--out-dir', 'out',
                             '--archive', 'back/h7.tar.gz'])
    args.data_dir = str(tmp_path)  # not read: the runs are stopped first
    assert study.run_study(args) == [('detr-sine', 0), ('dd-sine', 0)]
    assert not (tmp_path / 'out' / 'runs').exists()
    (tmp_path / 'out' / 'runs').mkdir(parents=True)
    (tmp_path / 'out' / 'runs' / 'dd-sine__seed0.json').write_text(
        json.dumps(_record('dd-sine', 0, {(1.0, 1.0): 0.5, (0.5, 0.5): 0.25})))
    study.write_archive(args.out_dir, args.archive)
    with tarfile.open(tmp_path / 'back' / 'h7.tar.gz') as tar:
        names = tar.getnames()
    assert 'out/runs/dd-sine__seed0.json' in names
    assert not any('/work/' in n for n in names)
