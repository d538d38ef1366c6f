"""Check the datasets of a config before training: one line per problem, exit 1 on any.

Reads the config's ``train_dataloader`` / ``val_dataloader`` / ``test_dataloader`` datasets
(through dataset wrappers such as ``RepeatDataset`` or ``ConcatDataset``), builds each with
``lazy_init=True`` (nothing loaded) and runs :func:`mmposenc.datasets.check_dataset` on it, the
same check the ``mmposenc.Checked*`` datasets of the shipped configs run when they are built.
COCO-style mmdet datasets and mmseg datasets (ADE20K layout) are checked; others are listed as
not checked. Works with configs by path and ``mmposenc::`` configs::

    python tools/misc/check_dataset.py configs/peg_detr/detr-peg_r50_16xb2-50e_coco.py \
        --cfg-options train_dataloader.dataset.data_root=data/mine/
    python tools/misc/check_dataset.py my_config.py --split train --files full

Exit status: 0 when every checked split is clean (drops are listed, they are not errors), 1 when
any has a problem, 2 for a config without the asked split. Any other error ends the tool with
one line on stderr, exit status 1 (``--traceback`` or ``MMPOSENC_TRACEBACK=1``: the full
traceback).
"""
import argparse
import copy
import os.path as osp
import sys

# this checkout's mmposenc first (a tool of a clone imports the clone's, installed or not)
sys.path.insert(0, osp.dirname(osp.dirname(osp.dirname(osp.realpath(__file__)))))
from mmposenc.utils.tools.runner import load_config  # noqa: E402

SPLITS = ('train', 'val', 'test')


def parse_args(argv=None):
    from mmposenc.datasets.dataset_check import ALLOWABLE, FILE_LEVELS
    parser = argparse.ArgumentParser(description='Check the datasets of a config')
    parser.add_argument('config', help='config file path (or mmposenc::<config>)')
    parser.add_argument('--split', nargs='+', choices=SPLITS, default=None,
                        help='splits to check (default: every dataloader of the config)')
    parser.add_argument('--files', choices=FILE_LEVELS, default=None,
                        help='how much of each image / label file to read (default: the '
                        "dataset's check_cfg.files, else 'header'; 'full' decodes every image)")
    parser.add_argument('--allow', nargs='+', choices=ALLOWABLE, default=(),
                        help='count these as drops instead of errors')
    parser.add_argument('--max-lines', type=int, default=5,
                        help='lines shown per kind of problem (default 5)')
    parser.add_argument('--cfg-options', nargs='+', default=None,
                        help='override config settings, xxx=yyy')
    parser.add_argument('--traceback', action='store_true',
                        help='on an error, the full traceback instead of one line (also '
                        'MMPOSENC_TRACEBACK=1)')
    return parser.parse_args(argv)


def _cfg_options(items):
    if not items:
        return None
    from mmengine.config import DictAction
    ns = argparse.Namespace()
    DictAction(option_strings=[], dest='opts')(None, ns, items)
    return ns.opts


def leaf_datasets(dataset_cfg):
    """The dataset configs inside wrappers (``dataset=`` / ``datasets=``), depth first."""
    if isinstance(dataset_cfg, (list, tuple)):
        return [d for c in dataset_cfg for d in leaf_datasets(c)]
    if 'dataset' in dataset_cfg:
        return leaf_datasets(dataset_cfg['dataset'])
    if 'datasets' in dataset_cfg:
        return leaf_datasets(dataset_cfg['datasets'])
    return [dataset_cfg]


def check_config(cfg, splits=None, files=None, allow=(), max_lines=5, out=print):
    """Check the datasets of ``cfg``; returns the number of splits with problems."""
    from mmengine.registry import DATASETS, init_default_scope

    from mmposenc.datasets.dataset_check import check_dataset
    init_default_scope(cfg.get('default_scope', 'mmengine'))
    failed = 0
    for split in splits or SPLITS:
        loader = cfg.get(f'{split}_dataloader', None)
        if not loader:
            if splits:
                raise KeyError(f'the config has no {split}_dataloader')
            continue
        for ds_cfg in leaf_datasets(loader['dataset']):
            ds_cfg = copy.deepcopy(ds_cfg)
            ds_cfg['lazy_init'] = True
            check_cfg = ds_cfg.get('check_cfg', None) or {}
            kwargs = dict(check_cfg) if isinstance(check_cfg, dict) else {}
            if files is not None:
                kwargs['files'] = files
            kwargs['allow'] = tuple(kwargs.get('allow', ())) + tuple(allow)
            dataset = DATASETS.build(ds_cfg)
            report = check_dataset(dataset, **kwargs)
            out(f'[{split}] ' + report.summary(max_lines))
            failed += bool(report.errors)
    return failed


def main(argv=None):
    args = parse_args(argv)
    cfg = load_config(args.config, _cfg_options(args.cfg_options))  # a file or mmposenc::...
    try:
        failed = check_config(cfg, args.split, args.files, args.allow, args.max_lines)
    except KeyError as err:
        print(f'{args.config}: {err.args[0]}', file=sys.stderr)
        return 2
    return 1 if failed else 0


if __name__ == '__main__':
    from mmposenc.utils.errors import run_tool
    sys.exit(run_tool(main))
