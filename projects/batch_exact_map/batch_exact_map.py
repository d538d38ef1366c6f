"""Study 8: COCO128 mAP at test batch 1, 2 and 8 for every detector class shipped exact.

One shipped padding-exact config per detector and backbone class (the DETR family with PEG,
Deformable-DETR on PVT-PEG-S, COCO Mask2Former, SwinPEG-T RetinaNet, CPVT-S Mask R-CNN) is
made CPU-sized (:func:`cpu_scale`: the same classes and switches, fewer and narrower layers,
images resized to at most 480 x 320, COCO128 as training and test set), trained from scratch
with ``tools/train.py`` and evaluated with ``tools/analysis/batch_size_eval.py`` (mmengine's
test loop, mmdet's ``CocoMetric``; box and mask mAP) at batch 1, 2 and 8, in COCO order: the
images of a batch differ in shape, so every batch is padded.

Training on the test images is on purpose: the mAP here says whether batching changes the
detections of a trained model, not how well it generalises.

Examples:
    >>> from projects.batch_exact_map.batch_exact_map import FAMILIES
    >>> sorted(FAMILIES)[:2]
    ['cond_detr', 'dab_detr']
"""
import argparse
import json
import os
import os.path as osp
import subprocess
import sys
import time

REPO_ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))

#: label: the shipped config (padding-exact on by default)
FAMILIES = {
    'detr': 'configs/peg_detr/detr-peg_r50_16xb2-50e_coco.py',
    'cond_detr': 'configs/peg_conditional_detr/conditional-detr-peg_r50_8xb2-50e_coco.py',
    'dab_detr': 'configs/peg_dab_detr/dab-detr-peg_r50_8xb2-50e_coco.py',
    'deformable_detr': 'configs/peg_deformable_detr/deformable-detr-peg_r50_16xb2-50e_coco.py',
    'deformable_detr_pvt': 'configs/pvt_peg/deformable-detr-peg_pvt-peg-s_16xb2-50e_coco.py',
    'dino': 'configs/peg_dino/dino-4scale-peg_r50_8xb2-12e_coco.py',
    'mask2former': 'configs/peg_mask2former/mask2former-peg_r50_8xb2-lsj-50e_coco.py',
    'retinanet_swin': 'configs/swin_peg/retinanet_swin-peg-t-p4-w7_fpn_1x_coco.py',
    'mask_rcnn_cpvt': 'configs/cpvt/mask-rcnn_cpvt-s_fpn_1x_coco.py',
}
SCALE = (480, 320)  # (long, short) edge limits of mmdet's keep-ratio Resize
WIDTH = 64  # the narrowed models' feature width


def narrow_model(model) -> None:
    """Fewer and narrower layers, the same classes and padding-exact switches (in place)."""
    backbone = model.backbone
    backbone.init_cfg = None  # from scratch: no download
    if backbone.type == 'mmposenc.PaddingExactResNet':
        backbone.update(depth=18, frozen_stages=-1, norm_eval=False,
                        norm_cfg=dict(type='BN', requires_grad=True))
        channels = [64 * 2**i for i in backbone.out_indices]
    elif backbone.type == 'mmposenc.SwinPEG':
        backbone.arch = dict(embed_dims=32, depths=[2, 2, 2, 2], num_heads=[1, 2, 4, 8])
        channels = [32 * 2**i for i in backbone.out_indices]
    elif backbone.type == 'mmposenc.CPVT':
        backbone.update(arch=dict(embed_dims=WIDTH, num_layers=4, num_heads=2,
                                  feedforward_channels=2 * WIDTH),
                        out_indices=(0, 1, 2, 3), peg_positions=(0, 1, 2, 3))
        channels = [WIDTH] * 4
    elif backbone.type == 'mmposenc.PVTPEG':
        backbone.arch = dict(embed_dims=[32, 64, 128, 128], num_heads=[1, 1, 2, 2],
                             mlp_ratios=[2, 2, 2, 2], depths=[1, 1, 1, 1],
                             sr_ratios=[8, 4, 2, 1])
        channels = [backbone.arch['embed_dims'][i] for i in backbone.out_indices]
    else:
        raise ValueError(f'no narrowing for {backbone.type}')
    necks = model.get('neck', None)
    necks = necks if isinstance(necks, list) else [necks] if necks else []
    if necks and necks[0].type == 'mmposenc.SimplePyramid':
        necks[0].in_channels = WIDTH
    if necks:
        necks[-1].in_channels = channels
    if 'encoder' in model:  # the DETR family
        model.encoder.num_layers = 2
        model.decoder.num_layers = 2
        model.num_queries = 100
    elif 'panoptic_head' in model:  # Mask2Former
        head = model.panoptic_head
        head.in_channels = channels
        head.num_queries = 50
        head.pixel_decoder.encoder.num_layers = 1
        head.transformer_decoder.num_layers = 3
        model.data_preprocessor.batch_augments = None  # no 1024 x 1024 padding in training
    elif 'bbox_head' in model:  # RetinaNet
        necks[-1].out_channels = WIDTH
        model.bbox_head.update(in_channels=WIDTH, feat_channels=WIDTH, stacked_convs=2)
    else:  # Mask R-CNN
        necks[-1].out_channels = WIDTH
        model.rpn_head.update(in_channels=WIDTH, feat_channels=WIDTH)
        roi = model.roi_head
        roi.bbox_roi_extractor.out_channels = WIDTH
        roi.bbox_head.update(in_channels=WIDTH, fc_out_channels=2 * WIDTH)
        roi.mask_roi_extractor.out_channels = WIDTH
        roi.mask_head.update(in_channels=WIDTH, conv_out_channels=WIDTH, num_convs=2)


