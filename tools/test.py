"""Evaluate a checkpoint of any mmposenc config with mmengine's Runner.

    python tools/test.py CONFIG CHECKPOINT [--work-dir DIR] [--out results.pkl]
        [--cfg-options k=v ...] [--launcher pytorch] [--allow-partial-load] [--tta]

The metrics are those of the config's ``test_evaluator`` (CocoMetric, IoUMetric, Accuracy, ...).

``--tta`` tests with the config's test-time augmentation, as mmpretrain's test tool does: its
``tta_model`` wraps the model (``module``) and its ``tta_pipeline`` becomes the test pipeline
(e.g. the CAPE configs: views at r - 32, r, r + 32, each resized from the source image). A
config without them ends the tool with a one-line ``MissingTTAConfigError`` that names the
missing keys and the configs of :data:`TTA_CONFIGS`.

The checkpoint must fit the config's model: a missing, unexpected or resized weight (say, a
PEG-DETR checkpoint with the sine config) is an error naming the keys, since mmengine's own
non-strict load would evaluate a partly random model with only a warning.
``--allow-partial-load`` loads the matching weights anyway (with that warning). The file is
loaded safely (``weights_only=True``, see :mod:`mmposenc.engine.checkpoint`).

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
    from mmengine.config import DictAction
    parser = argparse.ArgumentParser(description='Test (evaluate) a checkpoint')
    parser.add_argument('config', help='test config file path')
    parser.add_argument('checkpoint', help='checkpoint file, or a URL / scheme:// path')
    parser.add_argument('--work-dir', help='the dir to save the evaluation metrics')
    parser.add_argument('--out', help='dump the raw predictions to this pickle file')
    parser.add_argument(
        '--cfg-options', nargs='+', action=DictAction,
        help='override config settings, xxx=yyy (key="[a,b]" for lists)')
    parser.add_argument(
        '--launcher', choices=['none', 'pytorch', 'slurm', 'mpi'], default='none',
        help='job launcher')
    parser.add_argument(
        '--allow-partial-load', action='store_true',
        help='evaluate even if the checkpoint lacks weights of the model or holds others '
        '(by default an error that names the keys)')
    parser.add_argument(
        '--tta', action='store_true',
        help="test-time augmentation: the config's tta_model wraps its model and its "
        'tta_pipeline replaces the test pipeline')
    parser.add_argument('--local_rank', '--local-rank', type=int, default=0)
    parser.add_argument(
        '--traceback', action='store_true',
        help='on an error, the full traceback instead of one line (also MMPOSENC_TRACEBACK=1)')
    args = parser.parse_args(argv)
    if 'LOCAL_RANK' not in os.environ:
        os.environ['LOCAL_RANK'] = str(args.local_rank)
    return args


def checkpoint_fit_hook(filename, allow_partial=False):
    """A hook that checks, when the Runner loads ``filename``, that its weights fit the model.

    Runs last among the ``after_load_checkpoint`` hooks (after, e.g., EMA hooks swapped their
    weights in), on the state dict mmengine is about to load.

    Raises:
        CheckpointMismatchError: (unless ``allow_partial``) naming the missing, unexpected and
            resized keys.
    """
    from mmengine.hooks import Hook
    from mmengine.model import BaseTTAModel, is_model_wrapper

    from mmposenc.engine import (CheckpointMismatchError, describe_mismatch,
                                 state_dict_mismatch)

    class CheckpointFitHook(Hook):
        priority = 'LOWEST'

        def after_load_checkpoint(self, runner, checkpoint):
            model = runner.model.module if is_model_wrapper(runner.model) else runner.model
            if isinstance(model, BaseTTAModel):  # --tta: the weights load into its module
                model = model.module
            summary = describe_mismatch(state_dict_mismatch(model, checkpoint))
            if not summary:
                return
            if not allow_partial:
                raise CheckpointMismatchError(
                    f'{filename} does not fit the model of the config: {summary}; '
                    'evaluating it would test a partly random model. Use the config the '
                    'checkpoint was trained with, or pass --allow-partial-load to load the '
                    'matching weights anyway')
            runner.logger.warning(f'--allow-partial-load: {filename} loads partially: {summary}')

    return CheckpointFitHook()


#: Shipped configs with test-time augmentation (``tta_model`` and ``tta_pipeline``), named by
#: the error of ``--tta`` on a config without them (a test checks that each has both).
TTA_CONFIGS = ('configs/cape/vit-base-p16_cape_16xb64_in1k.py',
               'configs/cape/vit-base-p16_cape-univit_16xb64_in1k.py')


class MissingTTAConfigError(MMPosEncError, ValueError):
    """``--tta`` on a config without ``tta_model`` or ``tta_pipeline``."""


def apply_tta(cfg, path='the config'):
    """Wrap ``cfg.model`` in ``cfg.tta_model`` and test on ``cfg.tta_pipeline``.

    The config's top-level ``data_preprocessor`` (mmpretrain's configs keep it there) goes to
    the wrapped model, which preprocesses every view, as it would without ``--tta``.

    Raises:
        MissingTTAConfigError: the config has no ``tta_model`` or no ``tta_pipeline`` (the
            message names the missing keys and configs that have both).
    """
    from mmengine.config import ConfigDict
    missing = [k for k in ('tta_model', 'tta_pipeline') if cfg.get(k, None) is None]
    if missing:
        what = ('neither tta_model nor tta_pipeline' if len(missing) == 2 else
                f'no {missing[0]}')
        raise MissingTTAConfigError(
            f'--tta needs tta_model and tta_pipeline in the config, and {path} has {what}; '
            f'configs with test-time augmentation: {", ".join(TTA_CONFIGS)} (or test '
            'without --tta)')
    module = cfg.model
    if cfg.get('data_preprocessor', None) is not None:
        # what the Runner does for the model it builds (``model.setdefault``): an mmpretrain
        # config keeps its preprocessor (normalisation, BGR -> RGB, num_classes) at the top
        # level, and the Runner would give it to the TTA wrapper, which does not use it, and
        # leave the classifier with a bare ClsDataPreprocessor
        module.setdefault('data_preprocessor', cfg.data_preprocessor)
    cfg.model = ConfigDict(**cfg.tta_model, module=module)
    cfg.test_dataloader.dataset.pipeline = cfg.tta_pipeline


def main(argv=None):
    from mmposenc.engine.checkpoint import CheckpointNotFoundError, check_checkpoint_file
    args = parse_args(argv)
    if '://' not in args.checkpoint:  # URLs and scheme:// paths: mmengine's CheckpointLoader
        if not osp.isfile(args.checkpoint):
            raise CheckpointNotFoundError(
                f'checkpoint {osp.abspath(args.checkpoint)} does not exist')
        check_checkpoint_file(args.checkpoint)  # a text file fails here, before the Runner
    cfg = load_config(args.config, args.cfg_options, args.work_dir, args.launcher)
    cfg.load_from = args.checkpoint
    if args.tta:
        apply_tta(cfg, args.config)
    if args.out is not None:
        if not args.out.endswith(('.pkl', '.pickle')):
            raise ValueError(f'--out must be a .pkl file, got {args.out}')
        evaluators = cfg.test_evaluator
        if not isinstance(evaluators, (list, tuple)):
            evaluators = [evaluators]
        cfg.test_evaluator = list(evaluators) + [dict(type='DumpResults', out_file_path=args.out)]
    runner = build_runner(cfg)
    runner.register_hook(checkpoint_fit_hook(args.checkpoint, args.allow_partial_load))
    metrics = runner.test()
    return metrics


if __name__ == '__main__':
    run_tool(main)  # an error: its one line on stderr, exit 1 (the traceback: --traceback)
