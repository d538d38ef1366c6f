"""PerViT-T as a detection backbone at 1333 x 800 on this CPU: peak memory and s/iter of full
RetinaNet training iterations, against the memory the official Phi_p formulation would need.

What is measured (one process, the shipped config ``configs/pervit/retinanet_pervit-t_fpn_1x_
coco.py`` unchanged except ``init_cfg=None`` for the backbone, i.e. no ImageNet checkpoint):

* ``--iters`` full training iterations: ``model.train_step`` = data preprocessor (normalise,
  pad the batch to a multiple of 32) + forward + loss + backward + AdamW step, exactly what
  mmengine's ``IterBasedTrainLoop`` runs. The batch is ``--batch-size`` real COCO images
  through the config's own train pipeline (``Resize(scale=(1333, 800), keep_ratio=True)``,
  flip, pack) when ``--data-root`` points at a COCO-layout folder (e.g. ../shared/data/
  coco128), else random 800 x 1333 images with a few random boxes.
* memory: the process's peak resident set (``getrusage(RUSAGE_SELF).ru_maxrss``: every byte
  torch allocates on the CPU is in it), the resident set after building the model (imports,
  weights, optimizer not yet stepped) and the difference, i.e. what training itself adds.
* seconds per iteration (wall clock; the first iteration included, nothing is cached in
  training: Phi_p is recomputed from the parameters at every step).

The official formulation is NOT run at this scale (it cannot be on this machine): its memory
is counted with :func:`official_phi_p_training_bytes`, the tensors its Phi_p keeps for the
backward pass, derived from the official code (``tests/pervit_reference.py`` transcribes it;
``tests/test_tools/test_pervit_detection_memory.py`` checks the count against the bytes
autograd really saves at small grids).

Usage:
    python tools/analysis/pervit_detection_memory.py --data-root ../shared/data/coco128
    python tools/analysis/pervit_detection_memory.py --iters 1 --batch-size 1   # random
    python tools/analysis/pervit_detection_memory.py --official-only --hw 50 84
"""
import argparse
import json
import logging
import math
import os
import os.path as osp
import resource
import sys
import time

# this checkout's mmposenc first (a tool of a clone imports the clone's, installed or not)
sys.path.insert(0, osp.dirname(osp.dirname(osp.dirname(osp.realpath(__file__)))))

REPO_ROOT = osp.dirname(osp.dirname(osp.dirname(osp.realpath(__file__))))
DEFAULT_CONFIG = osp.join(REPO_ROOT, 'configs', 'pervit', 'retinanet_pervit-t_fpn_1x_coco.py')


