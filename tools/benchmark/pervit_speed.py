"""Speed and memory of mmposenc's MPA against the official PerViT formulation and plain MHSA.

All numbers are ratios measured in one process (speed) or in fresh child processes (memory);
nothing here is an absolute claim about other machines.

Speed (PerViT-T block: dim 192, 4 heads, 14 x 14 tokens, batch 8; median of ``--iters``):
  * eval:  our MPA with Phi_p cached (fused attention + additive ``log Phi_p``) vs plain MHSA
    (qkv + ``scaled_dot_product_attention`` + proj) and vs the official formulation with its
    cached weight (``init_rpe``: ``exp(dots - max) * Phi_p``, L1 normalise);
  * train: forward + backward of the same modules; Phi_p is recomputed every step by both
    PerViT variants (ours: offset-map P1 + query chunks; official: ``rpe_proj`` of the full
    padded ``N_pad x N_pad`` grid + per-query convolutions).
  Attention modules alone and whole PerViT blocks (CPE + norms + attention + MLP) are reported.

Memory of Phi_p for one block at ``--mem-hw`` tokens (default 50 x 84, i.e. 800 x 1333 at
stride 16): peak resident-set growth of a fresh child process while it computes Phi_p (eval:
``no_grad`` forward; train: forward + backward with a given upstream gradient, which is
allocated before the baseline for both variants). Method: ``resource.getrusage(RUSAGE_SELF)
.ru_maxrss`` after the call minus the RSS (``/proc/self/statm``) just before it.

Usage:
    python tools/benchmark/pervit_speed.py                    # everything
    python tools/benchmark/pervit_speed.py --skip-official-memory --mem-hw 25 42
"""
import argparse
import json
import os
import os.path as osp
import resource
import statistics
import subprocess
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


# this checkout's mmposenc first (a tool of a clone imports the clone's, installed or not)
sys.path.insert(0, osp.dirname(osp.dirname(osp.dirname(osp.realpath(__file__)))))
from mmposenc.models.backbones.pervit import PerViTBlock  # noqa: E402
from mmposenc.models.layers import MPA, PeripheralPositionEncoding  # noqa: E402


# ------------------------------------------------------------------- the official formulation
def official_padded_distances(hw_shape, pad=2):
    """``OffsetGenerator``: distances on the grid padded by ``pad``: ``(N_pad, N_pad, 1)``."""
    axes = []
    for n in hw_shape:
        g = torch.linspace(-1, 1, n)
        step = g[-1] - g[-2]
        ext = torch.cumsum(step.repeat(pad), 0)
        axes.append(torch.cat([(-1 - ext).flip(0), g, 1 + ext]))
    gy, gx = torch.meshgrid(*axes, indexing='ij')
    grid = torch.stack([gy, gx], -1).reshape(-1, 2)
    return (grid[None] - grid[:, None]).norm(dim=-1, keepdim=True)


def official_phi_p(ppe: PeripheralPositionEncoding, rpe_proj, hw_shape, pad=2):
    """The official ``PeripheralPositionEncoding.forward`` with our module's weights."""
    h, w = hw_shape
    hp, wp = h + 2 * pad, w + 2 * pad
    d = rpe_proj.shape[-1]
    x = rpe_proj.reshape(hp, wp, hp, wp, d).permute(4, 0, 1, 2, 3)[:, pad:-pad, pad:-pad]
    x = x.permute(1, 2, 0, 3, 4).reshape(h * w, d, hp, wp)
    x = F.relu(ppe.norm1(ppe.proj1(x)))
    x = ppe.norm2(ppe.proj2(x))
    return torch.sigmoid(x.reshape(h * w, -1, h * w).transpose(0, 1))[None]


class OfficialMPA(nn.Module):
    """The official MPA computation (unfused) sharing the weights of one of our MPAs."""

    def __init__(self, mpa: MPA):
        super().__init__()
        self.mpa = mpa
        self.rpe = None
        self.weight = None

    def init_rpe(self, hw_shape):  # official eval path: cache Phi_p once
        with torch.no_grad():
            self.weight = official_phi_p(self.mpa.ppe, self.get_rpe(hw_shape), hw_shape)

    def get_rpe(self, hw_shape):
        if self.rpe is None or self.rpe[0] != tuple(hw_shape):
            self.rpe = (tuple(hw_shape), official_padded_distances(hw_shape))
        e = self.mpa.ppe.dist_embed
        return F.linear(self.rpe[1], e.weight, e.bias)

    def forward(self, x, hw_shape):
        m = self.mpa
        b, n, c = x.shape
        q, k, v = m.qkv(x).reshape(b, n, 3, m.num_heads, m.head_dims).permute(2, 0, 3, 1, 4)
        dots = torch.matmul(q, k.transpose(-1, -2)) * m.scale
        weight = self.weight if (self.weight is not None and not self.training) else \
            official_phi_p(m.ppe, self.get_rpe(hw_shape), hw_shape)
        attn = F.normalize(weight * torch.exp(dots - dots.amax(-1, keepdim=True)), p=1, dim=-1)
        out = torch.matmul(attn, v).transpose(1, 2).reshape(b, n, c)
        return m.proj(out)