def cpu_scale(cfg, data_root: str, iters: int, batch_size: int, num_images=None) -> None:
    """The shipped ``cfg`` made CPU-sized and pointed at COCO128 for training and test (in
    place): :func:`narrow_model`, images resized to at most :data:`SCALE`, AdamW from scratch
    for ``iters`` iterations, no validation during training."""
    from mmposenc.utils.tools.coco128 import innermost_dataset, point_at_coco
    narrow_model(cfg.model)
    point_at_coco(cfg, data_root)
    train = innermost_dataset(cfg.train_dataloader.dataset)
    load_ann = next(t for t in train.pipeline if t['type'] == 'LoadAnnotations')
    train.pipeline = [dict(type='LoadImageFromFile'), load_ann,
                      dict(type='Resize', scale=SCALE, keep_ratio=True),
                      dict(type='RandomFlip', prob=0.5), dict(type='PackDetInputs')]
    train.filter_cfg = dict(filter_empty_gt=True, min_size=1)
    if num_images:
        train.indices = num_images
    cfg.train_dataloader.update(batch_size=batch_size, num_workers=0,
                                persistent_workers=False)
    test = innermost_dataset(cfg.test_dataloader.dataset)
    for t in test.pipeline:
        if t['type'] == 'Resize':
            t['scale'] = SCALE
    cfg.val_dataloader = cfg.val_cfg = cfg.val_evaluator = None
    cfg.train_cfg = dict(type='IterBasedTrainLoop', max_iters=iters, val_interval=iters + 1)
    cfg.param_scheduler = [
        dict(type='LinearLR', start_factor=0.01, by_epoch=False, begin=0,
             end=min(100, iters)),
        dict(type='MultiStepLR', by_epoch=False, milestones=[int(iters * 0.8)], gamma=0.1)]
    cfg.optim_wrapper.optimizer = dict(type='AdamW', lr=2e-4, weight_decay=1e-4)
    cfg.optim_wrapper.clip_grad = dict(max_norm=1.0, norm_type=2)
    cfg.optim_wrapper.pop('paramwise_cfg', None)  # no backbone lr multiplier from scratch
    cfg.default_hooks.checkpoint = dict(type='CheckpointHook', interval=iters, by_epoch=False,
                                        max_keep_ckpts=1)
    cfg.default_hooks.logger = dict(type='LoggerHook', interval=min(50, iters))
    cfg.log_processor = dict(by_epoch=False)
    cfg.randomness = dict(seed=0)
    cfg.pop('auto_scale_lr', None)
    cfg.pop('visualizer', None)
    cfg.default_hooks.pop('visualization', None)


def write_config(label: str, path: str, args) -> None:
    """The CPU-scale config of ``label``, dumped to ``path`` as a file the standard tools
    run."""
    from mmposenc.utils.tools.runner import load_config
    cfg = load_config(osp.join(REPO_ROOT, FAMILIES[label]),
                      work_dir=osp.join(osp.abspath(args.out_dir), label))
    cpu_scale(cfg, osp.abspath(args.data_root), args.iters, args.batch_size,
              args.num_images)
    os.makedirs(osp.dirname(path), exist_ok=True)
    cfg.dump(path)


def run(cmd, log):
    """``cmd`` from the repository root, its output appended to ``log``; seconds taken."""
    t0 = time.perf_counter()
    with open(log, 'a') as f:
        f.write('$ ' + ' '.join(cmd) + '\n')
        f.flush()
        subprocess.run(cmd, cwd=REPO_ROOT, stdout=f, stderr=subprocess.STDOUT, check=True)
    return time.perf_counter() - t0


