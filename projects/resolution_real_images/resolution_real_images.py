"""Study 6 of the reproductions: classification across resolutions on real photos.

One recipe, one small :class:`mmposenc.models.PEViT` per position encoding (learnable
absolute PE resized bicubically, 2D sin-cos, PEG, PEG + GAP, CAPE, RoPE-Axial, RoPE-Mixed,
DINOv3-style RoPE, PerViT's PPE and no encoding), trained at one size and tested, without
fine-tuning, at square sizes below and above it and at non-square sizes; several seeds.

**Data and task.** The 128 COCO128 photos (427-640 px) stored once with their short side at
192 px (``--prepare``: JPEG quality 95, 3.3 MB, outside git); every 4th photo (by file
name) is a test photo, the other 96 train. The task is four-way rotation prediction (0 /
90 / 180 / 270 degrees; RotNet, Gidaris et al., ICLR 2018): a view is a window of a photo,
resized to the model's input size and rotated, and the label is the rotation. It needs the
spatial layout of a real scene (sky above ground, upright people and objects), its classes
are balanced by construction (chance 25 %), and the number of views is unlimited, where
object crops of the same photos give 513 boxes with both sides of at least 32 px, 142 of
them persons and at most 19 of any other class. Each size is made from the *same*
window of the stored photo (128 x 128 stored px for a square size; 128 px high and wider for
a non-square one), so a larger size shows more real detail, not interpolated pixels as the
28 px Fashion-MNIST images of study 2 do; the 90 / 270 degree views of a non-square size
are cut in the transposed shape before rotation, so every view of that size has the same
shape and the aspect ratio tells nothing about the label.

**Protocol.** Training views: a random window of a training photo (area 35-100 % of
128 x 128, aspect 3/4-4/3, anywhere in the photo), horizontal flip with probability 1/2,
a uniform rotation, resized to ``--train-res``. Test views: 8 fixed windows per test photo
(the same windows for every size, model and seed) in all four rotations, 1,024 views per
size. Resizing samples bilinearly from an antialiased 1/1, 1/2, 1/4 pyramid of each photo at
the level that downsamples by less than 2, so no size aliases. AdamW, warm-up then cosine
decay, cross-entropy (the loop of ``fmnist_study``); the seed sets the initialisation, the
views and any noise a model draws. Each (encoding, seed) is one JSON under
``<out-dir>/runs/``: finished runs are skipped, ``--jobs N`` trains N runs in parallel
processes, ``--report-only`` rebuilds the table and the plot.

Example (the run in README.md beside this file: prepare here, train on a GPU machine that returns
few files, report here)::

    python -m projects.resolution_real_images.resolution_real_images \\
        --prepare ../shared/data/coco128 --data work_dirs/coco128_photos192.npz
    python -m projects.resolution_real_images.resolution_real_images \\
        --data work_dirs/coco128_photos192.npz --device cuda --jobs 8 --deadline-s 200 \\
        --out-dir /tmp/real_resolution --bundle $OUT/real_resolution_runs.json
    python -m projects.resolution_real_images.resolution_real_images --report-only \\
        --from-bundle real_resolution_runs.json --out-dir projects/resolution_real_images/results \\
        --figure projects/resolution_real_images/results/real_resolution.png
"""
import argparse
import json
import math
import os
import os.path as osp
import time
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from projects.common import fmnist_study as fs

#: stored short side of every photo (px) and the side of a square view's window in it
SHORT_SIDE = 192
FOV = 128
#: views per test photo (each in the four rotations)
TEST_WINDOWS = 8
NUM_CLASSES = 4
CHANCE = 100. / NUM_CLASSES
MEAN = (0.485, 0.456, 0.406)  # ImageNet RGB statistics
STD = (0.229, 0.224, 0.225)

#: name -> (PEViT pos_encoding config(s), out_type, label). 'avg_featmap' has no class token.
ENCODINGS = {
    'none': ([dict(type='NoPositionEncoding')], 'cls_token', 'none'),
    'learnable-abs': ([dict(type='LearnableAbsolutePE')], 'cls_token',
                      'learnable APE (bicubic resize)'),
    'sincos-2d': ([dict(type='SinCos2dPE')], 'cls_token', '2D sin-cos'),
    'peg': ([dict(type='PEGPositionEncoding')], 'cls_token', 'PEG (cls token)'),
    'peg-gap': ([dict(type='PEGPositionEncoding')], 'avg_featmap', 'PEG + GAP'),
    'cape': ([dict(type='CAPE2d')], 'cls_token', 'CAPE'),
    'rope-axial': ([dict(type='RoPE2d')], 'cls_token', 'RoPE-Axial'),
    'rope-mixed': ([dict(type='RoPEMixed')], 'cls_token', 'RoPE-Mixed'),
    # what the runs of results/ used: one rescale draw per forward, shared by the layers
    # (DINOv3 draws per block, DINOv3RoPE's default since; rescale only, shift / jitter off)
    'rope-dinov3': ([dict(type='DINOv3RoPE', train_draw='per_forward')], 'cls_token',
                    'DINOv3-style RoPE'),
    'ppe': ([dict(type='PeripheralPE')], 'cls_token', "PerViT's PPE"),
}
REF = 'learnable-abs'
#: test sizes (H, W); the training size is added when missing
EVAL_SIZES = ((24, 24), (32, 32), (48, 48), (64, 64), (32, 48), (48, 64))


