"""tools/train.py and tools/test.py drive a config end to end: log, checkpoint, metrics, --resume;
``tools/test.py --tta`` and ``tools/analysis/resolution_sweep.py`` on the shipped classifier
configs themselves (issue 19, item 4), by path and through a user config with an
``mmposenc::`` base, made small only by ``--cfg-options`` (ViT-B -> DeiT-Ti width).

mmpretrain's configs keep the data preprocessor (normalisation, BGR -> RGB, ``num_classes``)
at the top level, and mmengine's Runner gives it to the model it builds. ``--tta`` wraps the
model and the sweep built ``cfg.model`` alone: both ran the classifier on raw BGR pixels. The
references of those tests are the classifier as the Runner builds it for a plain test.

The tools' processes of the module are forked from one interpreter (:func:`tool_runs`).
"""
import argparse
import collections
import copy
import glob
import json
import os
import os.path as osp
import pickle
import re

import pytest

from conftest import REPO_ROOT
from forked_runs import run_tools
from tool_files import load_tool

SMOKE = osp.join(REPO_ROOT, 'configs', 'smoke', 'detr_r18_1xb2-8it_coco128.py')
TOOLS = osp.join(REPO_ROOT, 'tools', '')
ANN = 'annotations/instances_train2017.json'
INFO_LINE = (f'{ANN}: no "info" key (pycocotools\' loadRes, which CocoMetric calls, copies '
             'it; add "info": {})')


def _ok(res):
    assert res.returncode == 0, f'{res.args} failed:\n{res.stdout[-3000:]}\n{res.stderr[-5000:]}'
    return res


def _assert_quiet_training_log(out):
    """No line of mmengine's per-parameter optimizer noise and no repeated log record (the
    iteration lines aside): mmdet's DETR-R18 freezes its stem, stage 1 and batch norms; with
    mmengine's own constructor its run logged 46 requires_grad warnings and 60
    paramwise_options lines (mmposenc.SummaryOptimWrapperConstructor,
    tests/test_engine/test_optim_constructor.py)."""
    lines = [re.sub(r'^\d\d/\d\d \d\d:\d\d:\d\d - ', '', ln) for ln in out.splitlines()]
    records = [ln for ln in lines if re.match(r'\S+ - (INFO|WARNING|ERROR) - ', ln)
               and not re.search(r'Iter\(train\)', ln)]
    assert not any('paramwise_options' in ln for ln in lines)
    assert not any('is skipped since its requires_grad=False' in ln for ln in lines)
    repeated = {m: n for m, n in collections.Counter(records).items() if n > 1}
    assert not repeated, repeated
    assert sum('paramwise_cfg: ' in ln for ln in records) == 2  # the backbone key, frozen


def _coco128_options(root):
    root = root.rstrip('/') + '/'
    ann = root + 'annotations/instances_train2017.json'
    return ['--cfg-options', f'data_root={root}', f'train_dataloader.dataset.data_root={root}',
            f'val_dataloader.dataset.data_root={root}',
            f'test_dataloader.dataset.data_root={root}', f'val_evaluator.ann_file={ann}',
            f'test_evaluator.ann_file={ann}']


#: What the tools' processes share (tests/forked_runs.py): imported once, before the forks
PRELOAD = ('torch', 'mmengine.config', 'mmengine.runner', 'mmdet.models', 'mmdet.datasets',
           'mmdet.evaluation', 'mmdet.engine', 'mmdet.visualization', 'mmpretrain.models',
           'mmpretrain.datasets', 'mmpretrain.evaluation')
#: the tests that read the runs on COCO128 (slow: a training); without them (``-m "not slow"``,
#: ``-k``) or without COCO128 the module runs only the refused command lines
COCO128_TESTS = ('test_smoke_train_then_test', 'test_resume_with_nothing_to_resume_says_so_first',
                 'test_allow_partial_load_evaluates_a_checkpoint_that_does_not_fit',
                 'test_mmdets_own_train_tool_stops_before_training')
#: the tests that read the runs of the tools on the shipped classifier configs (real images)
SHIPPED_TESTS = ('test_test_tool_tta_on_a_shipped_config',
                 'test_resolution_sweep_on_a_shipped_config')


