"""Local checkpoints load safely (``weights_only=True`` plus a small allowlist) by default.

mmengine Runner checkpoints (message hub with ``HistoryBuffer`` and numpy), ``--resume``
checkpoints and the converters' outputs load; a pickle that would run code is refused, names
its globals and the opt-in, and does not run; ``MMPOSENC_UNSAFE_LOAD=1`` is the only way to
unpickle arbitrary objects.
"""
import argparse
import os
import os.path as osp

import numpy as np
import pytest
import torch
import torch.nn as nn
from mmengine.runner.checkpoint import CheckpointLoader, _load_checkpoint

import mmposenc  # noqa: F401  (registers the loader)
from mmposenc.engine import (InvalidCheckpointError, UnsafeCheckpointError,
                             load_local_checkpoint)
from mmposenc.engine.checkpoint import UNSAFE_LOAD_ENV


class _ToyModel(nn.Module):
    """A BaseModel-like regressor: loss in 'loss' mode, predictions otherwise."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(2, 1)

    def forward(self, inputs, data_samples=None, mode='tensor'):
        out = self.fc(inputs)
        if mode == 'loss':
            return dict(loss=(out - data_samples).pow(2).mean())
        return out


def _runner(work_dir, max_iters, **kwargs):
    """An mmengine Runner as our tools build it: AdamW, LinearLR + MultiStepLR (a Counter in
    the checkpoint), validation whose metric is a numpy float (as CocoMetric / IoUMetric give),
    best-checkpoint saving."""
    from mmengine.evaluator import BaseMetric
    from mmengine.model import BaseModel
    from mmengine.runner import Runner

    class Model(BaseModel):
        def __init__(self):
            super().__init__()
            self.toy = _ToyModel()

        def forward(self, inputs, data_samples=None, mode='tensor'):
            return self.toy(inputs, data_samples, mode)

    class Metric(BaseMetric):
        def process(self, data_batch, data_samples):
            self.results.append(float(torch.as_tensor(data_samples).float().mean()))

        def compute_metrics(self, results):
            return dict(score=np.float64(np.mean(results)))

    data = [(torch.rand(2), torch.rand(1)) for _ in range(4)]
    loader = dict(dataset=data, sampler=dict(type='DefaultSampler', shuffle=False),
                  batch_size=2, collate_fn=dict(type='default_collate'))
    return Runner(
        model=Model(), work_dir=work_dir, train_dataloader=loader, val_dataloader=loader,
        val_evaluator=[Metric()], train_cfg=dict(by_epoch=False, max_iters=max_iters,
                                               val_interval=2),
        val_cfg=dict(), optim_wrapper=dict(optimizer=dict(type='AdamW', lr=1e-2)),
        param_scheduler=[dict(type='LinearLR', start_factor=0.5, by_epoch=False, end=2),
                         dict(type='MultiStepLR', by_epoch=False, milestones=[3], end=8)],
        default_hooks=dict(checkpoint=dict(type='CheckpointHook', interval=2, by_epoch=False,
                                           save_best='score', rule='greater')),
        default_scope='mmengine', experiment_name=f'toy_{max_iters}_{id(data)}', **kwargs)


@pytest.fixture(scope='module')
def runner_checkpoint(tmp_path_factory):
    from mmengine.registry import DefaultScope
    work_dir = str(tmp_path_factory.mktemp('runner'))
    # module scope runs outside conftest's per-test default-scope isolation: restore it here
    saved = DefaultScope._instance_dict.copy()
    try:
        _runner(work_dir, max_iters=2).train()
    finally:
        DefaultScope._instance_dict.clear()
        DefaultScope._instance_dict.update(saved)
    return work_dir


def test_runner_checkpoint_loads_safely(runner_checkpoint, monkeypatch):
    monkeypatch.delenv(UNSAFE_LOAD_ENV, raising=False)
    path = osp.join(runner_checkpoint, 'iter_2.pth')
    # torch's own default refuses it: the reason for the allowlist
    with pytest.raises(Exception, match='Weights only load failed'):
        torch.load(path)
    calls = []
    real_load = torch.load
    monkeypatch.setattr(torch, 'load', lambda *a, **k: calls.append(k) or real_load(*a, **k))
    ckpt = _load_checkpoint(path, map_location='cpu')
    assert calls and all(k['weights_only'] is True for k in calls)
    assert set(ckpt) >= {'state_dict', 'message_hub', 'optimizer', 'param_schedulers', 'meta'}
    loss = ckpt['message_hub']['log_scalars']['train/loss']
    assert len(loss.data[0]) == 2 and np.isfinite(loss.mean())
    assert isinstance(ckpt['message_hub']['runtime_info']['best_score'], np.float64)
    best = [f for f in os.listdir(runner_checkpoint) if f.startswith('best_')]
    assert best and 'state_dict' in _load_checkpoint(osp.join(runner_checkpoint, best[0]))


def test_resume_checkpoint_loads_safely(runner_checkpoint, tmp_path, monkeypatch):
    """``--resume`` restores the model, the optimizer, the schedulers and the message hub."""
    monkeypatch.delenv(UNSAFE_LOAD_ENV, raising=False)
    path = osp.join(runner_checkpoint, 'iter_2.pth')
    runner = _runner(str(tmp_path), max_iters=3, resume=True, load_from=path)
    runner.train()
    assert runner.iter == 3
    assert len(runner.message_hub.get_scalar('train/loss').data[0]) == 3
    saved = _load_checkpoint(path)['state_dict']
    assert not torch.equal(runner.model.state_dict()['toy.fc.weight'], saved['toy.fc.weight'])


def test_pickle_that_runs_code_is_refused(tmp_path, monkeypatch):
    monkeypatch.delenv(UNSAFE_LOAD_ENV, raising=False)
    marker = tmp_path / 'ran'

    class Payload:
        def __reduce__(self):
            return os.system, (f'touch {marker}', )

    path = str(tmp_path / 'evil.pth')
    torch.save({'state_dict': {'w': torch.ones(1)}, 'meta': Payload()}, path)
    with pytest.raises(UnsafeCheckpointError,
                       match=r'refusing to load .*evil\.pth: it names globals outside the safe '
                       r'allowlist: (posix|nt)\.system .*set MMPOSENC_UNSAFE_LOAD=1'):
        _load_checkpoint(path)
    assert not marker.exists()


def test_allowed_getattr_reaches_only_history_buffer_statistics(tmp_path, monkeypatch):
    """The allowlist holds ``builtins.getattr`` for Runner checkpoints (HistoryBuffer pickles
    its statistics methods that way); any other attribute, or any other object, is refused."""
    from collections import OrderedDict

    from mmengine.logging import HistoryBuffer
    monkeypatch.delenv(UNSAFE_LOAD_ENV, raising=False)

    class Getattr:
        def __init__(self, obj, name):
            self.obj, self.name = obj, name

        def __reduce__(self):
            return getattr, (self.obj, self.name)

    path = str(tmp_path / 'getattr.pth')
    torch.save({'meta': Getattr(HistoryBuffer, 'mean')}, path)
    assert _load_checkpoint(path)['meta'] is HistoryBuffer.mean
    for obj, name in ((HistoryBuffer, '__init__'), (HistoryBuffer, 'update'),
                      (OrderedDict, 'fromkeys')):  # OrderedDict: in torch's own safe set
        torch.save({'meta': Getattr(obj, name)}, path)
        with pytest.raises(UnsafeCheckpointError,
                           match=rf"refusing getattr\({obj.__name__}, '{name}'\).*"
                           'MMPOSENC_UNSAFE_LOAD=1'):
            _load_checkpoint(path)


def test_unsafe_load_is_an_explicit_opt_in(tmp_path, monkeypatch):
    path = str(tmp_path / 'namespace.pth')
    torch.save({'args': argparse.Namespace(lr=0.1)}, path)
    monkeypatch.delenv(UNSAFE_LOAD_ENV, raising=False)
    with pytest.raises(UnsafeCheckpointError, match=r'argparse\.Namespace'):
        load_local_checkpoint(path)
    # a converter may allow a known-harmless global for one file
    assert load_local_checkpoint(path, extra_safe_globals=[argparse.Namespace])['args'].lr == 0.1
    monkeypatch.setenv(UNSAFE_LOAD_ENV, '1')
    assert _load_checkpoint(path)['args'].lr == 0.1


def test_not_a_checkpoint(tmp_path):
    text = tmp_path / 'notes.pth'
    text.write_text('not a checkpoint\n')
    with pytest.raises(InvalidCheckpointError, match=r'notes\.pth is not a PyTorch checkpoint'):
        _load_checkpoint(str(text))
    empty = tmp_path / 'empty.pth'
    empty.write_bytes(b'')
    with pytest.raises(InvalidCheckpointError, match='the file is empty'):
        _load_checkpoint(str(empty))
    truncated = tmp_path / 'truncated.pth'
    torch.save({'w': torch.ones(1000)}, tmp_path / 'full.pth')
    truncated.write_bytes((tmp_path / 'full.pth').read_bytes()[:300])
    with pytest.raises(InvalidCheckpointError, match='truncated.pth is not a'):
        _load_checkpoint(str(truncated))


def test_loader_is_registered_for_local_paths(tmp_path):
    assert CheckpointLoader._get_checkpoint_loader(str(tmp_path / 'x.pth')) \
        is load_local_checkpoint
    with pytest.raises(FileNotFoundError, match='x.pth can not be found'):
        _load_checkpoint(str(tmp_path / 'x.pth'))


def test_allowlist_is_scoped_to_our_loader(runner_checkpoint):
    """Loading through mmposenc leaves torch's allowlist as it was (a set in torch: its list's
    order follows hashing, and changed after a load on torch 2.12, same entries)."""
    from torch.serialization import get_safe_globals
    before = list(get_safe_globals())
    _load_checkpoint(osp.join(runner_checkpoint, 'iter_2.pth'))
    after = list(get_safe_globals())
    assert len(after) == len(before) and set(after) == set(before)
    with pytest.raises(Exception, match='Weights only load failed'):
        torch.load(osp.join(runner_checkpoint, 'iter_2.pth'))


@pytest.fixture
def torch_allowlist():
    """torch's process-wide ``weights_only`` allowlist, restored after the test."""
    from torch.serialization import add_safe_globals, clear_safe_globals, get_safe_globals
    saved = list(get_safe_globals())
    yield
    clear_safe_globals()
    add_safe_globals(saved)


