"""A literal, unfused transcription of the official PerViT computation (juhongm999/pervit,
``model/pervit.py`` and ``model/utils.py``) on an official-layout state dict, for parity tests.

It follows the official code step by step: a padded grid of normalised coordinates, the full
``(N_pad, N_pad, D_r)`` distance embedding, per-query convolutions over the whole padded key
grid, ``exp(dots - max) * Phi_p`` and L1 row normalisation. The only generalisation is that
the grid may be ``H x W`` (the official code is square only); at 14 x 14 it is the official
computation. Also builds random official-layout state dicts (key names and shapes of the
official ``VisionTransformer``).
"""
import math
from collections import OrderedDict

import torch
import torch.nn.functional as F


def official_grid_1d(n, pad_size, dtype=torch.float64):
    grid = torch.linspace(-1, 1, n, dtype=dtype)
    if pad_size > 0:
        pad_dist = torch.cumsum((grid[-1] - grid[-2]).repeat(pad_size), dim=0)
        grid = torch.cat([(-1 - pad_dist).flip(dims=[0]), grid, 1 + pad_dist])
    return grid


def official_rpe(hw_shape, pad_size=2, dtype=torch.float64):
    """``OffsetGenerator.get_qk_vec().norm(dim=-1, keepdim=True)``: ``(N_pad, N_pad, 1)``."""
    gy = official_grid_1d(hw_shape[0], pad_size, dtype)
    gx = official_grid_1d(hw_shape[1], pad_size, dtype)
    hp, wp = len(gy), len(gx)
    grid = torch.stack([gy.view(-1, 1).repeat(1, wp), gx.view(1, -1).repeat(hp, 1)],
                       dim=-1).view(-1, 2)
    n = grid.shape[0]
    qk_vec = grid.view(1, -1, 2).repeat(n, 1, 1) - grid.view(-1, 1, 2).repeat(1, n, 1)
    return qk_vec.norm(p=2, dim=-1, keepdim=True)


def official_rpe_proj(sd, hw_shape, prefix=''):
    """``VisionTransformer.get_rpe()``: ``rpe_proj(rpe)``, ``(N_pad, N_pad, D_r)``."""
    rpe = official_rpe(hw_shape, dtype=sd[prefix + 'rpe_proj.weight'].dtype)
    return F.linear(rpe, sd[prefix + 'rpe_proj.weight'], sd[prefix + 'rpe_proj.bias'])


def official_phi_p(sd, p, rpe, hw_shape, remove_pad=2):
    """``PeripheralPositionEncoding.forward`` of block prefix ``p``: ``(1, heads, N, N)``."""
    h, w = hw_shape
    hp, wp = h + 2 * remove_pad, w + 2 * remove_pad
    d = rpe.shape[-1]
    x = rpe.reshape(hp, wp, hp, wp, d).permute(4, 0, 1, 2, 3)  # d i j k l
    x = x[:, remove_pad:-remove_pad, remove_pad:-remove_pad]
    x = x.permute(1, 2, 0, 3, 4).reshape(h * w, d, hp, wp)  # (i j) d k l
    x = F.conv2d(x, sd[p + 'conv1.weight'], sd[p + 'conv1.bias'])
    x = F.group_norm(x, x.shape[1], sd[p + 'gn1.weight'], sd[p + 'gn1.bias'])
    x = F.relu(x)
    x = F.conv2d(x, sd[p + 'conv2.weight'], sd[p + 'conv2.bias'])
    x = F.group_norm(x, x.shape[1], sd[p + 'gn2.weight'], sd[p + 'gn2.bias'])
    y = x.reshape(h * w, -1, h * w).transpose(0, 1)[None]  # () h (i j) (k l)
    return torch.sigmoid(y)