def _coco128_runs(root, folder):
    """The runs on COCO128 (see :func:`tool_runs`), from ``folder``."""
    import torch
    root = root.rstrip('/') + '/'
    ckpt = str(folder / 'peg.pth')
    torch.save({'state_dict': {'encoder_pos.proj.0.weight': torch.zeros(256, 1, 3, 3)}}, ckpt)
    # COCO128 without "info" and with a negative-width box: annotation 1774 of image 74 (its
    # images linked)
    bad = folder / 'bad_coco'
    (bad / 'annotations').mkdir(parents=True)
    (bad / 'train2017').symlink_to(root + 'train2017')
    data = json.load(open(root + ANN))
    del data['info']
    assert data['annotations'][0]['id'] == 1774
    data['annotations'][0]['bbox'][2] = -3
    (bad / ANN).write_text(json.dumps(data))
    import mmdet
    mmdet_train = osp.join(osp.dirname(mmdet.__file__), '.mim', 'tools', 'train.py')
    base = [TOOLS + 'train.py', SMOKE, '--work-dir', 'work', '--resume', '--no-validate'] + \
        _coco128_options(root)
    return dict(
        first=(base + ['train_cfg.max_iters=1', 'default_hooks.checkpoint.interval=1'], folder),
        second=(base + ['train_cfg.max_iters=2'], folder),
        test=([TOOLS + 'test.py', SMOKE, str(folder / 'work' / 'iter_2.pth'), '--work-dir',
               'test', '--out', 'preds.pkl'] + _coco128_options(root)
              + ['test_dataloader.dataset.indices=8'], folder),
        partial=(['tools/test.py', SMOKE, ckpt, '--allow-partial-load', '--work-dir',
                  str(folder / 'partial'), '--cfg-options', f'data_root={root}',
                  f'test_dataloader.dataset.data_root={root}',
                  'test_dataloader.dataset.indices=2',
                  f'test_evaluator.ann_file={root}{ANN}'], REPO_ROOT),
        mmdet=([mmdet_train, SMOKE, '--work-dir', str(folder / 'mmdet_work'), '--cfg-options',
                f'train_dataloader.dataset.data_root={bad}/',
                f'val_dataloader.dataset.data_root={bad}/',
                f'val_evaluator.ann_file={bad}/{ANN}', 'train_cfg.max_iters=1',
                'train_cfg.val_interval=10',  # (mmdet would train)
                'default_hooks.logger.interval=1'],  # (and log its iteration)
               folder))


@pytest.fixture(scope='module')
def tool_runs(request, tmp_path_factory):
    """The tools' processes of this module, one after the other, each a fresh process forked
    from one interpreter that imported torch, mmdet and mmpretrain, never mmposenc
    (tests/forked_runs.py; PYTHONPATH unset, as in a user's shell):

    - refused command lines (from the repository root): ``config``, a missing config;
      ``checkpoint``, a missing checkpoint; ``scope``, a config without a host scope;

    where COCO128 is there and a test of COCO128_TESTS runs:

    - ``first``, ``second``: the one training of this module, the shipped smoke config through
      tools/train.py run from a folder outside the repository with ``--resume`` into the
      relative --work-dir ``work``: 1 iteration into the empty work dir, then resumed from the
      first run's checkpoint to 2 iterations (the config's schedule, its logger interval of 2
      and its checkpoint at the end, shortened from 8 iterations: nothing asserted depends on
      their number);
    - ``test``: tools/test.py on the second run's checkpoint (8 images), ``--out`` predictions;
    - ``partial``: tools/test.py ``--allow-partial-load`` on a checkpoint that does not fit;
    - ``mmdet``: mmdet's own tools/train.py (as shipped in its wheel) on the smoke config, with
      COCO128's JSON without its "info" and given a negative-width box;

    and where COCO128 is there and a test of SHIPPED_TESTS runs, ``shipped``: the tools on the
    shipped classifier configs (:func:`_shipped_config_runs`).
    """
    folder = tmp_path_factory.mktemp('user')
    (folder / 'noscope.py').write_text('model = dict(type="mmposenc.PEG", in_channels=4)\n')
    runs = dict(config=(['tools/train.py', str(folder / 'nope.py')], REPO_ROOT),
                checkpoint=(['tools/test.py', SMOKE, str(folder / 'x.pth')], REPO_ROOT),
                scope=(['tools/train.py', str(folder / 'noscope.py')], REPO_ROOT))
    wanted = {item.originalname for item in request.session.items
              if item.module is request.module}
    root, cases = None, {}
    if wanted & set(COCO128_TESTS + SHIPPED_TESTS):
        try:
            root = request.getfixturevalue('coco128_root')
        except pytest.skip.Exception:
            pass  # those tests skip on their own coco128_root
    if root is not None and wanted & set(COCO128_TESTS):
        runs.update(_coco128_runs(root, folder))
    if root is not None and wanted & set(SHIPPED_TESTS):
        cases = _shipped_config_runs(root, tmp_path_factory)
        runs.update({case: (c['argv'], c['folder']) for case, c in cases.items()})
    env = {k: v for k, v in os.environ.items() if k != 'PYTHONPATH'}
    done = run_tools([dict(argv=argv, cwd=str(cwd)) for argv, cwd in runs.values()],
                     preload=PRELOAD, env=env)
    out = dict(zip(runs, done), folder=folder, shipped=cases)
    for case in cases:
        cases[case]['res'] = out.pop(case)
    logs = sorted(glob.glob(str(folder / 'work' / '*' / '*.log')))
    if len(logs) == 2:  # the runs' timestamped folders, in order
        out['first_log'], out['second_log'] = (open(log).read() for log in logs)
    return out