def test_users_own_safe_globals_survive_our_loads(tmp_path, torch_allowlist, monkeypatch):
    """A user's ``add_safe_globals`` entries that our allowlist also holds stay registered
    after a load (``torch.serialization.safe_globals``' exit would remove them), and their
    own ``weights_only`` loads keep working."""
    from torch.serialization import add_safe_globals, get_safe_globals
    monkeypatch.delenv(UNSAFE_LOAD_ENV, raising=False)
    path = str(tmp_path / 'numpy.pth')
    torch.save({'a': np.arange(3)}, path)
    # the array's own reconstructor, by the name its pickle uses (numpy.core.multiarray in
    # numpy 1, numpy._core.multiarray in numpy 2)
    reconstruct = np.arange(3).__reduce__()[0]
    user = [np.ndarray, np.dtype,
            (reconstruct, f'{reconstruct.__module__}.{reconstruct.__name__}'),
            type(np.dtype(np.int64))]
    add_safe_globals(user)
    before = set(get_safe_globals())
    assert load_local_checkpoint(path)['a'].tolist() == [0, 1, 2]
    assert set(get_safe_globals()) == before
    assert torch.load(path, weights_only=True)['a'].tolist() == [0, 1, 2]


def test_concurrent_loads_keep_each_others_allowlist(tmp_path, torch_allowlist, monkeypatch):
    """Two threads load at once; the first to finish must not take the allowlist from the
    other, still unpickling; afterwards torch's allowlist is as before."""
    import threading

    from torch.serialization import get_safe_globals

    import mmposenc.engine.checkpoint as ckpt_mod
    monkeypatch.delenv(UNSAFE_LOAD_ENV, raising=False)
    path = str(tmp_path / 'numpy.pth')
    torch.save({'a': np.arange(3)}, path)
    before = set(get_safe_globals())
    both_inside, first_done = threading.Barrier(2), threading.Event()
    real_load = torch.load

    def load(*args, **kwargs):  # both threads are inside the allowlist here
        both_inside.wait(timeout=60)
        if threading.current_thread().name == 'first':
            return real_load(*args, **kwargs)
        assert first_done.wait(timeout=60)
        return real_load(*args, **kwargs)

    monkeypatch.setattr(ckpt_mod.torch, 'load', load)
    results = {}

    def run(name):
        try:
            results[name] = load_local_checkpoint(path)['a'].tolist()
        except Exception as err:  # noqa: BLE001 (reported below)
            results[name] = err
        finally:
            if name == 'first':
                first_done.set()

    threads = [threading.Thread(target=run, args=(n, ), name=n) for n in ('first', 'second')]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert results == {'first': [0, 1, 2], 'second': [0, 1, 2]}
    assert set(get_safe_globals()) == before