def official_mpa(sd, p, x, rpe, hw_shape, num_heads):
    """``MPA.forward``: exp of the scaled dot product, times Phi_p, L1 row-normalised."""
    b, n, c = x.shape
    q, k, v = F.linear(x, sd[p + 'to_qkv.weight']).chunk(3, dim=-1)
    q, k, v = (t.reshape(b, n, num_heads, c // num_heads).transpose(1, 2) for t in (q, k, v))
    dots = torch.matmul(q, k.transpose(-1, -2)) * (c // num_heads)**-0.5
    weight = official_phi_p(sd, p + 'activation.', rpe, hw_shape)
    dots = torch.exp(dots - torch.max(dots, -1, keepdim=True)[0])
    attn = F.normalize(weight * dots, p=1, dim=-1)
    out = torch.matmul(attn, v).transpose(1, 2).reshape(b, n, c)
    return F.linear(out, sd[p + 'proj.weight'], sd[p + 'proj.bias'])


def official_block(sd, i, x, rpe, hw_shape, num_heads, eps=1e-6):
    """``Block.forward`` (CPE without residual, pre-norm MPA, MLP and res_path)."""
    p = f'blocks.{i}.'
    b, n, c = x.shape
    y = x.transpose(1, 2).reshape(b, c, *hw_shape)
    y = F.conv2d(y, sd[p + 'conv.proj.weight'], sd[p + 'conv.proj.bias'], padding=1, groups=c)
    y = y.flatten(2).transpose(1, 2)
    y = F.layer_norm(y, (c, ), sd[p + 'norm1.weight'], sd[p + 'norm1.bias'], eps)
    x = x + official_mpa(sd, p + 'attn.', y, rpe, hw_shape, num_heads)
    z = F.layer_norm(x, (c, ), sd[p + 'norm2.weight'], sd[p + 'norm2.bias'], eps)
    z = F.linear(F.gelu(F.linear(z, sd[p + 'mlp.fc1.weight'], sd[p + 'mlp.fc1.bias'])),
                 sd[p + 'mlp.fc2.weight'], sd[p + 'mlp.fc2.bias'])
    if p + 'res_path.weight' in sd:
        x = F.linear(x, sd[p + 'res_path.weight'], sd[p + 'res_path.bias'])
    return x + z


def official_forward(sd, img, num_heads, depth, eps=1e-6):
    """``VisionTransformer.forward`` in eval mode: logits ``(B, num_classes)``."""
    x = img
    i = 0
    while f'conv_layers.conv_layers.{i}.0.weight' in sd:
        p = f'conv_layers.conv_layers.{i}.'
        x = F.conv2d(x, sd[p + '0.weight'], sd[p + '0.bias'], stride=2, padding=1)
        x = F.batch_norm(x, sd[p + '1.running_mean'], sd[p + '1.running_var'],
                         sd[p + '1.weight'], sd[p + '1.bias'], False, 0.1, 1e-5)
        x = F.relu(x)
        i += 1
    x = F.conv2d(x, sd['conv_layers.conv1x1.weight'], sd['conv_layers.conv1x1.bias'])
    hw_shape = tuple(x.shape[2:])
    x = x.flatten(2).transpose(1, 2)
    rpe = official_rpe_proj(sd, hw_shape)
    for b in range(depth):
        x = official_block(sd, b, x, rpe, hw_shape, num_heads, eps)
    x = F.layer_norm(x, (x.shape[-1], ), sd['norm.weight'], sd['norm.bias'], eps)
    return F.linear(x.mean(dim=1), sd['head.weight'], sd['head.bias'])


def random_official_state_dict(emb_dims, convstem_dims, num_heads, num_classes=10,
                               stages=(2, 2, 6, 2), dtype=torch.float64, seed=0):
    """Random tensors under the official key names and shapes (``pervit_tiny`` etc. use
    ``emb_dims``/``convstem_dims``/``num_heads`` of ``model/models.py``)."""
    g = torch.Generator().manual_seed(seed)

    def rnd(*shape, scale=0.1, offset=0.):
        return torch.randn(*shape, generator=g, dtype=dtype) * scale + offset

    sd = OrderedDict()
    for i in range(len(convstem_dims) - 1):
        cin, cout = convstem_dims[i], convstem_dims[i + 1]
        p = f'conv_layers.conv_layers.{i}.'
        sd[p + '0.weight'] = rnd(cout, cin, 3, 3, scale=1 / math.sqrt(9 * cin))
        sd[p + '0.bias'] = rnd(cout)
        sd[p + '1.weight'] = rnd(cout, offset=1.)
        sd[p + '1.bias'] = rnd(cout)
        sd[p + '1.running_mean'] = rnd(cout)
        sd[p + '1.running_var'] = rnd(cout).abs() + 0.5
        sd[p + '1.num_batches_tracked'] = torch.tensor(7)
    c0 = convstem_dims[-1]
    sd['conv_layers.conv1x1.weight'] = rnd(c0, c0, 1, 1, scale=1 / math.sqrt(c0))
    sd['conv_layers.conv1x1.bias'] = rnd(c0)
    dr = 4 * num_heads
    sd['rpe_proj.weight'] = rnd(dr, 1, scale=0.02, offset=-0.02)
    sd['rpe_proj.bias'] = rnd(dr, scale=0.01)
    dims = [d for d, n in zip(emb_dims, stages) for _ in range(n)]
    dims.append(dims[-1])
    depth = len(dims) - 1
    for b in range(depth):
        c, nxt = dims[b], dims[b + 1]
        p = f'blocks.{b}.'
        sd[p + 'norm1.weight'] = rnd(c, offset=1.)
        sd[p + 'norm1.bias'] = rnd(c)
        if c != nxt:
            sd[p + 'res_path.weight'] = rnd(nxt, c, scale=1 / math.sqrt(c))
            sd[p + 'res_path.bias'] = rnd(nxt)
        a = p + 'attn.'
        sd[a + 'activation.conv1.weight'] = rnd(dr, dr, 3, 3, scale=0.02, offset=0.02)
        sd[a + 'activation.conv1.bias'] = rnd(dr, scale=0.01)
        sd[a + 'activation.conv2.weight'] = rnd(num_heads, dr, 3, 3, scale=0.02, offset=0.02)
        sd[a + 'activation.conv2.bias'] = rnd(num_heads, scale=0.01)
        sd[a + 'activation.gn1.weight'] = rnd(dr, offset=1.)
        sd[a + 'activation.gn1.bias'] = rnd(dr)
        sd[a + 'activation.gn2.weight'] = rnd(num_heads, scale=0.5, offset=1.)
        sd[a + 'activation.gn2.bias'] = rnd(num_heads, scale=1.)
        sd[a + 'to_qkv.weight'] = rnd(3 * c, c, scale=1 / math.sqrt(c))
        sd[a + 'proj.weight'] = rnd(c, c, scale=1 / math.sqrt(c))
        sd[a + 'proj.bias'] = rnd(c)
        sd[p + 'conv.proj.weight'] = rnd(c, 1, 3, 3, scale=0.3)
        sd[p + 'conv.proj.bias'] = rnd(c)
        sd[p + 'norm2.weight'] = rnd(c, offset=1.)
        sd[p + 'norm2.bias'] = rnd(c)
        sd[p + 'mlp.fc1.weight'] = rnd(4 * c, c, scale=1 / math.sqrt(c))
        sd[p + 'mlp.fc1.bias'] = rnd(4 * c)
        sd[p + 'mlp.fc2.weight'] = rnd(nxt, 4 * c, scale=1 / math.sqrt(4 * c))
        sd[p + 'mlp.fc2.bias'] = rnd(nxt)
    sd['norm.weight'] = rnd(dims[-1], offset=1.)
    sd['norm.bias'] = rnd(dims[-1])
    sd['head.weight'] = rnd(num_classes, dims[-1], scale=1 / math.sqrt(dims[-1]))
    sd['head.bias'] = rnd(num_classes)
    return sd


def check_gradients(model, rel_tol=1e-5):
    """Every parameter of ``model`` has a finite gradient, nonzero except the biases of the
    peripheral projections that an instance norm follows: the norm subtracts the mean over
    the keys, so such a bias cancels and its gradient is zero up to rounding (the official
    code has these biases too)."""
    from mmposenc.models.layers import PeripheralPositionEncoding
    cancelled = set()
    for m in model.modules():
        if isinstance(m, PeripheralPositionEncoding):
            if m.norm1 is not None:
                cancelled.add(id(m.proj1.bias))
            if m.norm2 is not None:
                cancelled.add(id(m.proj2.bias))
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    for name, p in named:
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
    scale = max(float(p.grad.abs().max()) for n, p in named if id(p) not in cancelled)
    for name, p in named:
        if id(p) in cancelled:
            assert float(p.grad.abs().max()) <= rel_tol * scale, name
        else:
            assert p.grad.abs().sum() > 0, name