@pytest.fixture
def smoke_runs(coco128_root, tool_runs):
    """:func:`tool_runs` with the runs on COCO128."""
    return tool_runs


@pytest.mark.slow
def test_smoke_train_then_test(smoke_runs):
    """The shipped smoke config through tools/train.py and tools/test.py, run from a folder
    outside the repository: the last iteration logged, the checkpoint, predictions and a real
    bbox_mAP; the training logs are quiet (both runs of this module's training; one training
    for this and what test_optim_constructor.py's training run checked before)."""
    for run in ('first', 'second'):
        _assert_quiet_training_log(_ok(smoke_runs[run]).stdout + smoke_runs[run].stderr)
    folder = smoke_runs['folder']
    assert osp.isfile(folder / 'work' / 'iter_2.pth'), sorted(glob.glob(f'{folder}/work/*'))
    assert 'Iter(train) [2/2]' in smoke_runs['second_log']
    _ok(smoke_runs['test'])
    assert osp.isfile(folder / 'preds.pkl')
    # the test run writes its metrics as json: a real bbox_mAP from pycocotools
    metric_files = sorted(glob.glob(str(folder / 'test' / '*' / '*.json')))
    metrics = json.load(open(metric_files[-1]))
    assert 'coco/bbox_mAP' in metrics and 0.0 <= metrics['coco/bbox_mAP'] <= 1.0


@pytest.mark.slow
def test_resume_with_nothing_to_resume_says_so_first(smoke_runs):
    """The shipped smoke config with --resume into an empty work dir: the log's first line
    says there is nothing to resume (not mmengine's 'Auto resumed from the latest checkpoint
    None' after the config); the second run resumes from the first one's checkpoint."""
    _ok(smoke_runs['first'])
    _ok(smoke_runs['second'])
    first = smoke_runs['first_log'].splitlines()[0]
    assert first.rstrip().endswith('--resume: nothing to resume in work (no '
                                   'last_checkpoint), training from scratch'), first
    assert 'Auto resumed' not in smoke_runs['first_log']
    text = smoke_runs['second_log']
    assert 'nothing to resume' not in text and 'resumed epoch: 0, iter: 1' in text


@pytest.mark.slow
def test_allow_partial_load_evaluates_a_checkpoint_that_does_not_fit(smoke_runs):
    """Without the flag this checkpoint is an error (tests/test_reliability/test_bad_inputs.py
    'test-tool-weights-do-not-fit'); with it the tool evaluates and says what did not load."""
    res = _ok(smoke_runs['partial'])
    log = res.stdout + res.stderr
    assert '--allow-partial-load: ' in log and 'unexpected keys (encoder_pos.proj.0.weight)' in log
    metric_files = sorted(glob.glob(str(smoke_runs['folder'] / 'partial' / '*' / '*.json')))
    assert 'coco/bbox_mAP' in json.load(open(metric_files[-1]))