def test_mismatch_check_sees_the_checkpoint_as_the_models_load_hooks_leave_it():
    """tools/test.py refuses a checkpoint that does not fit (:func:`state_dict_mismatch`): a
    checkpoint that the model's own load-state-dict pre-hooks adapt (CPVT's position embedding
    of another image size, resized on load) fits and must not be refused; the checkpoint
    itself is left unchanged, and a real mismatch is still reported."""
    from mmengine.runner.checkpoint import load_state_dict

    from mmposenc.engine import describe_mismatch, state_dict_mismatch
    from mmposenc.models.backbones import CPVT
    arch = dict(embed_dims=32, num_layers=2, num_heads=2, feedforward_channels=64)
    model = CPVT(arch, with_pos_embed=True, img_size=64)  # a 4 x 4 grid
    other = CPVT(arch, with_pos_embed=True, img_size=128)  # trained at 8 x 8
    checkpoint = {'state_dict': {'backbone.' + k: v for k, v in other.state_dict().items()}}
    wrapped = nn.Module()
    wrapped.backbone = model
    before = checkpoint['state_dict']['backbone.pos_embed']
    assert describe_mismatch(state_dict_mismatch(wrapped, checkpoint)) == ''
    assert checkpoint['state_dict']['backbone.pos_embed'] is before
    load_state_dict(wrapped, checkpoint['state_dict'], strict=True)  # as mmengine loads it
    narrow = CPVT(dict(arch, embed_dims=16), with_pos_embed=True, img_size=128)
    mismatch = state_dict_mismatch(wrapped, {'backbone.' + k: v
                                             for k, v in narrow.state_dict().items()})
    assert 'backbone.pos_embed' in mismatch['shape'] and mismatch['shape']