# ------------------------------------------------------------------- the official formulation
def official_phi_p_training_bytes(hw_shape, num_heads=4, dist_dims=16, hidden_dims=16,
                                  kernel_size=3, num_blocks=12, element_size=4):
    """Bytes the official PerViT Phi_p holds for backward in one training forward.

    The official code (``get_rpe`` once per forward, then per block ``PeripheralPositionEn-
    coding.forward``) builds ``rpe_proj`` = ``Linear(1, D_r)`` of the distances of the padded
    grid (``N_pad = (H + 2p)(W + 2p)`` positions, ``p = 2 (K // 2)``), then per block copies a
    ``(N, D_r, H + 2p, W + 2p)`` slice of it and runs conv -> GroupNorm -> ReLU -> conv ->
    GroupNorm -> sigmoid over it. What autograd keeps until backward:

    * once: the linear's input (``N_pad^2`` distances); its output ``rpe_proj``
      (``N_pad^2 * D_r``) is alive for the whole forward (every block slices it);
    * per block: the first conv's input (``N * D_r * (H+2p)(W+2p)``), the first GroupNorm's
      input and the ReLU output (``N * D_hid * (H+p)(W+p)`` each; the second conv saves the
      same ReLU output), the second GroupNorm's input and the sigmoid output
      (``heads * N^2`` each), and the GroupNorm statistics (mean and rstd per sample and
      group: ``2 N D_hid + 2 N heads``).

    Weights are parameters (not counted). The attention itself (``exp(dots)``, the product
    with Phi_p, the normalisation) comes on top and scales with the batch.

    Args:
        hw_shape (Sequence[int]): Token grid ``(H, W)``.
        num_heads (int): Defaults to 4 (PerViT-T).
        dist_dims (int): ``D_r``. Defaults to 16.
        hidden_dims (int): ``D_hid``. Defaults to 16.
        kernel_size (int): ``K``. Defaults to 3.
        num_blocks (int): Defaults to 12.
        element_size (int): Bytes per element. Defaults to 4 (float32).

    Returns:
        dict: ``per_block`` and ``shared`` (saved) and ``rpe_proj`` (alive, not saved) bytes,
        and ``total`` = ``num_blocks * per_block + shared + rpe_proj``.

    Examples:
        >>> round(official_phi_p_training_bytes((50, 84))['total'] / 1e9, 1)
        52.5
    """
    h, w = hw_shape
    p = 2 * (kernel_size // 2)
    n = h * w
    hp, wp = h + 2 * p, w + 2 * p
    h1, w1 = hp - kernel_size + 1, wp - kernel_size + 1
    n_pad = hp * wp
    per_block = (n * dist_dims * hp * wp + 2 * n * hidden_dims * h1 * w1 +
                 2 * num_heads * n * n + 2 * n * hidden_dims + 2 * n * num_heads)
    shared = n_pad * n_pad
    rpe_proj = n_pad * n_pad * dist_dims
    out = dict(per_block=per_block, shared=shared, rpe_proj=rpe_proj,
               total=num_blocks * per_block + shared + rpe_proj)
    return {k: v * element_size for k, v in out.items()}


def token_grid(img_hw, stride=16):
    """PerViT's token grid for an image of ``img_hw`` (four stride-2 convs: ``ceil``)."""
    return tuple(math.ceil(s / stride) for s in img_hw)


# ------------------------------------------------------------------------------ our training
def rss_bytes():
    """Current resident set of this process."""
    with open('/proc/self/statm') as f:
        return int(f.read().split()[1]) * os.sysconf('SC_PAGE_SIZE')


def padded_shape(images, divisor):
    """``(H, W)`` of the batch the data preprocessor builds: the largest image, padded up to
    a multiple of ``divisor``."""
    h = max(i.shape[-2] for i in images)
    w = max(i.shape[-1] for i in images)
    return math.ceil(h / divisor) * divisor, math.ceil(w / divisor) * divisor


def peak_rss_bytes():
    """Peak resident set of this process (``ru_maxrss`` is in KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def build(config, with_cp=False):
    """The detector and its optimizer wrapper from ``config`` (backbone without checkpoint;
    ``with_cp``: activation checkpointing per PerViT block)."""
    from mmengine.config import Config
    from mmengine.logging import MMLogger
    from mmengine.optim import build_optim_wrapper
    from mmengine.registry import init_default_scope

    import mmposenc  # noqa: F401  (before parsing: `_base_ = 'mmposenc::...'` configs)
    cfg = Config.fromfile(config)
    init_default_scope(cfg.get('default_scope', 'mmdet'))
    import mmdet.models  # noqa: F401
    from mmdet.registry import MODELS
    import mmposenc.models  # noqa: F401
    cfg.model.backbone.init_cfg = None  # no ImageNet checkpoint here
    if with_cp:
        cfg.model.backbone.with_cp = True
    model = MODELS.build(cfg.model)
    logger = MMLogger.get_current_instance()
    level = logger.level
    logger.setLevel(logging.WARNING)  # init_weights logs every parameter at INFO
    model.init_weights()
    logger.setLevel(level)
    model.train()
    optim_wrapper = build_optim_wrapper(model, cfg.optim_wrapper)
    return cfg, model, optim_wrapper


def _train_scale(cfg):
    for t in cfg.train_pipeline:
        if t['type'] in ('Resize', 'mmdet.Resize'):
            return tuple(t['scale'])
    raise ValueError('the config train pipeline has no Resize')


def real_batches(cfg, data_root, batch_size, iters):
    """``iters`` batches of the config's train pipeline over a COCO-layout ``data_root``."""
    from mmengine.dataset import pseudo_collate
    from mmdet.registry import DATASETS
    ds_cfg = cfg.train_dataloader.dataset.copy()
    ds_cfg.update(data_root=data_root.rstrip('/') + '/',
                  ann_file='annotations/instances_train2017.json',
                  data_prefix=dict(img='train2017/'), pipeline=cfg.train_pipeline)
    dataset = DATASETS.build(ds_cfg)
    batches = []
    for i in range(iters):
        idx = [(i * batch_size + j) % len(dataset) for j in range(batch_size)]
        batches.append(pseudo_collate([dataset[k] for k in idx]))
    return batches


def random_batches(cfg, batch_size, iters, seed=0):
    """Random ``scale`` images (``(w, h)`` of the config's Resize) with 3 boxes each."""
    import torch
    from mmdet.structures import DetDataSample
    from mmdet.structures.bbox import HorizontalBoxes
    from mmengine.structures import InstanceData
    w, h = _train_scale(cfg)
    g = torch.Generator().manual_seed(seed)
    batches = []
    for _ in range(iters):
        inputs, samples = [], []
        for _ in range(batch_size):
            inputs.append(torch.randint(0, 256, (3, h, w), dtype=torch.uint8, generator=g))
            xy = torch.rand(3, 2, generator=g) * torch.tensor([w * 0.6, h * 0.6])
            wh = 32 + torch.rand(3, 2, generator=g) * torch.tensor([w * 0.3, h * 0.3])
            s = DetDataSample(metainfo=dict(img_shape=(h, w), ori_shape=(h, w),
                                            scale_factor=(1.0, 1.0), flip=False))
            s.gt_instances = InstanceData(
                bboxes=HorizontalBoxes(torch.cat([xy, xy + wh], dim=1)),
                labels=torch.randint(0, 80, (3, ), generator=g))
            samples.append(s)
        batches.append(dict(inputs=inputs, data_samples=samples))
    return batches


def train(args):
    import torch
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    cfg, model, optim_wrapper = build(args.config, args.with_cp)
    if args.scale:
        for t in cfg.train_pipeline:
            if t['type'] in ('Resize', 'mmdet.Resize'):
                t['scale'] = tuple(args.scale)
    if args.data_root:
        batches = real_batches(cfg, args.data_root, args.batch_size, args.iters)
    else:
        batches = random_batches(cfg, args.batch_size, args.iters)
    divisor = cfg.model.data_preprocessor.get('pad_size_divisor', 1)
    base = rss_bytes()
    rows = []
    for i, data in enumerate(batches):
        t = time.perf_counter()
        log_vars = model.train_step(data, optim_wrapper)
        seconds = time.perf_counter() - t
        shape = (len(data['inputs']), 3, *padded_shape(data['inputs'], divisor))
        losses = {k: float(v.detach()) for k, v in log_vars.items()}
        rows.append(dict(iter=i + 1, seconds=seconds, batch_shape=shape,
                         tokens=token_grid(shape[-2:]), losses=losses,
                         peak_rss=peak_rss_bytes()))
        print(f'iter {i + 1}: {seconds:.1f} s, batch {shape}, tokens '
              f'{"x".join(map(str, token_grid(shape[-2:])))}, loss {losses["loss"]:.4f}, '
              f'peak RSS {peak_rss_bytes() / 2**30:.2f} GiB', flush=True)
    peak = peak_rss_bytes()
    finite = all(math.isfinite(v) for r in rows for v in r['losses'].values())
    config = osp.abspath(args.config)  # a shipped config by its path in the repository
    if config.startswith(REPO_ROOT + os.sep):
        config = osp.relpath(config, REPO_ROOT)
    return dict(config=config, data=args.data_root or 'random',
                with_cp=bool(model.backbone.with_cp), batch_size=args.batch_size,
                threads=torch.get_num_threads(),
                rss_after_build=base, peak_rss=peak, training_adds=peak - base,
                seconds_per_iter=sum(r['seconds'] for r in rows) / len(rows),
                finite_losses=finite, iters=rows)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--config', default=DEFAULT_CONFIG)
    parser.add_argument('--data-root', default=None,
                        help='COCO-layout folder (annotations/instances_train2017.json, '
                        'train2017/); default: random images at the config scale')
    parser.add_argument('--iters', type=int, default=2)
    parser.add_argument('--batch-size', type=int, default=2,
                        help='images per iteration (mmdet 1x: 2 per GPU)')
    parser.add_argument('--scale', type=int, nargs=2, default=None, metavar=('W', 'H'),
                        help='override the Resize scale of the config (default 1333 800)')
    parser.add_argument('--threads', type=int, default=None)
    parser.add_argument('--with-cp', action='store_true',
                        help='activation checkpointing per PerViT block (PerViT(with_cp=True))')
    parser.add_argument('--hw', type=int, nargs=2, default=None,
                        help='token grid for the official estimate (default: the grid of '
                        'the measured batches, else 50 84)')
    parser.add_argument('--official-only', action='store_true',
                        help='print the official estimate only, no training')
    parser.add_argument('--json', default=None, help='write the results here')
    args = parser.parse_args(argv)

    result = {}
    if not args.official_only:
        result['ours'] = train(args)
    hw = tuple(args.hw) if args.hw else (
        result['ours']['iters'][0]['tokens'] if 'ours' in result else (50, 84))
    official = official_phi_p_training_bytes(hw)
    result['official_estimate'] = dict(tokens=list(hw), **official)

    print(f'\nPerViT-T Phi_p, official formulation, {hw[0]}x{hw[1]} tokens, 12 blocks: '
          f'{official["total"] / 1e9:.1f} GB ({official["total"] / 2**30:.1f} GiB) held for '
          f'backward ({official["per_block"] / 1e9:.2f} GB per block + '
          f'{(official["shared"] + official["rpe_proj"]) / 1e9:.2f} GB rpe_proj), before '
          'any attention, batch-independent')
    if 'ours' in result:
        o = result['ours']
        print(f'mmposenc, whole RetinaNet training process ({o["data"]}, batch '
              f'{o["batch_size"]}, with_cp={o["with_cp"]}, {o["threads"]} threads): peak RSS '
              f'{o["peak_rss"] / 2**30:.2f} GiB ({o["peak_rss"] / 1e9:.2f} GB), of which '
              f'{o["training_adds"] / 2**30:.2f} GiB added by training; '
              f'{o["seconds_per_iter"]:.1f} s/iter; losses finite: {o["finite_losses"]}')
        print(f'official Phi_p alone / our whole process: '
              f'{official["total"] / o["peak_rss"]:.1f}x')
    if args.json:
        with open(args.json, 'w') as f:
            json.dump(result, f, indent=1, default=list)
    return result


if __name__ == '__main__':
    main()