@pytest.mark.slow
def test_mmdets_own_train_tool_stops_before_training(smoke_runs):
    """mmdet's tools/train.py as shipped in its wheel (Runner.from_cfg, then train()), in a
    fresh process, on the shipped smoke config with a JSON without "info" (a KeyError in
    pycocotools after training, before the check) and a negative-width box: one error, on one
    line, naming both problems of the dataset check (mmposenc.CheckedCocoDataset,
    tests/test_datasets/test_dataset_check.py), before any iteration."""
    res = smoke_runs['mmdet']
    out = res.stdout + res.stderr
    assert res.returncode != 0
    bad = smoke_runs['folder'] / 'bad_coco'
    # the traceback's last line: the error's one line, each file by its full path
    assert out.strip().splitlines()[-1] == (
        'mmposenc.datasets.dataset_check.DatasetCheckError: dataset check of '
        f'CheckedCocoDataset ({bad}/{ANN}): 2 problem(s): {bad}/{INFO_LINE}; {bad}/{ANN}: '
        'annotation id 1774 (image 74): bbox width -3 <= 0 (fix the data; '
        'tools/misc/check_dataset.py CONFIG lists every problem, see its --help)'), out[-3000:]
    assert 'Iter(train)' not in out and 'Saving checkpoint' not in out


def test_train_rejects_missing_config(tool_runs):
    res = tool_runs['config']
    assert res.returncode != 0 and 'does not exist' in res.stderr


def test_test_rejects_missing_checkpoint(tool_runs):
    res = tool_runs['checkpoint']
    assert res.returncode != 0 and 'x.pth does not exist' in res.stderr


def test_config_without_host_scope_is_rejected(tool_runs):
    res = tool_runs['scope']
    assert res.returncode != 0 and "default_scope=None" in res.stderr


def test_tools_take_a_packages_config_by_its_base_name():
    """``mmposenc::`` / ``mmdet::`` on the command line (load_config, so tools/train.py,
    tools/test.py and the analysis tools): the same config as its file, work dir by file name."""
    from mmposenc.utils.tools.runner import load_config
    name = 'peg_dino/dino-4scale-peg_r50_8xb2-12e_coco.py'
    by_name = load_config(f'mmposenc::{name}', dict(model=dict(num_queries=7)))
    by_path = load_config(osp.join(REPO_ROOT, 'configs', name), dict(model=dict(num_queries=7)))
    assert by_name.to_dict() == by_path.to_dict()
    assert by_name.work_dir == './work_dirs/dino-4scale-peg_r50_8xb2-12e_coco'
    stock = load_config('mmdet::dino/dino-4scale_r50_8xb2-12e_coco.py')
    assert stock.model.type == 'DINO' and stock.default_scope == 'mmdet'
    batch_size_eval = load_tool('analysis/batch_size_eval.py')
    off = batch_size_eval.load_cfg(f'off:mmposenc::{name}', '/tmp/unused')
    assert off.model.type == 'mmposenc.PEGDINO' and off.model.padding_exact is False


def test_amp_picks_a_wrapper_that_runs_here():
    from mmposenc.engine import amp_optim_wrapper_type
    import torch
    expected = 'AmpOptimWrapper' if torch.cuda.is_available() else 'mmposenc.BF16OptimWrapper'
    assert amp_optim_wrapper_type() == expected


