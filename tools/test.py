"""Evaluate a checkpoint of any mmposenc config with mmengine's Runner.

    python tools/test.py CONFIG CHECKPOINT [--work-dir DIR] [--out results.pkl]
        [--cfg-options k=v ...] [--launcher pytorch]

The metrics are those of the config's ``test_evaluator`` (CocoMetric, IoUMetric, Accuracy, ...).
"""
import argparse
import os
import os.path as osp
import sys

sys.path.insert(0, osp.dirname(osp.abspath(__file__)))
from _runner_utils import build_runner, load_config  # noqa: E402


def parse_args(argv=None):
    from mmengine.config import DictAction
    parser = argparse.ArgumentParser(description='Test (evaluate) a checkpoint')
    parser.add_argument('config', help='test config file path')
    parser.add_argument('checkpoint', help='checkpoint file')
    parser.add_argument('--work-dir', help='the dir to save the evaluation metrics')
    parser.add_argument('--out', help='dump the raw predictions to this pickle file')
    parser.add_argument(
        '--cfg-options', nargs='+', action=DictAction,
        help='override config settings, xxx=yyy (key="[a,b]" for lists)')
    parser.add_argument(
        '--launcher', choices=['none', 'pytorch', 'slurm', 'mpi'], default='none',
        help='job launcher')
    parser.add_argument('--local_rank', '--local-rank', type=int, default=0)
    args = parser.parse_args(argv)
    if 'LOCAL_RANK' not in os.environ:
        os.environ['LOCAL_RANK'] = str(args.local_rank)
    return args


def main(argv=None):
    args = parse_args(argv)
    if not osp.isfile(args.checkpoint):
        raise FileNotFoundError(f'checkpoint {args.checkpoint} does not exist')
    cfg = load_config(args.config, args.cfg_options, args.work_dir, args.launcher)
    cfg.load_from = args.checkpoint
    if args.out is not None:
        if not args.out.endswith(('.pkl', '.pickle')):
            raise ValueError(f'--out must be a .pkl file, got {args.out}')
        evaluators = cfg.test_evaluator
        if not isinstance(evaluators, (list, tuple)):
            evaluators = [evaluators]
        cfg.test_evaluator = list(evaluators) + [dict(type='DumpResults', out_file_path=args.out)]
    runner = build_runner(cfg)
    metrics = runner.test()
    return metrics


if __name__ == '__main__':
    main()
