"""Train any mmposenc config with mmengine's Runner.

The host (mmdet, mmseg or mmpretrain) comes from the config's ``default_scope``; its registries
and ours resolve lazily, so one script serves all three. The usual OpenMMLab arguments apply:

    python tools/train.py configs/peg_detr/xxx.py --work-dir work_dirs/xxx \
        --cfg-options train_dataloader.batch_size=2 --amp --resume

``--amp`` uses mmengine's ``AmpOptimWrapper`` (fp16 + loss scaling) where CUDA is available and
mmposenc's ``BF16OptimWrapper`` (bfloat16 autocast) on CPU, where ``AmpOptimWrapper`` refuses
to run.

Any error ends the tool with one line on stderr and exit status 1 (see
:mod:`mmposenc.utils.errors`); ``--traceback`` or ``MMPOSENC_TRACEBACK=1`` shows the full
traceback instead.
"""
import argparse
import os
import os.path as osp
import sys

# this checkout's mmposenc first (a tool of a clone imports the clone's, installed or not)
sys.path.insert(0, osp.dirname(osp.dirname(osp.realpath(__file__))))
from mmposenc.utils.tools.runner import build_runner, load_config  # noqa: E402
from mmposenc.utils.errors import MMPosEncError, run_tool  # noqa: E402


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description='Train a model from an mmposenc config')
    parser.add_argument('config', help='train config file path')
    parser.add_argument('--work-dir', help='the dir to save logs and models')
    parser.add_argument(
        '--amp', action='store_true', help='enable automatic mixed precision training')
    parser.add_argument(
        '--auto-scale-lr', action='store_true',
        help='scale the learning rate by the actual total batch size (auto_scale_lr)')
    parser.add_argument(
        '--resume', nargs='?', type=str, const='auto',
        help='resume from this checkpoint, or, without a path, from the latest '
        'checkpoint in the work dir')
    parser.add_argument(
        '--no-validate', action='store_true', help='skip validation during training')
    parser.add_argument(
        '--cfg-options', nargs='+', action=_dict_action(),
        help='override config settings, xxx=yyy (key="[a,b]" for lists)')
    parser.add_argument(
        '--launcher', choices=['none', 'pytorch', 'slurm', 'mpi'], default='none',
        help='job launcher')
    parser.add_argument('--local_rank', '--local-rank', type=int, default=0)
    parser.add_argument(
        '--traceback', action='store_true',
        help='on an error, the full traceback instead of one line (also MMPOSENC_TRACEBACK=1)')
    args = parser.parse_args(argv)
    if 'LOCAL_RANK' not in os.environ:
        os.environ['LOCAL_RANK'] = str(args.local_rank)
    return args


def _dict_action():
    from mmengine.config import DictAction
    return DictAction


#: Arguments of mmengine's ``AmpOptimWrapper`` that ``BF16OptimWrapper`` does not take, and
#: the reverse (an fp16 config of mmdet / mmseg names ``loss_scale``)
AMP_ONLY_KEYS = ('loss_scale', 'dtype', 'use_fsdp')
BF16_ONLY_KEYS = ('device_type', )


def apply_amp(cfg):
    """``--amp``: this machine's mixed-precision optimizer wrapper, without the arguments of
    the other kind that the config may hold; dynamic loss scaling unless the config sets one."""
    from mmposenc.engine import amp_optim_wrapper_type
    wrapper = cfg.optim_wrapper
    wrapper.type = amp_optim_wrapper_type()
    if wrapper.type == 'AmpOptimWrapper':
        for key in BF16_ONLY_KEYS:
            wrapper.pop(key, None)
        wrapper.setdefault('loss_scale', 'dynamic')
    else:
        for key in AMP_ONLY_KEYS:
            wrapper.pop(key, None)


def main(argv=None):
    args = parse_args(argv)
    cfg = load_config(args.config, args.cfg_options, args.work_dir, args.launcher)

    if args.amp:
        apply_amp(cfg)
    if args.auto_scale_lr:
        if 'auto_scale_lr' not in cfg or 'base_batch_size' not in cfg.auto_scale_lr:
            raise RuntimeError('--auto-scale-lr needs `auto_scale_lr = dict('
                               'base_batch_size=...)` in the config')
        cfg.auto_scale_lr.enable = True
    notice = apply_resume(cfg, args.resume)
    if args.no_validate:
        cfg.val_cfg = cfg.val_dataloader = cfg.val_evaluator = None

    runner = build_runner(cfg, first_log_line=notice)
    runner.train()


class MissingCheckpointError(MMPosEncError, FileNotFoundError):
    """``--resume PATH`` with no checkpoint at ``PATH``."""


def apply_resume(cfg, resume):
    """``--resume``: resume from checkpoint ``resume``, or with ``'auto'`` from the work dir's
    latest checkpoint (its ``last_checkpoint`` file, as mmengine's Runner finds it).

    mmengine's Runner, like mmdet's ``tools/train.py``, trains an auto-resumed run with nothing
    to resume from scratch and logs ``Auto resumed from the latest checkpoint None`` after the
    config dump; here such a run is a fresh run (the config's own ``load_from``, if any, is
    kept), announced by the returned line, which :func:`build_runner` logs first.

    Returns:
        str | None: the line to log first: nothing to resume in the work dir.

    Raises:
        MissingCheckpointError: ``resume`` names a local checkpoint that does not exist (before
            anything is built, rather than when the Runner reaches it).
        InvalidCheckpointError: ``resume`` is not a checkpoint.
    """
    if resume is None:
        return None
    if resume != 'auto':
        if '://' not in resume:  # URLs and scheme:// paths: mmengine's CheckpointLoader
            from mmposenc.engine import check_checkpoint_file
            if not osp.isfile(resume):
                raise MissingCheckpointError(
                    f'--resume {resume}: no such checkpoint (to resume from the latest '
                    'checkpoint of the work dir, pass --resume without a path)')
            check_checkpoint_file(resume)
        cfg.resume = True
        cfg.load_from = resume
        return None
    from mmengine.runner import find_latest_checkpoint
    if osp.isfile(osp.join(cfg.work_dir, 'last_checkpoint')):
        latest = find_latest_checkpoint(cfg.work_dir)
        if latest and '://' not in latest and not osp.isfile(latest):
            raise MissingCheckpointError(
                f'--resume: {osp.join(cfg.work_dir, "last_checkpoint")} names {latest}, which '
                'does not exist (pass --resume CHECKPOINT, or delete last_checkpoint to train '
                'from scratch)')
        if latest:
            cfg.resume = True
            cfg.load_from = None
            return None
    cfg.resume = False
    start = ('training from scratch' if not cfg.get('load_from') else
             f'training from load_from={cfg.load_from}')
    return f'--resume: nothing to resume in {cfg.work_dir} (no last_checkpoint), {start}'


if __name__ == '__main__':
    run_tool(main)  # an error: its one line on stderr, exit 1 (the traceback: --traceback)