def _train_tool():
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        'mmposenc_tools_train', osp.join(REPO_ROOT, 'tools', 'train.py'))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize('cuda', [False, True])
def test_amp_converts_a_wrapper_config_of_the_other_kind(cuda, monkeypatch):
    """--amp on an fp16 config (mmdet's / mmseg's ``AmpOptimWrapper`` with ``loss_scale``) on a
    CPU machine gives a BF16OptimWrapper that builds (no AmpOptimWrapper-only arguments left),
    and on a CUDA machine a BF16OptimWrapper config gives an AmpOptimWrapper without
    ``device_type``; a plain OptimWrapper config gets dynamic loss scaling on CUDA."""
    import torch
    from mmengine.config import Config
    monkeypatch.setattr(torch.cuda, 'is_available', lambda: cuda)
    train = _train_tool()
    sgd = dict(type='SGD', lr=0.1)
    if cuda:
        cfg = Config(dict(optim_wrapper=dict(type='mmposenc.BF16OptimWrapper', device_type='cpu',
                                             optimizer=sgd, clip_grad=None)))
        train.apply_amp(cfg)
        assert cfg.optim_wrapper.to_dict() == dict(type='AmpOptimWrapper', optimizer=sgd,
                                                   clip_grad=None, loss_scale='dynamic')
        cfg = Config(dict(optim_wrapper=dict(type='AmpOptimWrapper', loss_scale=512.,
                                             optimizer=sgd)))
        train.apply_amp(cfg)  # the config's own loss scale stays
        assert cfg.optim_wrapper.to_dict() == dict(type='AmpOptimWrapper', loss_scale=512.,
                                                   optimizer=sgd)
        return
    from mmengine.optim import build_optim_wrapper

    from mmposenc.engine import BF16OptimWrapper
    cfg = Config(dict(optim_wrapper=dict(type='AmpOptimWrapper', loss_scale=512.,
                                         dtype='float16', optimizer=sgd)))
    train.apply_amp(cfg)
    assert cfg.optim_wrapper.to_dict() == dict(type='mmposenc.BF16OptimWrapper', optimizer=sgd)
    wrapper = build_optim_wrapper(torch.nn.Linear(2, 2), cfg.optim_wrapper)
    assert isinstance(wrapper, BF16OptimWrapper)


@pytest.mark.parametrize('checkpoint', [
    'https://download.openmmlab.com/mmdetection/v3.0/detr/detr.pth', 'torchvision://resnet50',
    'open-mmlab://detectron2/resnet50_caffe'])
def test_test_tool_passes_remote_checkpoints_to_the_runner(checkpoint, monkeypatch):
    """As mmdet's / mmseg's test tools, a URL or ``scheme://`` checkpoint goes to the Runner
    (mmengine's CheckpointLoader downloads it) instead of failing as a missing local file."""
    import importlib.util
    spec = importlib.util.spec_from_file_location('mmposenc_tools_test',
                                                  osp.join(REPO_ROOT, 'tools', 'test.py'))
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    seen = {}

    class FakeRunner:
        def register_hook(self, hook):
            seen['hook'] = hook

        def test(self):
            return {}

    def fake_build_runner(cfg):
        seen['load_from'] = cfg.load_from
        return FakeRunner()

    monkeypatch.setattr(tool, 'build_runner', fake_build_runner)
    assert tool.main([SMOKE, checkpoint]) == {}
    assert seen['load_from'] == checkpoint and 'hook' in seen


# ------------------------------------------------ the tools on the shipped classifier configs
CAPE = 'cape/vit-base-p16_cape_16xb64_in1k.py'
UNIVIT = 'cape/vit-base-p16_cape-univit_16xb64_in1k.py'
CPVT_TI = 'cpvt/cpvt-tiny_4xb256_in1k.py'
#: --cfg-options that make a config small enough for the test (nothing else is changed)
TINY = {CAPE: ['model.backbone.arch=deit-tiny', 'model.head.in_channels=192'],
        UNIVIT: ['model.backbone.arch=deit-tiny', 'model.head.in_channels=192'],
        CPVT_TI: []}
TTA_CASES = [(CAPE, 'path'), (UNIVIT, 'mmposenc::')]
SWEEP_CASES = [(CPVT_TI, 'path'), (CAPE, 'mmposenc::')]


def _config_file(name, how, folder):
    """The shipped config ``name`` by its path, or a user config in ``folder`` that inherits
    it as ``mmposenc::name`` and changes nothing."""
    if how == 'path':
        return osp.join(REPO_ROOT, 'configs', name)
    path = osp.join(str(folder), 'user_config.py')
    with open(path, 'w') as f:
        f.write(f"_base_ = 'mmposenc::{name}'\n")
    return path