def study(label: str, args) -> list:
    """Train ``label`` (skipped when its checkpoint exists) and evaluate it at the batch
    sizes; with ``args.off`` also the same weights with the padding-exact switch off (the
    hosts' computation). Its rows (batch_size_eval's JSON rows, the training's seconds) are
    also written to ``<out-dir>/runs/<label>[__off].json`` and read back from there (with
    ``args.reevaluate`` evaluated again, the training's seconds kept)."""
    out = osp.abspath(args.out_dir)
    work = osp.join(out, label)
    ckpt = osp.join(work, f'iter_{args.iters}.pth')
    log = osp.join(out, 'runs', f'{label}.log')
    os.makedirs(osp.dirname(log), exist_ok=True)
    config = osp.join(out, 'configs', f'{label}.py')
    rows = []
    for switch in ('on', 'off') if args.off else ('on', ):
        row_file = osp.join(out, 'runs', f'{label}{"__off" if switch == "off" else ""}.json')
        old = None
        if osp.isfile(row_file):
            with open(row_file) as f:
                old = json.load(f)
            if not args.reevaluate:
                rows.append(old)
                continue
        if not osp.isfile(ckpt) or not osp.isfile(config):
            write_config(label, config, args)
        train_s = 0. if osp.isfile(ckpt) else run(
            [sys.executable, 'tools/train.py', config, '--work-dir', work], log)
        if old and not train_s:  # the same checkpoint, evaluated again
            train_s = old['train_seconds']
        name = label if switch == 'on' else f'{label} (off)'
        result = osp.join(work, f'batch_size_eval_{switch}.json')
        eval_cmd = [sys.executable, 'tools/analysis/batch_size_eval.py', '--keep-data',
                    '--model', name, config if switch == 'on' else f'off:{config}', ckpt,
                    '--batch-sizes', *map(str, args.batch_sizes),
                    '--work-dir', osp.join(work, f'eval_{switch}'), '--out', result]
        if args.num_images:
            eval_cmd += ['--num-images', str(args.num_images)]
        run(eval_cmd, log)
        with open(result) as f:
            row = json.load(f)[0]
        row.update(shipped=FAMILIES[label], switch=switch, iters=args.iters,
                   train_batch_size=args.batch_size, train_seconds=train_s)
        with open(row_file, 'w') as f:
            json.dump(row, f, indent=1)
        rows.append(row)
    return rows


def table(rows) -> str:
    """Markdown: per model, the mAP at each batch size (box / mask for instance masks) and
    whether each image's detections are those of batch 1."""
    sizes = [r['batch_size'] for r in rows[0]['runs']]
    lines = ['| model (shipped config) | train iters | ' + ' | '.join(
        f'mAP b{b}' for b in sizes) + ' | ' + ' | '.join(
        f'b{b} vs b1: images the same (max score / box diff)' for b in sizes[1:]) + ' |'
        + ' train s |',
        '|' + '---|' * (2 + 2 * len(sizes))]
    for row in rows:
        cells = [f"{row['model']} (`{row['shipped']}`)", str(row['iters'])]
        if row.get('switch') == 'off':
            cells[1] = 'same weights'
        cells += [f"{r['mAP']:.4f}" + (f" / {r['segm_mAP']:.4f}" if 'segm_mAP' in r else '')
                  for r in row['runs']]  # as batch_size_eval's table
        cells += [f"{r['same_images']}/{r['images']} ({r['max_score_diff']:.1e} / "
                  f"{r['max_matched_box_diff']:.1e} px)" for r in row['runs'][1:]]
        cells.append(f"{row['train_seconds']:.0f}" if row['train_seconds'] else '-')
        lines.append('| ' + ' | '.join(cells) + ' |')
    return '\n'.join(lines) + '\n'


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--only', nargs='+', choices=sorted(FAMILIES), help='these families')
    parser.add_argument('--iters', type=int, default=1000)
    parser.add_argument('--batch-size', type=int, default=4, help='training batch size')
    parser.add_argument('--batch-sizes', type=int, nargs='+', default=[1, 2, 8],
                        help='test batch sizes (1 first: the reference)')
    parser.add_argument('--num-images', type=int, help='the first N images only')
    parser.add_argument('--data-root', default=osp.join(osp.dirname(REPO_ROOT), 'shared',
                                                         'data', 'coco128'))
    parser.add_argument('--out-dir', default='work_dirs/batch_exact_map')
    parser.add_argument('--off', action='store_true', help='also evaluate each checkpoint '
                        'with the padding-exact switch off (the hosts\' computation)')
    parser.add_argument('--reevaluate', action='store_true', help='evaluate the trained '
                        'checkpoints again (rows written before, e.g. without the mask mAP)')
    parser.add_argument('--quick', action='store_true',
                        help='smoke run: 2 iterations, 4 images, batch 1 and 2, DETR only, '
                        'switch on and off')
    args = parser.parse_args(argv)
    if args.quick:
        args.iters, args.batch_size, args.num_images = 2, 2, 4
        args.batch_sizes, args.only, args.off = [1, 2], args.only or ['detr'], True
    return args


def main(argv=None):
    args = parse_args(argv)
    rows = [row for label in (args.only or FAMILIES) for row in study(label, args)]
    out = osp.abspath(args.out_dir)
    with open(osp.join(out, 'batch_exact_map.json'), 'w') as f:
        json.dump(rows, f, indent=1)
    text = table(rows)
    with open(osp.join(out, 'batch_exact_map.md'), 'w') as f:
        f.write(text)
    print(text)
    return rows


if __name__ == '__main__':
    main()
