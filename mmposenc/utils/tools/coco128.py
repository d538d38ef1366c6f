"""A shipped config pointed at a COCO-layout tree (COCO128), its Runner, and trained-like norms;
shared by ``tools/benchmark/padding_exact_cost.py`` and ``tools/analysis/batch_size_eval.py``.

COCO128 (``../shared/data/coco128``) has one annotation file, ``annotations/
instances_train2017.json``, and its images in ``train2017/``: every dataloader and every COCO
evaluator of the config is pointed there.
"""
import os
import os.path as osp

#: The repository of a source checkout (mmposenc/utils/tools/ is three folders below it).
REPO = osp.dirname(osp.dirname(osp.dirname(osp.dirname(osp.realpath(__file__)))))

#: Where the repository's tests and tools find COCO128 unless told otherwise.
DEFAULT_COCO128 = osp.join(
    os.environ.get('MMPOSENC_SHARED_DATA', osp.join(osp.dirname(REPO), 'shared', 'data')),
    'coco128')
ANN_FILE = 'annotations/instances_train2017.json'
IMG_PREFIX = 'train2017/'


def innermost_dataset(dataset_cfg):
    """The dataset config inside wrappers (RepeatDataset, ClassBalancedDataset, ...)."""
    while 'dataset' in dataset_cfg:
        dataset_cfg = dataset_cfg['dataset']
    return dataset_cfg


def point_at_coco(cfg, data_root: str, ann_file: str = ANN_FILE,
                  img_prefix: str = IMG_PREFIX) -> None:
    """Point the config's train / val / test dataloaders and COCO evaluators at
    ``data_root`` (COCO layout), in place.

    Raises:
        FileNotFoundError: ``data_root`` lacks the annotation file (one line, with the path).
    """
    root = data_root.rstrip('/') + '/'
    if not osp.isfile(root + ann_file):
        raise FileNotFoundError(f'{root + ann_file} not found: pass --data-root, a COCO tree '
                                f'with {ann_file} and {img_prefix} (e.g. ../shared/data/coco128)')
    for name in ('train_dataloader', 'val_dataloader', 'test_dataloader'):
        loader = cfg.get(name, None)
        if not loader:
            continue
        ds = innermost_dataset(loader['dataset'])
        ds['data_root'] = root
        ds['ann_file'] = ann_file
        ds['data_prefix'] = dict(img=img_prefix)
    for name in ('val_evaluator', 'test_evaluator'):
        evaluator = cfg.get(name, None)
        for e in (evaluator if isinstance(evaluator, list) else [evaluator]):
            if e and 'ann_file' in e:
                e['ann_file'] = root + ann_file


def load_runner(config: str, work_dir: str, data_root: str, cfg_options=None, device='cpu'):
    """The shipped ``config`` (a path or ``mmposenc::``) pointed at ``data_root`` (None: its
    own data), as a Runner (model built, nothing run), quiet."""
    from .runner import load_config
    from mmengine.runner import Runner
    cfg = load_config(config, cfg_options=cfg_options, work_dir=work_dir)
    if data_root is not None:
        point_at_coco(cfg, data_root)
    cfg.log_level = 'WARNING'
    cfg.launcher = 'none'
    cfg.pop('visualizer', None)  # no vis backends writing into the work dir
    cfg.default_hooks.pop('visualization', None)
    runner = Runner.from_cfg(cfg)
    runner.model.to(device)
    return runner


def make_norms_trained_like(model, batch_inputs, seed: int = 0) -> None:
    """Norms as training leaves them, in place: random affine parameters of every BatchNorm,
    GroupNorm and LayerNorm (weight in [0.5, 1.5], bias ~ N(0, 0.5)), the backbone's BatchNorm
    statistics measured on ``batch_inputs`` (a preprocessed batch), then shifted at random.

    Freshly initialised norms (weight 1 or 0, bias 0, statistics 0 / 1) keep the padded
    region of a CNN at zero and hide every border effect of a padded batch.
    """
    import torch
    from torch import nn
    gen = torch.Generator().manual_seed(seed)
    norm_types = (nn.BatchNorm2d, nn.LayerNorm, nn.GroupNorm)
    bns = [m for m in model.backbone.modules() if isinstance(m, nn.BatchNorm2d)]
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, norm_types) and getattr(m, 'weight', None) is not None:
                m.weight.copy_(torch.empty(m.weight.shape).uniform_(0.5, 1.5, generator=gen))
                m.bias.copy_(torch.empty(m.bias.shape).normal_(0, 0.5, generator=gen))
        if bns:
            for m in bns:
                m.reset_running_stats()
                m.momentum = None  # the cumulative average: the batch's statistics
                m.train()
            model.backbone(batch_inputs)
            for m in bns:
                m.momentum = 0.1
                m.running_mean.add_(
                    (torch.randn(m.num_features, generator=gen) * 0.1).to(m.running_mean))
                m.running_var.mul_(torch.empty(m.num_features).uniform_(
                    0.8, 1.25, generator=gen).to(m.running_var))
    model.eval()


def set_padding_exact(model, on: bool) -> int:
    """Set ``padding_exact`` of every part that has the switch
    (:func:`~mmposenc.models.padding_exact.padding_exact_parts`; each reads it at every
    call), and Mask R-CNN's edge-replicated RoI reads (``PaddingExactMaskRCNN.edge_pad_rois``,
    off: mmdet's RoI reads); the model must have been built with them on. Returns how many
    parts were set."""
    from mmposenc.models.padding_exact import padding_exact_parts
    parts = padding_exact_parts(model)
    for _, m in parts:
        m.padding_exact = on
    if hasattr(model, 'edge_pad_rois'):
        model.edge_pad_rois = on
    return len(parts)