@pytest.fixture
def http_root(tmp_path):
    """A folder served over http://127.0.0.1:<port>/ by a local http.server (the URL)."""
    import functools
    import http.server
    import threading
    root = tmp_path / 'served'
    root.mkdir()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    handler.log_message = lambda *args: None
    server = http.server.ThreadingHTTPServer(('127.0.0.1', 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield root, f'http://127.0.0.1:{server.server_address[1]}'
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize('scheme', ['http', 'torchvision'])
def test_remote_checkpoints_take_the_safe_loader(http_root, tmp_path, monkeypatch, scheme):
    """A downloaded checkpoint is loaded as a local one: a Runner-like checkpoint (numpy in
    the message hub) loads with weights_only=True and our allowlist, a pickle that would run
    code is refused and does not run (mmengine's load_from_http unpickles with torch.hub's
    weights_only=False). ``torchvision://`` names resolve to URLs and take the same path."""
    from mmengine.runner import checkpoint as mm
    monkeypatch.delenv(UNSAFE_LOAD_ENV, raising=False)
    monkeypatch.setenv('TORCH_HOME', str(tmp_path / 'torch_home'))
    root, url = http_root
    marker = tmp_path / 'ran'

    class Payload:
        def __reduce__(self):
            return os.system, (f'touch {marker}', )

    torch.save({'state_dict': {'w': torch.ones(2)}, 'meta': {'hist': np.arange(3)}},
               root / 'safe.pth')
    torch.save({'state_dict': {'w': torch.ones(1)}, 'meta': Payload()}, root / 'evil.pth')
    names = dict(safe=f'{url}/safe.pth', evil=f'{url}/evil.pth')
    if scheme == 'torchvision':
        urls = dict(names)
        monkeypatch.setattr(mm, 'get_torchvision_models', lambda: urls)
        names = {k: f'torchvision://{k}' for k in names}
    calls = []
    real_load = torch.load
    monkeypatch.setattr(torch, 'load', lambda *a, **k: calls.append(k) or real_load(*a, **k))
    ckpt = _load_checkpoint(names['safe'], map_location='cpu')
    assert ckpt['meta']['hist'].tolist() == [0, 1, 2] and ckpt['state_dict']['w'].sum() == 2
    assert calls and all(k.get('weights_only') is True for k in calls)
    assert osp.isfile(tmp_path / 'torch_home' / 'hub' / 'checkpoints' / 'safe.pth')
    with pytest.raises(UnsafeCheckpointError,
                       match=r'refusing to load .*evil\.pth: it names globals outside the safe '
                       r'allowlist: (posix|nt)\.system'):
        _load_checkpoint(names['evil'])
    assert not marker.exists()