def _load(path, options):
    from mmengine.config import Config, DictAction

    import mmposenc  # noqa: F401
    cfg = Config.fromfile(path)
    if options:  # as the tools' --cfg-options
        parsed = argparse.Namespace()
        DictAction(option_strings=[], dest='o')(None, parsed, options)
        cfg.merge_from_dict(parsed.o)
    return cfg


def _runner_classifier(cfg, seed=0):
    """The classifier of ``cfg`` as mmengine's Runner builds it for ``tools/test.py``
    without ``--tta`` (the top-level data_preprocessor set on the model)."""
    import torch
    from mmengine.registry import DefaultScope

    import mmposenc.models  # noqa: F401
    from mmposenc.registry import MODELS
    model = copy.deepcopy(cfg.model)
    model.setdefault('data_preprocessor', copy.deepcopy(cfg.data_preprocessor))
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        torch.manual_seed(seed)
        return MODELS.build(model).eval()


def _imagenet_val(root, images, labels):
    """An ImageNet-layout val split (``val/`` and ``meta/val.txt``) of real images."""
    (root / 'val').mkdir(parents=True)
    (root / 'meta').mkdir()
    lines = []
    for img, label in zip(images, labels):
        (root / 'val' / osp.basename(img)).symlink_to(img)
        lines.append(f'{osp.basename(img)} {label}')
    (root / 'meta' / 'val.txt').write_text('\n'.join(lines) + '\n')
    return str(root)


def _coco_images(coco128_root, n):
    return sorted(glob.glob(osp.join(coco128_root, 'train2017', '*.jpg')))[:n]


def _compose(pipeline):
    from mmengine.dataset import Compose
    from mmengine.registry import DefaultScope
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        return Compose(copy.deepcopy(pipeline))


def _tool(name, path):
    import importlib.util
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _shipped_config_runs(coco128_root, tmp_path_factory):
    """The tools on the shipped configs, from the user's folders: ``tools/test.py --tta`` per
    TTA_CASES and ``resolution_sweep.py`` per SWEEP_CASES (runs of :func:`tool_runs`).
    {'tta' | 'sweep', name, how): dict(argv=, cfg=, clf=, images=, folder=)}."""
    import torch
    cases = {}
    for kind, name, how in [('tta', *c) for c in TTA_CASES] + [('sweep', *c) for c in
                                                                SWEEP_CASES]:
        folder = tmp_path_factory.mktemp(kind)
        config = _config_file(name, how, folder)
        options = TINY[name]
        cfg = _load(config, options)
        clf = _runner_classifier(cfg)
        ckpt = folder / 'clf.pth'
        if kind == 'tta':
            images = _coco_images(coco128_root, 4)
            data_root = _imagenet_val(folder / 'imagenet', images, [0, 1, 2, 3])
            torch.save({'state_dict': clf.state_dict(), 'meta': {}}, ckpt)
            argv = [osp.join(TOOLS, 'test.py'), config, str(ckpt), '--tta', '--out',
                    str(folder / 'preds.pkl'), '--work-dir', 'work', '--cfg-options', *options,
                    f'test_dataloader.dataset.data_root={data_root}',
                    'test_dataloader.batch_size=2', 'test_dataloader.num_workers=0',
                    'test_dataloader.persistent_workers=False']
        else:
            images = _coco_images(coco128_root, 6)
            test = _compose(cfg.test_dataloader.dataset.pipeline)
            with torch.no_grad():
                labels = [int(clf(clf.data_preprocessor(
                    dict(inputs=[test(dict(img_path=i))['inputs']]), False)['inputs'],
                    mode='tensor')[0].argmax()) for i in images]
            data_root = _imagenet_val(folder / 'imagenet', images, labels)
            torch.save({'state_dict': clf.state_dict()}, ckpt)
            argv = [osp.join(TOOLS, 'analysis', 'resolution_sweep.py'), config, str(ckpt),
                    '--resolutions', '224', '160', '--data-root', data_root, '--out',
                    'sweep/plot.png', '--batch-size', '3'] + (
                        ['--cfg-options', *options] if options else [])
        cases[(kind, name, how)] = dict(argv=argv, cfg=cfg, clf=clf, images=images,
                                        folder=folder)
    return cases