def size_key(hw: Sequence[int]) -> str:
    return f'{int(hw[0])}x{int(hw[1])}'


def parse_size(text: str) -> Tuple[int, int]:
    """``'32'`` -> (32, 32), ``'32x48'`` -> (32, 48) (height x width)."""
    parts = str(text).lower().split('x')
    try:
        hw = tuple(int(p) for p in parts)
    except ValueError:
        hw = ()
    if len(hw) == 1:
        hw = hw * 2
    if len(hw) != 2 or min(hw) < 1:
        raise argparse.ArgumentTypeError(f'a size is N or HxW (e.g. 32 or 32x48), got {text!r}')
    return hw


# ----------------------------------------------------------------------------- data
def prepare(coco_root: str, out_path: str, short_side: int = SHORT_SIDE,
            test_every: int = 4, quality: int = 95) -> dict:
    """Store every image of ``<coco_root>/train2017`` (sorted by name) with its short side
    resized to ``short_side`` (PIL's antialiased Lanczos) as a JPEG (``quality``), every
    ``test_every``-th one marked as a test photo, in one ``.npz`` (about 4 MB for COCO128).

    Returns:
        dict: ``photos``, ``test_photos``, ``bytes`` of the file.
    """
    import io

    from PIL import Image
    img_dir = osp.join(coco_root, 'train2017')
    if not osp.isdir(img_dir):
        raise FileNotFoundError(f'{img_dir} not found: --prepare takes the COCO128 root '
                                '(the folder holding train2017/), e.g. ../shared/data/coco128')
    names = sorted(n for n in os.listdir(img_dir) if n.lower().endswith(('.jpg', '.png')))
    if not names:
        raise FileNotFoundError(f'no .jpg / .png images in {img_dir}')
    arrays = {}
    for i, name in enumerate(names):
        img = Image.open(osp.join(img_dir, name)).convert('RGB')
        s = short_side / min(img.size)
        img = img.resize((max(short_side, round(img.width * s)),
                          max(short_side, round(img.height * s))), Image.LANCZOS)
        buf = io.BytesIO()
        img.save(buf, format='JPEG', quality=quality)
        arrays[f'img{i:04d}'] = np.frombuffer(buf.getvalue(), dtype=np.uint8)
    test = np.arange(len(names)) % test_every == 0
    os.makedirs(osp.dirname(osp.abspath(out_path)), exist_ok=True)
    np.savez(out_path, names=np.array(names), test=test, short_side=np.array(short_side),
             **arrays)
    return dict(photos=len(names), test_photos=int(test.sum()),
                bytes=osp.getsize(out_path))


def load_photos(path: str):
    """``(photos, names, test)`` of a :func:`prepare` file: uint8 (H, W, 3) arrays."""
    import io

    from PIL import Image
    if not osp.exists(path):
        raise FileNotFoundError(
            f'{path} not found: make it with --prepare COCO128_ROOT --data {path}')
    with np.load(path) as z:
        names = [str(n) for n in z['names']]
        photos = [np.asarray(Image.open(io.BytesIO(z[f'img{i:04d}'].tobytes())).convert('RGB'))
                  for i in range(len(names))]
        test = z['test'].astype(bool)
    return photos, names, test


