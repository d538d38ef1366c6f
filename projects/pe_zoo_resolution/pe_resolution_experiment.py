"""Resolution generalisation of position encodings on Fashion-MNIST.

Trains one small :class:`mmposenc.models.PEViT` per position encoding at a single
resolution and evaluates it, without fine-tuning, at several others (the test images are
resized bilinearly). Writes a markdown table, a JSON file with the raw numbers and a PNG
plot of accuracy vs resolution.

Fashion-MNIST comes from Debian (``apt-get install dataset-fashion-mnist``), which puts the
idx files in ``/usr/share/datasets/fashion-mnist``.

Example (15-30 minutes on 2 busy CPU cores)::

    python -m projects.pe_zoo_resolution.pe_resolution_experiment --out-dir configs/pe_zoo
"""
import argparse
import json
import math
import os
import os.path as osp
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

# Data loading, subsampling and resizing are the reproduction studies' (one copy).
from projects.common.fmnist_study import DEFAULT_ROOT, load_split, resize, subsample

#: name -> pos_encoding config of PEViT
ENCODINGS = {
    'none': dict(type='NoPositionEncoding'),
    'learnable-abs': dict(type='LearnableAbsolutePE'),
    'sincos-2d': dict(type='SinCos2dPE'),
    'rope-2d': dict(type='RoPE2d'),
    'rel-pos-bias': dict(type='RelativePositionBias2d', max_distance=7),
    'cope': dict(type='CoPE', npos_max=64),
    'cape': dict(type='CAPE2d'),
    'sape2': dict(type='SaPE2', max_pos=16),
    'sape2+abs': [dict(type='LearnableAbsolutePE'), dict(type='SaPE2', max_pos=16)],
    'peg': dict(type='PEGPositionEncoding'),
}


def build_model(pe_cfg, args):
    from mmposenc.models.backbones import PEViT
    vit = PEViT(
        arch=dict(embed_dims=args.embed_dims, num_layers=args.depth, num_heads=args.heads,
                  feedforward_channels=2 * args.embed_dims),
        pos_encoding=pe_cfg, img_size=args.train_res, patch_size=args.patch_size,
        in_channels=1, out_type='cls_token')
    vit.init_weights()
    return Classifier(vit, nn.Linear(args.embed_dims, 10))


class Classifier(nn.Module):
    """PEViT + linear head."""

    def __init__(self, vit, head):
        super().__init__()
        self.vit, self.head = vit, head

    def forward(self, x):
        return self.head(self.vit(x)[-1])


@torch.no_grad()
def evaluate(model, x, y, res, batch_size):
    model.eval()
    correct = 0
    for i in range(0, len(y), batch_size):
        logits = model(resize(x[i:i + batch_size], res))
        correct += (logits.argmax(1) == y[i:i + batch_size]).sum().item()
    return 100. * correct / len(y)


