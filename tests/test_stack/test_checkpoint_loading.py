"""Runner checkpoints (message_hub with HistoryBuffer + numpy) load under torch>=2.6."""
import numpy as np
import pytest
import torch
from mmengine.logging import HistoryBuffer
from mmengine.runner.checkpoint import CheckpointLoader, _load_checkpoint

import mmposenc  # noqa: F401  (registers the loader)


def _runner_like_checkpoint(path):
    buf = HistoryBuffer()
    buf.update(np.float64(1.5))
    torch.save({'state_dict': {'w': torch.ones(2)},
                'message_hub': {'log_scalars': {'train/loss': buf}},
                'meta': {'seed': np.int64(3)}}, path)


def test_runner_checkpoint_loads(tmp_path):
    path = str(tmp_path / 'iter_1.pth')
    _runner_like_checkpoint(path)
    with pytest.raises(Exception, match='Weights only load failed'):
        torch.load(path)  # torch's own default refuses it: the reason for our loader
    ckpt = _load_checkpoint(path, map_location='cpu')
    assert torch.equal(ckpt['state_dict']['w'], torch.ones(2))
    assert ckpt['message_hub']['log_scalars']['train/loss'].current() == 1.5


def test_loader_is_registered_for_local_paths(tmp_path):
    from mmposenc.engine import load_local_checkpoint
    assert CheckpointLoader._get_checkpoint_loader(str(tmp_path / 'x.pth')) \
        is load_local_checkpoint
    with pytest.raises(FileNotFoundError, match='x.pth can not be found'):
        _load_checkpoint(str(tmp_path / 'x.pth'))


def test_weights_only_opt_in(tmp_path, monkeypatch):
    path = str(tmp_path / 'iter_1.pth')
    _runner_like_checkpoint(path)
    monkeypatch.setenv('MMPOSENC_TORCH_WEIGHTS_ONLY', '1')
    with pytest.raises(Exception, match='Weights only load failed'):
        _load_checkpoint(path)