class MHSA(nn.Module):
    """Plain multi-head self-attention (fused ``scaled_dot_product_attention``)."""

    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x, hw_shape):
        b, n, c = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads).permute(
            2, 0, 3, 1, 4)
        out = F.scaled_dot_product_attention(q, k, v)
        return self.proj(out.transpose(1, 2).reshape(b, n, c))


# ------------------------------------------------------------------------------------ speed
def interleaved(fns, iters, warmup=5, rounds=5):
    """Median per function over ``rounds`` interleaved rounds (fair under background load)."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    samples = {k: [] for k in fns}
    per_round = max(1, iters // rounds)
    for _ in range(rounds):
        for k, fn in fns.items():
            for _ in range(per_round):
                t = time.perf_counter()
                fn()
                samples[k].append(time.perf_counter() - t)
    return {k: statistics.median(v) * 1e3 for k, v in samples.items()}


def speed(args):
    torch.manual_seed(0)
    hw = (args.hw, args.hw)
    dim, heads, batch = 192, 4, 8
    x = torch.randn(batch, hw[0] * hw[1], dim)
    ours = MPA(dim, heads)
    official = OfficialMPA(ours)
    mhsa = MHSA(dim, heads)

    # sanity: the official formulation and ours agree on the same weights
    with torch.no_grad():
        ours.eval()
        official.eval()
        official.init_rpe(hw)
        diff = (ours(x, hw) - official(x, hw)).abs().max().item()
    print(f'max |ours - official| on identical weights: {diff:.2e}')

    def evaluator(m):
        def fn():
            with torch.no_grad():
                m(x, hw)
        return fn

    xg = x.clone().requires_grad_()

    def trainer(m):
        def fn():
            m.zero_grad(set_to_none=True)
            m(xg, hw).sum().backward()
        return fn

    results = {}
    for m in (ours, official, mhsa):
        m.eval()
    official.init_rpe(hw)
    ours(x, hw)  # fill the cache
    t = interleaved({'ours': evaluator(ours), 'official': evaluator(official),
                     'mhsa': evaluator(mhsa)}, args.iters)
    results['attn_eval'] = t
    for m in (ours, official, mhsa):
        m.train()
    t = interleaved({'ours': trainer(ours), 'official': trainer(official),
                     'mhsa': trainer(mhsa)}, args.iters)
    results['attn_train'] = t

    # whole blocks: the same PerViT block with MPA, the official MPA, or MHSA
    blk = PerViTBlock(dim, heads)
    blk_off = PerViTBlock(dim, heads)
    blk_off.load_state_dict(blk.state_dict())
    blk_off.attn = OfficialMPA(blk_off.attn)
    blk_mhsa = PerViTBlock(dim, heads)
    blk_mhsa.attn = MHSA(dim, heads)
    for b in (blk, blk_off, blk_mhsa):
        b.eval()
    blk_off.attn.init_rpe(hw)
    blk(x, hw)
    results['block_eval'] = interleaved(
        {'ours': evaluator(blk), 'official': evaluator(blk_off), 'mhsa': evaluator(blk_mhsa)},
        args.iters)
    for b in (blk, blk_off, blk_mhsa):
        b.train()
    results['block_train'] = interleaved(
        {'ours': trainer(blk), 'official': trainer(blk_off), 'mhsa': trainer(blk_mhsa)},
        args.iters)

    print(f'\nspeed: batch {batch}, dim {dim}, {heads} heads, {hw[0]}x{hw[1]} tokens, '
          f'{torch.get_num_threads()} threads, median ms')
    print(f'{"case":<12} {"ours":>9} {"official":>9} {"MHSA":>9} {"ours/MHSA":>10} '
          f'{"official/MHSA":>14} {"official/ours":>14}')
    for case, t in results.items():
        print(f'{case:<12} {t["ours"]:9.2f} {t["official"]:9.2f} {t["mhsa"]:9.2f} '
              f'{t["ours"] / t["mhsa"]:10.2f} {t["official"] / t["mhsa"]:14.2f} '
              f'{t["official"] / t["ours"]:14.2f}')
    return results


# ----------------------------------------------------------------------------------- memory
def _rss_bytes():
    with open('/proc/self/statm') as f:
        return int(f.read().split()[1]) * os.sysconf('SC_PAGE_SIZE')


def memory_child(variant, mode, hw):
    """Runs in a fresh process; prints JSON with the peak RSS growth of one Phi_p call."""
    torch.manual_seed(0)
    torch.set_num_threads(int(os.environ.get('PERVIT_BENCH_THREADS', '2')))
    mpa = MPA(192, 4)
    ppe = mpa.ppe
    n = hw[0] * hw[1]
    grad = torch.randn(4, n, n)
    if variant == 'official':
        official = OfficialMPA(mpa)
        official.rpe = (tuple(hw), official_padded_distances(hw))  # part of the model state

        def call():
            phi = official_phi_p(ppe, official.get_rpe(hw), hw)
            if mode == 'train':
                phi.backward(grad[None])
            return phi
    else:
        def call():
            phi = ppe.compute(hw, log=True)
            if mode == 'train':
                phi.backward(grad)
            return phi

    base = _rss_bytes()
    t = time.perf_counter()
    if mode == 'eval':
        with torch.no_grad():
            out = call()
    else:
        out = call()
    elapsed = time.perf_counter() - t
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps(dict(variant=variant, mode=mode, hw=list(hw), peak_bytes=peak - base,
                          output_bytes=out.numel() * out.element_size(), seconds=elapsed)))


def memory(args):
    hw = tuple(args.mem_hw)
    variants = ['ours'] + ([] if args.skip_official_memory else ['official'])
    rows = {}
    for mode in ('eval', 'train'):
        for variant in variants:
            cmd = [sys.executable, os.path.abspath(__file__), '--memory-child', variant, mode,
                   str(hw[0]), str(hw[1])]
            res = subprocess.run(cmd, capture_output=True, text=True)
            if res.returncode != 0:
                print(f'{variant}/{mode} failed:\n{res.stderr[-2000:]}')
                continue
            rows[(variant, mode)] = json.loads(res.stdout.strip().splitlines()[-1])
    print(f'\nPhi_p peak memory for one block at {hw[0]}x{hw[1]} tokens (4 heads, D_r = D_hid '
          '= 16), peak RSS growth of a fresh process')
    print(f'{"mode":<6} {"ours (MB)":>10} {"official (MB)":>14} {"official/ours":>14} '
          f'{"ours s":>8} {"official s":>11}')
    for mode in ('eval', 'train'):
        o = rows.get(('ours', mode))
        f = rows.get(('official', mode))
        if o is None:
            continue
        off_mb = f'{f["peak_bytes"] / 2**20:14.0f}' if f else f'{"-":>14}'
        ratio = f'{f["peak_bytes"] / o["peak_bytes"]:14.1f}' if f else f'{"-":>14}'
        off_s = f'{f["seconds"]:11.1f}' if f else f'{"-":>11}'
        print(f'{mode:<6} {o["peak_bytes"] / 2**20:10.0f} {off_mb} {ratio} '
              f'{o["seconds"]:8.1f} {off_s}')
    if ('ours', 'eval') in rows:
        print(f'(the (4, N, N) float32 output itself is '
              f'{rows[("ours", "eval")]["output_bytes"] / 2**20:.0f} MB)')
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--hw', type=int, default=14, help='speed: tokens per side')
    parser.add_argument('--iters', type=int, default=30)
    parser.add_argument('--threads', type=int, default=None)
    parser.add_argument('--mem-hw', type=int, nargs=2, default=(50, 84))
    parser.add_argument('--skip-speed', action='store_true')
    parser.add_argument('--skip-memory', action='store_true')
    parser.add_argument('--skip-official-memory', action='store_true',
                        help='the official formulation needs ~4 GB (eval) / ~8 GB (train) at '
                        '50x84')
    parser.add_argument('--memory-child', nargs=4, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
        os.environ['PERVIT_BENCH_THREADS'] = str(args.threads)
    if args.memory_child:
        variant, mode, h, w = args.memory_child
        memory_child(variant, mode, (int(h), int(w)))
        return
    if not args.skip_speed:
        speed(args)
    if not args.skip_memory:
        memory(args)


if __name__ == '__main__':
    main()