def train_one(name, pe_cfg, data, args):
    torch.manual_seed(args.seed)
    model = build_model(pe_cfg, args)
    x_tr, y_tr, x_te, y_te = data
    steps_per_epoch = len(y_tr) // args.batch_size
    total = steps_per_epoch * args.epochs
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.05)
    warmup = max(1, total // 10)
    sched = torch.optim.lr_scheduler.LambdaLR(  # linear warm-up, then cosine to 0
        opt, lambda s: (s + 1) / warmup if s < warmup else 0.5 * (1 + math.cos(
            math.pi * (s - warmup) / max(1, total - warmup))))
    gen = torch.Generator().manual_seed(args.seed)
    t0 = time.time()
    model.train()
    for epoch in range(args.epochs):
        perm = torch.randperm(len(y_tr), generator=gen)
        for s in range(steps_per_epoch):
            idx = perm[s * args.batch_size:(s + 1) * args.batch_size]
            loss = F.cross_entropy(model(resize(x_tr[idx], args.train_res)), y_tr[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
        print(f'  [{name}] epoch {epoch + 1}/{args.epochs} loss {loss.item():.3f} '
              f'({time.time() - t0:.0f}s)', flush=True)
    train_time = time.time() - t0
    acc = {r: evaluate(model, x_te, y_te, r, 500) for r in args.eval_res}
    n_pe = sum(p.numel() for p in model.vit.pos_encodings.parameters())
    return dict(acc=acc, train_time=train_time, pe_params=n_pe)


def write_outputs(results, args):
    os.makedirs(args.out_dir, exist_ok=True)
    res_list = args.eval_res
    header = ('| encoding | PE params | ' + ' | '.join(
        f'{r}px ({r // args.patch_size}x{r // args.patch_size})' + (' *train*' if r ==
                                                                   args.train_res else '')
        for r in res_list) + ' | mean off-train | train time (s) |')
    lines = [header, '|' + '---|' * (len(res_list) + 4)]
    for name, r in results.items():
        off = [r['acc'][x] for x in res_list if x != args.train_res]
        lines.append(f'| {name} | {r["pe_params"]} | ' +
                     ' | '.join(f'{r["acc"][x]:.1f}' for x in res_list) +
                     f' | {np.mean(off):.1f} | {r["train_time"]:.0f} |')
    table = '\n'.join(lines)
    with open(osp.join(args.out_dir, 'resolution_experiment.md'), 'w') as f:
        f.write(table + '\n')
    with open(osp.join(args.out_dir, 'resolution_experiment.json'), 'w') as f:
        json.dump(dict(args=vars(args), results=results), f, indent=1)
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, r in results.items():
        ax.plot(res_list, [r['acc'][x] for x in res_list], marker='o', label=name)
    ax.axvline(args.train_res, color='grey', ls='--', lw=1)
    ax.set_xlabel('test resolution (px); dashed: training resolution')
    ax.set_ylabel('top-1 accuracy (%)')
    ax.set_title(f'Fashion-MNIST, PEViT ({args.depth} layers, dim {args.embed_dims}, '
                 f'patch {args.patch_size}), no fine-tuning')
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, ncol=2)
    fig.tight_layout()
    fig.savefig(osp.join(args.out_dir, 'resolution_experiment.png'), dpi=120)
    return table


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--data-root', default=DEFAULT_ROOT)
    p.add_argument('--out-dir', default='work_dirs/pe_resolution_experiment')
    p.add_argument('--encodings', nargs='+', default=list(ENCODINGS), choices=list(ENCODINGS))
    p.add_argument('--train-size', type=int, default=4000)
    p.add_argument('--test-size', type=int, default=2000)
    p.add_argument('--epochs', type=int, default=3)
    p.add_argument('--batch-size', type=int, default=32)
    p.add_argument('--lr', type=float, default=1e-3)
    p.add_argument('--train-res', type=int, default=28)
    p.add_argument('--eval-res', type=int, nargs='+', default=[20, 28, 36, 44, 56])
    p.add_argument('--patch-size', type=int, default=4)
    p.add_argument('--embed-dims', type=int, default=32)
    p.add_argument('--depth', type=int, default=3)
    p.add_argument('--heads', type=int, default=2)
    p.add_argument('--seed', type=int, default=0)
    p.add_argument('--threads', type=int, default=2)
    return p.parse_args()


def main():
    args = parse_args()
    torch.set_num_threads(args.threads)
    if args.train_res not in args.eval_res:
        args.eval_res = sorted(args.eval_res + [args.train_res])
    x_tr, y_tr = subsample(*load_split(args.data_root, 'train'), args.train_size, args.seed)
    x_te, y_te = subsample(*load_split(args.data_root, 'test'), args.test_size, args.seed)
    print(f'train {tuple(x_tr.shape)}, test {tuple(x_te.shape)}', flush=True)
    results = {}
    for name in args.encodings:
        print(f'== {name}', flush=True)
        results[name] = train_one(name, ENCODINGS[name], (x_tr, y_tr, x_te, y_te), args)
        print(f'  {name}: ' + ', '.join(f'{r}px {a:.1f}'
                                       for r, a in results[name]['acc'].items()), flush=True)
        write_outputs(results, args)  # partial results survive an interruption
    print(write_outputs(results, args))


if __name__ == '__main__':
    main()