@pytest.mark.parametrize('name', [CAPE, UNIVIT])
def test_tta_gives_the_classifier_the_configs_data_preprocessor(name):
    """``apply_tta`` on the shipped TTA configs: the wrapped classifier gets the config's
    top-level data_preprocessor (mean, std, BGR -> RGB, num_classes)."""
    tool = _tool('mmposenc_test_tool', osp.join(TOOLS, 'test.py'))
    cfg = _load(osp.join(REPO_ROOT, 'configs', name), [])
    preprocessor = copy.deepcopy(cfg.data_preprocessor)
    assert preprocessor.mean and preprocessor.std and preprocessor.to_rgb
    tool.apply_tta(cfg, name)
    assert cfg.model.module.data_preprocessor == preprocessor


def test_sweep_builds_the_classifier_with_the_configs_data_preprocessor(tmp_path):
    """The sweep's model normalises and flips BGR -> RGB as the config says."""
    import torch
    sweep = _tool('mmposenc_resolution_sweep', osp.join(TOOLS, 'analysis',
                                                         'resolution_sweep.py'))
    cfg = _load(osp.join(REPO_ROOT, 'configs', CPVT_TI), [])
    ckpt = str(tmp_path / 'clf.pth')
    torch.save({'state_dict': _runner_classifier(cfg).state_dict()}, ckpt)
    pre = sweep.build_model(cfg, ckpt).data_preprocessor
    assert pre.to_rgb is True
    torch.testing.assert_close(pre.mean.flatten(), torch.tensor(cfg.data_preprocessor.mean))
    torch.testing.assert_close(pre.std.flatten(), torch.tensor(cfg.data_preprocessor.std))


@pytest.fixture
def shipped_runs(coco128_root, tool_runs):
    """The runs of :func:`tool_runs` on the shipped classifier configs, by case."""
    return tool_runs['shipped']


@pytest.mark.slow  # real images, the tool in a fresh process
@pytest.mark.parametrize('name,how', TTA_CASES)
def test_test_tool_tta_on_a_shipped_config(name, how, shipped_runs):
    """``tools/test.py CONFIG CKPT --tta`` run from the user's folder: the dumped scores are
    the softmax of the mean logits, over the config's tta_pipeline views of each image, of
    the classifier as a plain test builds it (its data preprocessor on every view)."""
    import torch
    case = shipped_runs[('tta', name, how)]
    res, cfg, clf, images = case['res'], case['cfg'], case['clf'], case['images']
    assert res.returncode == 0, res.stderr[-4000:]
    dumped = pickle.load(open(case['folder'] / 'preds.pkl', 'rb'))
    assert len(dumped) == len(images)
    views = _compose(cfg.tta_pipeline)
    with torch.no_grad():
        for item, img in zip(dumped, images):
            inputs = views(dict(img_path=img))['inputs']
            assert len(inputs) == 3
            logits = sum(clf(clf.data_preprocessor(dict(inputs=[v]), False)['inputs'],
                             mode='tensor')[0] for v in inputs) / len(inputs)
            torch.testing.assert_close(item['pred_score'], logits.softmax(-1), atol=1e-5,
                                       rtol=1e-4)


@pytest.mark.slow  # real images, the tool in a fresh process
@pytest.mark.parametrize('name,how', SWEEP_CASES)
def test_resolution_sweep_on_a_shipped_config(name, how, shipped_runs):
    """The sweep at the config's own test resolution (224) agrees with the classifier as a
    plain test builds it: the labels are that classifier's predictions on the config's test
    pipeline, so the sweep's top-1 at 224 is 100 %; outputs go to the user's --out."""
    case = shipped_runs[('sweep', name, how)]
    res = case['res']
    assert res.returncode == 0, res.stderr[-4000:]
    assert '224: top-1 100.00 % on 6' in res.stdout, res.stdout[-2000:]
    assert (case['folder'] / 'sweep' / 'plot.png').is_file()
    assert (case['folder'] / 'sweep' / 'plot.json').is_file()