class PhotoPyramid:
    """Normalised photos at scales 1, 1/2, 1/4 (2 x 2 average pooling, so antialiased),
    each level zero-padded into one (N, 3, H, W) tensor on ``device``; :meth:`views` cuts
    resized windows by bilinear sampling at the level that downsamples by less than 2."""

    def __init__(self, photos: Sequence[np.ndarray], device='cpu', levels: int = 3):
        self.sizes = torch.tensor([p.shape[:2] for p in photos], dtype=torch.float32)
        mean = torch.tensor(MEAN).view(3, 1, 1)
        std = torch.tensor(STD).view(3, 1, 1)
        self.levels = []
        imgs = [(torch.from_numpy(np.array(p, dtype=np.uint8)).permute(2, 0, 1).float() / 255.
                 - mean) / std for p in photos]
        for lvl in range(levels):
            if lvl:
                imgs = [F.avg_pool2d(x[None], 2)[0] for x in imgs]
            H = max(x.shape[1] for x in imgs)
            W = max(x.shape[2] for x in imgs)
            t = torch.zeros(len(imgs), 3, H, W)
            for i, x in enumerate(imgs):
                t[i, :, :x.shape[1], :x.shape[2]] = x
            self.levels.append(t.to(device))
        self.device = device

    def views(self, idx: torch.Tensor, boxes: torch.Tensor, out_hw: Sequence[int],
              flip: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Windows ``boxes`` (B, 4) = (y0, x0, h, w) in full-scale pixels of photos ``idx``
        (B,), resized to ``out_hw``, mirrored where ``flip``; (B, 3, H, W) on the device."""
        oh, ow = int(out_hw[0]), int(out_hw[1])
        ratio = torch.minimum(boxes[:, 2] / oh, boxes[:, 3] / ow)
        level = ratio.log2().floor().clamp(0, len(self.levels) - 1).long()
        out = torch.empty(len(idx), 3, oh, ow, device=self.device)
        ty = (torch.arange(oh) + 0.5) / oh
        tx = (torch.arange(ow) + 0.5) / ow
        for lvl in level.unique().tolist():
            sel = (level == lvl).nonzero().flatten()
            src = self.levels[lvl]
            b = boxes[sel] / 2**lvl
            txs = tx.expand(len(sel), ow)
            if flip is not None:
                txs = torch.where(flip[sel, None], 1 - txs, txs)
            ys = b[:, :1] + ty[None] * b[:, 2:3]  # (n, oh) continuous pixel coordinates
            xs = b[:, 1:2] + txs * b[:, 3:4]  # (n, ow)
            gy = 2 * ys / src.shape[2] - 1
            gx = 2 * xs / src.shape[3] - 1
            grid = torch.stack((gx[:, None, :].expand(-1, oh, -1),
                                gy[:, :, None].expand(-1, -1, ow)), dim=-1).to(self.device)
            # One grid_sample per photo, its views' grids stacked along the height: the same
            # arithmetic per output pixel as one call on the photos gathered per view (bit
            # for bit, test_views_sampled_per_photo_are_bit_identical), without copying a
            # whole photo for every view (that gather was 15 % of a CPU training step).
            photos = idx[sel]
            for p in photos.unique().tolist():
                at = (photos == p).nonzero().flatten()
                g = grid[at.to(self.device)].reshape(1, len(at) * oh, ow, 2)
                v = F.grid_sample(src[p:p + 1], g, mode='bilinear', padding_mode='border',
                                  align_corners=False)
                out[sel[at].to(self.device)] = v.view(3, len(at), oh, ow).transpose(0, 1)
        return out


def rotate(x: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """Each view ``x[i]`` rotated by ``k[i]`` x 90 degrees counter-clockwise (square views,
    or views of one k parity cut in the transposed shape for odd k)."""
    outs = [None] * 4
    for r in range(4):
        sel = (k == r).nonzero().flatten()
        if len(sel):
            outs[r] = (sel, torch.rot90(x[sel.to(x.device)], r, dims=(2, 3)))
    shape = next(o[1].shape[1:] for o in outs if o is not None)
    out = torch.empty(len(k), *shape, device=x.device)
    for o in outs:
        if o is not None:
            out[o[0].to(x.device)] = o[1]
    return out


def sample_train_batch(pyr: PhotoPyramid, train_idx: torch.Tensor, batch_size: int,
                       gen: torch.Generator, res: Sequence[int],
                       area: Sequence[float] = (0.35, 1.),
                       ratio: Sequence[float] = (3 / 4, 4 / 3)):
    """A batch of training views and their rotation labels (see the module docstring)."""
    u = torch.rand(batch_size, 5, generator=gen)
    idx = train_idx[torch.randint(len(train_idx), (batch_size, ), generator=gen)]
    a = (area[0] + (area[1] - area[0]) * u[:, 0]) * FOV**2
    log_r = math.log(ratio[0]) + (math.log(ratio[1]) - math.log(ratio[0])) * u[:, 1]
    size = pyr.sizes[idx]
    h = torch.minimum((a / log_r.exp()).sqrt(), size[:, 0])
    w = torch.minimum((a * log_r.exp()).sqrt(), size[:, 1])
    y0 = u[:, 2] * (size[:, 0] - h)
    x0 = u[:, 3] * (size[:, 1] - w)
    flip = u[:, 4] < 0.5
    k = torch.randint(4, (batch_size, ), generator=gen)
    x = pyr.views(idx, torch.stack((y0, x0, h, w), 1), res, flip)
    return rotate(x, k), k


def test_windows(pyr: PhotoPyramid, test_idx: torch.Tensor, per_photo: int = TEST_WINDOWS,
                 seed: int = 0):
    """Fixed window centres: ``per_photo`` per test photo, each square FOV inside it."""
    gen = torch.Generator().manual_seed(seed)
    idx = test_idx.repeat_interleave(per_photo)
    size = pyr.sizes[idx]
    u = torch.rand(len(idx), 2, generator=gen)
    cy = FOV / 2 + u[:, 0] * (size[:, 0] - FOV)
    cx = FOV / 2 + u[:, 1] * (size[:, 1] - FOV)
    return idx, torch.stack((cy, cx), 1)


def make_test_set(pyr: PhotoPyramid, windows, hw: Sequence[int]):
    """Every window in the four rotations at size ``hw`` (H, W): the window is ``FOV``
    stored px high and ``FOV * W / H`` wide (cut transposed for 90 / 270 degrees, shifted
    to stay inside the photo), so all sizes show the same region of the photo."""
    idx, centres = windows
    H, W = hw
    xs, ks = [], []
    for r in range(4):
        wh, ww = (FOV, FOV * W / H) if r % 2 == 0 else (FOV * W / H, FOV)
        oh, ow = (H, W) if r % 2 == 0 else (W, H)
        size = pyr.sizes[idx]
        wh_t = torch.minimum(torch.full((len(idx), ), float(wh)), size[:, 0])
        ww_t = torch.minimum(torch.full((len(idx), ), float(ww)), size[:, 1])
        y0 = (centres[:, 0] - wh_t / 2).clamp(min=0)
        y0 = torch.minimum(y0, size[:, 0] - wh_t)
        x0 = (centres[:, 1] - ww_t / 2).clamp(min=0)
        x0 = torch.minimum(x0, size[:, 1] - ww_t)
        k = torch.full((len(idx), ), r)
        v = pyr.views(idx, torch.stack((y0, x0, wh_t, ww_t), 1), (oh, ow))
        xs.append(rotate(v, k))
        ks.append(k)
    return torch.cat(xs), torch.cat(ks)


# ----------------------------------------------------------------------------- models
def build_model(variant: str, args) -> nn.Module:
    """A :class:`PEViT` classifier (3 input channels, 4 classes) with ``variant``'s encoding."""
    from mmposenc.models.backbones import PEViT
    from mmposenc.registry import MODELS
    cfgs, out_type, _ = ENCODINGS[variant]
    for c in cfgs:
        if MODELS.get('mmposenc.' + c['type']) is None:
            raise KeyError(f'{variant}: position encoding mmposenc.{c["type"]} is not '
                           'registered in this checkout; leave it out with --variants')
    vit = PEViT(
        arch=dict(embed_dims=args.embed_dims, num_layers=args.depth, num_heads=args.heads,
                  feedforward_channels=args.mlp_ratio * args.embed_dims),
        pos_encoding=[dict(c) for c in cfgs], img_size=args.train_res,
        patch_size=args.patch_size, in_channels=3, out_type=out_type,
        with_cls_token=out_type == 'cls_token')
    vit.init_weights()
    return fs.Classifier(vit, args.embed_dims, num_classes=NUM_CLASSES)


# ----------------------------------------------------------------------------- runs
def lr_lambda(total: int):
    warmup = max(1, total // 10)
    return lambda s: (s + 1) / warmup if s < warmup else 0.5 * (1 + math.cos(
        math.pi * (s - warmup) / max(1, total - warmup)))


@torch.no_grad()
def evaluate(model: nn.Module, test_sets: Dict[str, tuple], batch_size: int = 512
             ) -> Dict[str, float]:
    """Top-1 (%) on every test set (size key -> (views, labels))."""
    model.eval()
    acc = {}
    for key, (x, y) in test_sets.items():
        correct = 0
        for i in range(0, len(y), batch_size):
            pred = model(x[i:i + batch_size]).argmax(1).cpu()
            correct += (pred == y[i:i + batch_size]).sum().item()
        acc[key] = 100. * correct / len(y)
    return acc


def run_one(args, variant: str, seed: int, deadline: Optional[float] = None,
            stop: Optional[float] = None) -> Optional[dict]:
    """Train and test one (variant, seed) and store its JSON; returns the record, or None
    (nothing stored) when ``deadline`` (a ``time.time()``) has passed before it starts or
    ``stop`` while it trains."""
    if deadline is not None and time.time() > deadline:
        return None
    torch.set_num_threads(args.threads)
    fs.quiet_mmengine()
    device = torch.device(args.device)
    photos, names, test = load_photos(args.data)
    pyr = PhotoPyramid(photos, device)
    train_idx = torch.from_numpy(np.flatnonzero(~test))
    test_idx = torch.from_numpy(np.flatnonzero(test))
    windows = test_windows(pyr, test_idx, args.test_windows, args.data_seed)
    sizes = eval_sizes(args)
    test_sets = {size_key(hw): make_test_set(pyr, windows, hw) for hw in sizes}
    torch.manual_seed(seed)
    np.random.seed(seed)
    model = build_model(variant, args).to(device)
    code = fs.code_state()
    state0 = fs.machine_state()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(
        [dict(params=[p for p in params if p.ndim > 1], weight_decay=args.weight_decay),
         dict(params=[p for p in params if p.ndim <= 1], weight_decay=0.)], lr=args.lr,
        fused=device.type == 'cuda')  # one kernel per step on a GPU, same update
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda(args.steps))
    gen = torch.Generator().manual_seed(seed)
    res = (args.train_res, args.train_res)
    sync = torch.cuda.synchronize if device.type == 'cuda' else (lambda: None)
    wall0, cpu0 = time.time(), time.process_time()
    model.train()
    losses = []
    for step in range(args.steps):
        if stop is not None and step % 50 == 0 and time.time() > stop:
            print(f'  [{variant} s{seed}] stopped at step {step} by --stop-s', flush=True)
            return None
        x, y = sample_train_batch(pyr, train_idx, args.batch_size, gen, res)
        loss = F.cross_entropy(model(x), y.to(device))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        losses.append(loss.detach())
        if (step + 1) % max(1, args.steps // 4) == 0:
            print(f'  [{variant} s{seed}] step {step + 1}/{args.steps} loss '
                  f'{torch.stack(losses[-50:]).mean().item():.3f} '
                  f'({time.time() - wall0:.0f} s)', flush=True)
    sync()
    rec = dict(train_wall_s=time.time() - wall0, train_cpu_s=time.process_time() - cpu0,
               steps=args.steps,
               final_loss=float(torch.stack(losses[-max(1, args.steps // 10):]).mean()))
    wall0, cpu0 = time.time(), time.process_time()
    acc = evaluate(model, test_sets)
    rec.update(eval_wall_s=time.time() - wall0, eval_cpu_s=time.process_time() - cpu0)
    state0['device'] = (torch.cuda.get_device_name(device) if device.type == 'cuda'
                        else 'cpu')
    rec.update(
        variant=variant, seed=seed, acc=acc, params=fs.count_params(model),
        trainable_params=fs.count_params(model, True),
        model_info=dict(backbone='PEViT', embed_dims=args.embed_dims, depth=args.depth,
                        heads=args.heads, mlp_ratio=args.mlp_ratio,
                        patch_size=args.patch_size, out_type=ENCODINGS[variant][1],
                        pos_encoding=ENCODINGS[variant][0]),
        loadavg_1m_start=state0['loadavg_1m'], loadavg_1m_end=fs.machine_state()['loadavg_1m'],
        machine=state0, code=code,
        settings=dict(data=osp.basename(args.data), photos=len(names),
                      train_photos=len(train_idx), test_photos=len(test_idx),
                      test_views_per_size=len(next(iter(test_sets.values()))[1]),
                      steps=args.steps, batch_size=args.batch_size, lr=args.lr,
                      weight_decay=args.weight_decay, train_res=size_key(res),
                      data_seed=args.data_seed, device=args.device, jobs=args.jobs))
    with open(fs.run_path(args.out_dir, variant, seed), 'w') as f:
        json.dump(rec, f, indent=1)
    print(f'  [{variant} s{seed}] ' + ', '.join(f'{k} {a:.1f}' for k, a in acc.items())
          + f' (train {rec["train_wall_s"]:.0f} s wall)', flush=True)
    return rec


def eval_sizes(args) -> List[Tuple[int, int]]:
    sizes = [tuple(s) for s in args.eval_sizes]
    if (args.train_res, args.train_res) not in sizes:
        sizes.insert(0, (args.train_res, args.train_res))
    return sizes


def run_study(args) -> List[Tuple[str, int]]:
    """Run every selected (variant, seed) without a stored run, seed by seed (so a study
    stopped early has whole seeds), ``--jobs`` at a time; with ``--deadline-s`` runs not
    started by then, with ``--stop-s`` runs still training then, are left for a later call.
    Returns the runs left."""
    os.makedirs(osp.join(args.out_dir, 'runs'), exist_ok=True)
    todo = [(v, s) for s in args.seeds for v in args.variants
            if args.overwrite or not osp.exists(fs.run_path(args.out_dir, v, s))]
    print(f'[real-resolution] {len(todo)} runs to do on {args.device}, {args.jobs} at a '
          'time', flush=True)
    t0 = time.time()
    deadline = t0 + args.deadline_s if args.deadline_s else None
    stop = t0 + args.stop_s if args.stop_s else None
    left = []
    if args.jobs <= 1:
        for v, s in todo:
            if run_one(args, v, s, deadline, stop) is None:
                left.append((v, s))
            elif args.bundle:
                write_bundle(args.out_dir, args.bundle)
    else:
        import concurrent.futures as cf
        import multiprocessing as mp
        with cf.ProcessPoolExecutor(args.jobs, mp_context=mp.get_context('spawn')) as ex:
            futures = {ex.submit(run_one, args, v, s, deadline, stop): (v, s)
                       for v, s in todo}
            for fut in cf.as_completed(futures):
                if fut.result() is None:  # a failed run stops the study with its error
                    left.append(futures[fut])
                elif args.bundle:
                    write_bundle(args.out_dir, args.bundle)
        left = [vs for vs in todo if vs in left]
    print(f'[real-resolution] {len(todo) - len(left)} runs in {time.time() - t0:.0f} s wall'
          + (f'; {len(left)} left to do (--deadline-s / --stop-s): '
             + ' '.join(f'{v}:{s}' for v, s in left) if left else ''), flush=True)
    return left


def write_bundle(out_dir: str, path: str) -> int:
    """All stored runs of ``out_dir`` as one JSON list at ``path`` (written whole, then
    renamed into place: a study killed at any moment leaves a complete bundle). One file
    carries a study back from a machine that returns few files. Returns the run count."""
    recs = [r for rs in load_runs(out_dir, list(ENCODINGS)).values() for r in rs]
    os.makedirs(osp.dirname(osp.abspath(path)), exist_ok=True)
    with open(path + '.tmp', 'w') as f:
        json.dump(recs, f)
    os.replace(path + '.tmp', path)
    return len(recs)


def read_bundle(path: str, out_dir: str) -> int:
    """Store the runs of a :func:`write_bundle` file under ``<out_dir>/runs/`` (runs already
    there are kept). Returns the number of runs added."""
    with open(path) as f:
        recs = json.load(f)
    os.makedirs(osp.join(out_dir, 'runs'), exist_ok=True)
    added = 0
    for rec in recs:
        dst = fs.run_path(out_dir, rec['variant'], rec['seed'])
        if not osp.exists(dst):
            with open(dst, 'w') as f:
                json.dump(rec, f, indent=1)
            added += 1
    return added


def load_runs(out_dir: str, variants: Sequence[str]) -> Dict[str, List[dict]]:
    """Stored runs of ``variants`` (in that order), each list sorted by seed."""
    runs = {}
    run_dir = osp.join(out_dir, 'runs')
    names = sorted(os.listdir(run_dir)) if osp.isdir(run_dir) else []
    for v in variants:
        recs = []
        for name in names:
            if name.startswith(f'{v}__seed') and name.endswith('.json'):
                with open(osp.join(run_dir, name)) as f:
                    recs.append(json.load(f))
        if recs:
            runs[v] = sorted(recs, key=lambda r: r['seed'])
    return runs


# ----------------------------------------------------------------------------- report
def off_train(rec: dict) -> float:
    """Mean top-1 over the sizes other than the training size."""
    t = rec['settings']['train_res']
    return float(np.mean([a for k, a in rec['acc'].items() if k != t]))


def paired_off(runs, v: str, ref: str) -> List[float]:
    a = {r['seed']: off_train(r) for r in runs.get(v, [])}
    b = {r['seed']: off_train(r) for r in runs.get(ref, [])}
    return [a[s] - b[s] for s in sorted(set(a) & set(b))]


def ordered_sizes(rec: dict) -> List[str]:
    """Square sizes by side, then non-square ones by height."""
    keys = list(rec['acc'])
    hw = {k: parse_size(k) for k in keys}
    return sorted(keys, key=lambda k: (hw[k][0] != hw[k][1], hw[k][0], hw[k][1]))


def size_label(key: str, train: str) -> str:
    h, w = parse_size(key)
    return (f'{h} px' if h == w else f'{h}×{w}') + (' (train)' if key == train else '')


def fmt(values: Sequence[float]) -> str:
    """Mean ± std over seeds; a single seed's value alone (it has no spread)."""
    return f'{values[0]:.1f}' if len(values) == 1 else fs.fmt(values)


def table(runs: Dict[str, List[dict]], ref: str = REF) -> str:
    """Markdown: per encoding, parameters, seeds, top-1 mean ± std per size, the mean
    off the training size and its paired difference against ``ref``."""
    if not runs:
        return '(no runs)'
    first = next(iter(runs.values()))[0]
    keys = ordered_sizes(first)
    train = first['settings']['train_res']
    head = (['encoding', 'params', 'seeds'] + [size_label(k, train) for k in keys]
            + ['mean off-train', f'off-train − {ENCODINGS[ref][2]} (paired)'])
    lines = ['| ' + ' | '.join(head) + ' |', '|' + '---|' * len(head)]
    for v, recs in runs.items():
        row = [ENCODINGS[v][2], f'{recs[0]["params"]:,}', str(len(recs))]
        row += [fmt([r['acc'][k] for r in recs]) for k in keys]
        row.append(fmt([off_train(r) for r in recs]))
        row.append('—' if v == ref or ref not in runs else fmt(paired_off(runs, v, ref)))
        lines.append('| ' + ' | '.join(row) + ' |')
    return '\n'.join(lines)


def plot(runs: Dict[str, List[dict]], path: str, title: str) -> None:
    """Top-1 against test size, mean with a ±1 std band over seeds: the square sizes as
    one line, the non-square ones as another after a gap; chance dotted."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    first = next(iter(runs.values()))[0]
    keys = ordered_sizes(first)
    train = first['settings']['train_res']
    square = [k for k in keys if parse_size(k)[0] == parse_size(k)[1]]
    xs = np.array([i + (0.6 if k not in square else 0.) for i, k in enumerate(keys)])
    groups = [[i for i, k in enumerate(keys) if k in square],
              [i for i, k in enumerate(keys) if k not in square]]
    fig, ax = plt.subplots(figsize=(9, 5.2))
    cmap = plt.get_cmap('tab10')
    markers = 'osD^v<>pXh'
    for i, (v, recs) in enumerate(runs.items()):
        vals = np.array([[r['acc'][k] for k in keys] for r in recs])
        m = vals.mean(0)
        s = vals.std(0, ddof=1) if len(recs) > 1 else np.zeros_like(m)
        x = xs + 0.035 * (i - len(runs) / 2)
        for g, idx in enumerate(groups):
            if not idx:
                continue
            ax.plot(x[idx], m[idx], marker=markers[i % len(markers)], ms=4,
                    color=cmap(i % 10), label=f'{ENCODINGS[v][2]} (n={len(recs)})'
                    if g == 0 else None)
            ax.fill_between(x[idx], (m - s)[idx], (m + s)[idx], color=cmap(i % 10),
                            alpha=0.1)
    ax.axhline(CHANCE, color='grey', ls=':', lw=1)
    ax.axvline(xs[keys.index(train)], color='grey', ls='--', lw=1)
    if groups[1]:
        ax.axvline((xs[groups[0][-1]] + xs[groups[1][0]]) / 2, color='k', lw=0.6)
    ax.set_xticks(xs)
    ax.set_xticklabels([size_label(k, train) for k in keys])
    ax.set_xlabel('test size (H × W px, the same window of each photo; left: square, '
                  'right: non-square; dashed: training size, dotted: chance)', fontsize=8.5)
    ax.set_ylabel('rotation top-1 (%), mean ± std over seeds')
    ax.set_title(title, fontsize=9.5)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def report(runs: Dict[str, List[dict]], args) -> str:
    """Write ``real_resolution.md`` and the plot (``--figure``, by default
    ``real_resolution.png``) to ``--out-dir``."""
    if not runs:
        return '(no runs)'
    rec = next(iter(runs.values()))[0]
    m, st = rec['model_info'], rec['settings']
    title = (f'COCO128 rotation (4 classes, {st["train_photos"]} train / '
             f'{st["test_photos"]} test photos, {st["test_views_per_size"]} test views per '
             f'size), {st["steps"]} steps x {st["batch_size"]},\nPEViT {m["depth"]} layers, '
             f'dim {m["embed_dims"]}, patch {m["patch_size"]}, trained at {st["train_res"]}, '
             'no fine-tuning')
    try:
        plot(runs, args.figure or osp.join(args.out_dir, 'real_resolution.png'), title)
    except ImportError:  # a GPU machine with torch only: the table now, the plot later
        print('real_resolution.png not written: matplotlib is not installed here; run '
              '--report-only where it is', flush=True)
    text = '\n\n'.join([table(runs), summary(runs)]) + '\n'
    with open(osp.join(args.out_dir, 'real_resolution.md'), 'w') as f:
        f.write(text)
    return text


def summary(runs: Dict[str, List[dict]]) -> str:
    """One line: the runs, their summed time, and per device the runs made there with their
    torch, code commits (marked where the tree had uncommitted changes) and parallel jobs."""
    recs = [r for rs in runs.values() for r in rs]
    wall = sum(r['train_wall_s'] + r['eval_wall_s'] for r in recs)
    parts = []
    for device in sorted({r['machine'].get('device', '?') for r in recs}):
        on = [r for r in recs if r['machine'].get('device', '?') == device]
        torches = sorted({r['machine']['torch'] for r in on})
        commits = sorted({((r['code'] or {}).get('commit') or '?')[:7]
                          + (' with uncommitted changes'
                             if (r['code'] or {}).get('uncommitted_changes') else '')
                          for r in on})
        jobs = sorted({r['settings']['jobs'] for r in on})
        parts.append(f'{len(on)} on {device} (torch {", ".join(torches)}; code '
                     f'{", ".join(commits)}; {"/".join(map(str, jobs))} at a time)')
    return (f'{len(recs)} runs, {len(runs)} encodings x seeds '
            f'{sorted({r["seed"] for r in recs})}; summed train+eval wall '
            f'{wall / 60:.1f} min; ' + '; '.join(parts) + f'; chance {CHANCE:.0f} %')


# ----------------------------------------------------------------------------- CLI
def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--data', default='work_dirs/coco128_photos192.npz',
                   help='the photos file made by --prepare')
    p.add_argument('--prepare', metavar='COCO128_ROOT',
                   help='write --data from the images of COCO128_ROOT/train2017 and exit')
    p.add_argument('--out-dir', default='work_dirs/reproductions/real_resolution')
    p.add_argument('--variants', nargs='+', default=list(ENCODINGS), choices=list(ENCODINGS))
    p.add_argument('--seeds', type=int, nargs='+', default=[0, 1, 2])
    p.add_argument('--steps', type=int, default=2000)
    p.add_argument('--batch-size', type=int, default=256)
    p.add_argument('--lr', type=float, default=2e-3)
    p.add_argument('--weight-decay', type=float, default=0.05)
    p.add_argument('--train-res', type=int, default=32)
    p.add_argument('--eval-sizes', type=parse_size, nargs='+',
                   default=[size_key(s) for s in EVAL_SIZES],
                   help='test sizes, N or HxW (the training size is added)')
    p.add_argument('--test-windows', type=int, default=TEST_WINDOWS,
                   help='windows per test photo (each in 4 rotations)')
    p.add_argument('--data-seed', type=int, default=0, help='seed of the test windows')
    p.add_argument('--embed-dims', type=int, default=64)
    p.add_argument('--depth', type=int, default=4)
    p.add_argument('--heads', type=int, default=4)
    p.add_argument('--mlp-ratio', type=int, default=2)
    p.add_argument('--patch-size', type=int, default=4)
    p.add_argument('--device', default='cpu', help="'cpu' or 'cuda'")
    p.add_argument('--jobs', type=int, default=1, help='runs trained in parallel processes')
    p.add_argument('--threads', type=int, default=1, help='torch threads per run')
    p.add_argument('--deadline-s', type=float, default=None,
                   help='start no run after this many seconds (the rest stays to do)')
    p.add_argument('--stop-s', type=float, default=None,
                   help='abandon runs still training after this many seconds (not stored)')
    p.add_argument('--overwrite', action='store_true', help='re-run finished runs')
    p.add_argument('--bundle', help='after every run, all stored runs as one JSON file '
                   '(to bring a study back from a machine that returns few files)')
    p.add_argument('--from-bundle', metavar='BUNDLE',
                   help='first store the runs of a --bundle file under --out-dir/runs')
    p.add_argument('--figure', help='where the plot goes (default: '
                   '<out-dir>/real_resolution.png)')
    p.add_argument('--report-only', action='store_true',
                   help='only rebuild the table and the plot from the stored runs')
    p.add_argument('--quick', action='store_true',
                   help='a seconds-long smoke run (tiny model and schedule, 2 seeds)')
    args = p.parse_args(argv)
    args.eval_sizes = [parse_size(s) if isinstance(s, str) else s for s in args.eval_sizes]
    if args.quick:
        args.steps, args.batch_size, args.test_windows = 4, 16, 1
        args.embed_dims, args.depth, args.heads = 16, 1, 2
        args.seeds = args.seeds[:2]
    if args.device.startswith('cuda') and not torch.cuda.is_available():
        p.error(f'--device {args.device}: torch {torch.__version__} sees no CUDA device')
    return args


def main(argv=None):
    args = parse_args(argv)
    if args.prepare:
        info = prepare(args.prepare, args.data)
        print(f'{args.data}: {info["photos"]} photos ({info["test_photos"]} test), '
              f'{info["bytes"] / 2**20:.1f} MiB')
        return info
    if args.from_bundle:
        print(f'{read_bundle(args.from_bundle, args.out_dir)} runs added from '
              f'{args.from_bundle}')
    if not args.report_only:
        run_study(args)
    runs = load_runs(args.out_dir, list(ENCODINGS))
    print(report(runs, args))
    return runs


if __name__ == '__main__':
    main()
