"""CAPE: continuous augmented positional embeddings, 1D and 2D. See docs/methods/cape.md."""
import math
from typing import Optional, Sequence, Tuple, Union

import torch
from mmengine.model import BaseModule

from mmposenc.registry import MODELS
from .base import BasePositionEncoding


def _check_aug(max_global_shift, max_local_shift, max_global_scaling):
    if max_global_shift < 0:
        raise ValueError(f'max_global_shift must be >= 0, got {max_global_shift}')
    if not (max_local_shift == 'auto' or max_local_shift >= 0):
        raise ValueError(f"max_local_shift must be >= 0 or 'auto', got {max_local_shift!r}")
    if max_global_scaling < 1:
        raise ValueError(f'max_global_scaling must be >= 1, got {max_global_scaling}')


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype CAPE computes in: float32 for the half types (bf16, fp16), else ``dtype``."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def _uniform(shape: Sequence[int], bound: Union[float, torch.Tensor],
             like: torch.Tensor, generator: Optional[torch.Generator]) -> torch.Tensor:
    """``U(-bound, bound)`` of ``shape`` on ``like``'s device and dtype.

    With a generator the numbers are drawn on the generator's device (so a CPU generator
    seeds a module living anywhere) and moved over.
    """
    if generator is not None:
        u = torch.rand(shape, generator=generator, device=generator.device)
        u = u.to(device=like.device, dtype=like.dtype)
    else:
        u = torch.rand(shape, device=like.device, dtype=like.dtype)
    return (2 * u - 1) * bound


def _grid_dim(size: Union[int, torch.Tensor]) -> Union[int, torch.Tensor]:
    """A grid size as an int, or as the 0-dim tensor it is while tracing (ONNX export)."""
    if isinstance(size, torch.Tensor) and torch.jit.is_tracing():
        return size
    return int(size)


def masked_mean(pos: torch.Tensor, valid: Optional[torch.Tensor]) -> torch.Tensor:
    """Mean of ``pos`` (B, N) over its valid entries, shape (B, 1)."""
    if valid is None:
        return pos.mean(dim=1, keepdim=True)
    valid = valid.to(pos.dtype)
    return (pos * valid).sum(1, keepdim=True) / valid.sum(1, keepdim=True).clamp(min=1)


def cape1d_embedding(positions: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
    """Sinusoidal embedding of continuous positions.

    Args:
        positions (Tensor): Shape (B, T).
        freqs (Tensor): Angular frequencies ``w_k``, shape (C // 2,).

    Returns:
        Tensor: (B, T, C) with ``E[2k] = sin(p * w_k)`` and ``E[2k + 1] = cos(p * w_k)``.
    """
    phase = positions[..., None] * freqs
    return torch.stack((phase.sin(), phase.cos()), dim=-1).flatten(-2)


def cape2d_frequencies(embed_dims: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """The 2D frequencies of CAPE, indexed as in its Appendix A.

    ``w_{j,x} = rho_j cos j``, ``w_{j,y} = rho_j sin j``, ``rho_j = 10^((j + 1) / (K/2))``.

    Returns:
        tuple[Tensor, Tensor]: ``w_x, w_y``, each of shape ``(K // 2,)``.
    """
    half = embed_dims // 2
    j = torch.arange(half, dtype=torch.float64)
    rho = 10.0 ** ((j + 1) / half)
    return (rho * torch.cos(j)).float(), (rho * torch.sin(j)).float()


def cape2d_embedding(x: torch.Tensor, y: torch.Tensor, w_x: torch.Tensor,
                     w_y: torch.Tensor) -> torch.Tensor:
    """2D continuous embedding of positions ``(x, y)``, each of shape (B, N).

    Returns:
        Tensor: (B, N, C) with ``E[2j] = cos(pi (w_{j,x} x + w_{j,y} y))`` and
        ``E[2j + 1] = sin(...)``.
    """
    phase = math.pi * (x[..., None] * w_x + y[..., None] * w_y)
    return torch.stack((phase.cos(), phase.sin()), dim=-1).flatten(-2)


@MODELS.register_module()
class CAPE1d(BaseModule):
    """1D continuous augmented positional embedding of `CAPE
    <https://arxiv.org/abs/2106.03143>`_ for token sequences.

    Positions ``p_t = pos_scale * t`` become ``(p + delta + eps_t) * lambda`` in training.
    Padded tokens get a zero embedding and do not move the mean.

    Args:
        embed_dims (int): Even number of channels ``C``.
        max_global_shift (float): ``Delta_max``. Defaults to 0.
        max_local_shift (float): ``eps_max``, in position units. Defaults to 0.
        max_global_scaling (float): ``lambda_max >= 1``. Defaults to 1.
        normalize (bool): Mean-normalise the positions. Defaults to False.
        pos_scale (float): Distance between consecutive tokens. Defaults to 1.
        freq_scale (float): Multiplies the frequencies ``10000^(-2k/C)``. Defaults to 1.
        init_cfg (dict, optional): Initialization config. Defaults to None.

    Examples:
        >>> import torch
        >>> cape = CAPE1d(16, max_global_shift=5., normalize=True).eval()
        >>> x = torch.rand(2, 10, 16)
        >>> mask = torch.zeros(2, 10, dtype=torch.bool); mask[1, 7:] = True
        >>> cape(x, padding_mask=mask).shape
        torch.Size([2, 10, 16])
    """

    def __init__(self,
                 embed_dims: int,
                 max_global_shift: float = 0.,
                 max_local_shift: float = 0.,
                 max_global_scaling: float = 1.,
                 normalize: bool = False,
                 pos_scale: float = 1.,
                 freq_scale: float = 1.,
                 init_cfg: Optional[dict] = None):
        super().__init__(init_cfg=init_cfg)
        if not isinstance(embed_dims, int) or embed_dims < 2 or embed_dims % 2:
            raise ValueError(f'embed_dims must be a positive even int, got {embed_dims!r}')
        if max_local_shift == 'auto':
            raise ValueError("CAPE1d needs a number for max_local_shift, got 'auto'")
        _check_aug(max_global_shift, max_local_shift, max_global_scaling)
        self.embed_dims = embed_dims
        self.max_global_shift = float(max_global_shift)
        self.max_local_shift = float(max_local_shift)
        self.max_global_scaling = float(max_global_scaling)
        self.normalize = normalize
        self.pos_scale = float(pos_scale)
        self.freq_scale = float(freq_scale)
        self.register_buffer('freqs', self._float32_frequencies(), persistent=False)

    def _float32_frequencies(self, device: Optional[torch.device] = None) -> torch.Tensor:
        """``freq_scale * 10000^(-2k/C)`` in float32 (computed in float64), shape (C // 2,)."""
        k = torch.arange(self.embed_dims // 2, dtype=torch.float64)
        freqs = self.freq_scale * torch.exp(-2 * k / self.embed_dims * math.log(1e4))
        return freqs.float().to(device)

    def frequencies(self) -> torch.Tensor:
        """The frequencies to compute with: float32 ones for a module cast to bf16 / fp16."""
        if _compute_dtype(self.freqs.dtype) != self.freqs.dtype:
            return self._float32_frequencies(self.freqs.device)
        return self.freqs

    def positions(self,
                  batch_size: int,
                  num_tokens: int,
                  padding_mask: Optional[torch.Tensor] = None,
                  generator: Optional[torch.Generator] = None) -> torch.Tensor:
        """(Augmented) positions of shape (B, T); padded entries are arbitrary.

        In the module's dtype, float32 for a module cast to bf16 / fp16.
        """
        ref = self.frequencies()
        pos = torch.arange(num_tokens, device=ref.device, dtype=ref.dtype) * self.pos_scale
        pos = pos.expand(batch_size, num_tokens)
        valid = None if padding_mask is None else ~padding_mask.to(ref.device, torch.bool)
        if self.normalize:
            pos = pos - masked_mean(pos, valid)
        if self.training:
            if self.max_global_shift > 0:
                pos = pos + _uniform((batch_size, 1), self.max_global_shift, ref, generator)
            if self.max_local_shift > 0:
                pos = pos + _uniform((batch_size, num_tokens), self.max_local_shift, ref,
                                     generator)
            if self.max_global_scaling > 1:
                log_l = _uniform((batch_size, 1), math.log(self.max_global_scaling), ref,
                                 generator)
                pos = pos * log_l.exp()
        return pos

    def forward(self,
                x: torch.Tensor,
                padding_mask: Optional[torch.Tensor] = None,
                generator: Optional[torch.Generator] = None) -> torch.Tensor:
        """Embedding for a batch of sequences.

        Args:
            x (Tensor): Tokens (B, T, C); only the shape is used.
            padding_mask (Tensor, optional): Bool (B, T), True at padded tokens.
            generator (torch.Generator, optional): Source of the augmentation noise.

        Returns:
            Tensor: (B, T, C), zero at padded tokens. Add it to ``x`` yourself.
        """
        if x.dim() != 3 or x.shape[-1] != self.embed_dims:
            raise ValueError(f'CAPE1d expects (B, T, {self.embed_dims}) tokens, '
                             f'got {tuple(x.shape)}')
        B, T, _ = x.shape
        if padding_mask is not None and tuple(padding_mask.shape) != (B, T):
            raise ValueError(f'padding_mask must have shape {(B, T)}, '
                             f'got {tuple(padding_mask.shape)}')
        pos = self.positions(B, T, padding_mask, generator)
        emb = cape1d_embedding(pos, self.frequencies()).to(self.freqs.dtype)
        if padding_mask is not None:
            emb = emb.masked_fill(padding_mask.to(emb.device, torch.bool)[..., None], 0)
        return emb

    def extra_repr(self) -> str:
        return (f'embed_dims={self.embed_dims}, max_global_shift={self.max_global_shift}, '
                f'max_local_shift={self.max_local_shift}, '
                f'max_global_scaling={self.max_global_scaling}, normalize={self.normalize}, '
                f'pos_scale={self.pos_scale}, freq_scale={self.freq_scale}')


@MODELS.register_module()
class CAPE2d(BasePositionEncoding):
    """2D continuous augmented positional embedding of `CAPE
    <https://arxiv.org/abs/2106.03143>`_ for patch grids.

    The valid patch centres are placed on ``[-1, 1] x [-1, 1]`` and mean-normalised. In
    training they get a global shift, a local shift and a global scaling. Padded tokens get a
    zero embedding and do not move the mean. See docs/methods/cape.md.

    Args:
        embed_dims (int): Even number of channels ``C``.
        max_global_shift (float): ``Delta_max``. Defaults to 0.5.
        max_local_shift (float | str): ``eps_max``. ``'auto'`` uses ``1 / N`` per axis, ``N``
            the valid patches along it. Defaults to 'auto'.
        max_global_scaling (float): ``lambda_max >= 1``. Defaults to 1.4.
        eval_pos_range (float | str): ``gamma``: in evaluation the positions span
            ``[-gamma, gamma]``. ``'linear'`` is ``N / N_train`` per axis, ``'sqrt'`` its
            square root. Defaults to 1.
        grid_size (Sequence[int], optional): ``(H, W)`` patches at the training
            resolution, for ``'linear'`` and ``'sqrt'`` (:class:`PEViT` fills it in).
            Defaults to None.
        num_heads (int): Unused, accepted for the :class:`PEViT` interface.
        num_layers (int): Unused, accepted for the :class:`PEViT` interface.
        num_extra_tokens (int): Leading tokens that get a learnable embedding.
            Defaults to 0.
        init_cfg (dict, optional): Initialization config. Defaults to None.

    Examples:
        >>> import torch
        >>> cape = CAPE2d(32).eval()
        >>> cape((3, 4), batch_size=2).shape
        torch.Size([2, 12, 32])
        >>> mask = torch.zeros(2, 12, dtype=torch.bool); mask[1, 8:] = True  # last row
        >>> (cape((3, 4), padding_mask=mask)[1, 8:] == 0).all()
        tensor(True)
    """

    hooks = ('add_to_tokens', )

    def __init__(self,
                 embed_dims: int,
                 max_global_shift: float = 0.5,
                 max_local_shift: Union[float, str] = 'auto',
                 max_global_scaling: float = 1.4,
                 eval_pos_range: Union[float, str] = 1.,
                 grid_size: Optional[Sequence[int]] = None,
                 num_heads: int = 1,
                 num_layers: int = 1,
                 num_extra_tokens: int = 0,
                 init_cfg: Optional[dict] = None):
        super().__init__(embed_dims, num_heads, num_layers, num_extra_tokens, init_cfg)
        if embed_dims % 2:
            raise ValueError(f'embed_dims must be even for CAPE2d, got {embed_dims}')
        _check_aug(max_global_shift, max_local_shift, max_global_scaling)
        if isinstance(eval_pos_range, str):
            if eval_pos_range not in ('linear', 'sqrt'):
                raise ValueError("eval_pos_range must be a positive number, 'linear' or "
                                 f"'sqrt', got {eval_pos_range!r}")
            if grid_size is None:
                raise ValueError(f"eval_pos_range={eval_pos_range!r} needs grid_size, the "
                                 '(H, W) patches at the training resolution')
        elif not eval_pos_range > 0:
            raise ValueError(f'eval_pos_range must be > 0, got {eval_pos_range!r}')
        self.eval_pos_range = (eval_pos_range if isinstance(eval_pos_range, str) else
                               float(eval_pos_range))
        self.grid_size = None if grid_size is None else tuple(int(g) for g in grid_size)
        if self.grid_size is not None and (len(self.grid_size) != 2
                                           or min(self.grid_size) < 1):
            raise ValueError(f'grid_size must be (H, W) with H, W >= 1, got {grid_size!r}')
        self.max_global_shift = float(max_global_shift)
        self.max_local_shift = max_local_shift if max_local_shift == 'auto' else float(
            max_local_shift)
        self.max_global_scaling = float(max_global_scaling)
        w_x, w_y = cape2d_frequencies(embed_dims)
        self.register_buffer('w_x', w_x, persistent=False)
        self.register_buffer('w_y', w_y, persistent=False)
        if num_extra_tokens:
            self.extra_embed = torch.nn.Parameter(torch.zeros(1, num_extra_tokens, embed_dims))
            torch.nn.init.trunc_normal_(self.extra_embed, std=0.02)
        #: default generator of the augmentation noise (``forward`` may override it)
        self.generator: Optional[torch.Generator] = None

    def frequencies(self) -> Tuple[torch.Tensor, torch.Tensor]:
        """``w_x, w_y`` to compute with: float32 copies for a module cast to bf16 / fp16."""
        if _compute_dtype(self.w_x.dtype) != self.w_x.dtype:
            w_x, w_y = cape2d_frequencies(self.embed_dims)
            return w_x.to(self.w_x.device), w_y.to(self.w_x.device)
        return self.w_x, self.w_y

    def positions(self,
                  hw_shape: Sequence[int],
                  batch_size: int = 1,
                  padding_mask: Optional[torch.Tensor] = None,
                  generator: Optional[torch.Generator] = None
                  ) -> Tuple[torch.Tensor, torch.Tensor]:
        """(Augmented) positions ``x, y``, each (B, H*W); padded entries are arbitrary.

        In the module's dtype, float32 for a module cast to bf16 / fp16.
        """
        H, W = _grid_dim(hw_shape[0]), _grid_dim(hw_shape[1])
        ref = self.frequencies()[0]
        rows = torch.arange(H, device=ref.device, dtype=ref.dtype)
        cols = torch.arange(W, device=ref.device, dtype=ref.dtype)
        # column / row index of every token, by broadcasts: traced sizes stay symbolic
        col = cols.view(1, -1).expand(H, -1).reshape(1, -1)
        row = rows.view(-1, 1).expand(-1, W).reshape(1, -1)
        col, row = col.expand(batch_size, -1), row.expand(batch_size, -1)
        if padding_mask is None:
            valid = None
            ones = torch.ones((batch_size, 1), device=ref.device, dtype=ref.dtype)
            n_x, n_y = ones * W, ones * H  # exact: W, H are integers
            c0 = r0 = torch.zeros((batch_size, 1), device=ref.device, dtype=ref.dtype)
        else:
            valid = ~padding_mask.to(ref.device, torch.bool)
            grid = valid.view(batch_size, H, W)
            col_any, row_any = grid.any(1), grid.any(2)  # (B, W), (B, H)
            big = torch.finfo(ref.dtype).max
            c0 = torch.where(col_any, cols, big).amin(1, keepdim=True)
            c1 = torch.where(col_any, cols, -big).amax(1, keepdim=True)
            r0 = torch.where(row_any, rows, big).amin(1, keepdim=True)
            r1 = torch.where(row_any, rows, -big).amax(1, keepdim=True)
            n_x, n_y = c1 - c0 + 1, r1 - r0 + 1
        # valid extent -> [-1, 1] (a single patch sits at 0)
        x = 2 * (col - c0) / (n_x - 1).clamp(min=1) - 1
        y = 2 * (row - r0) / (n_y - 1).clamp(min=1) - 1
        x = torch.where(n_x > 1, x, torch.zeros_like(x))
        y = torch.where(n_y > 1, y, torch.zeros_like(y))
        if not self.training and self.eval_pos_range != 1.:  # [-1, 1] -> [-gamma, gamma]
            if isinstance(self.eval_pos_range, str):
                g_x, g_y = n_x / self.grid_size[1], n_y / self.grid_size[0]
                if self.eval_pos_range == 'sqrt':
                    g_x, g_y = g_x.sqrt(), g_y.sqrt()
            else:
                g_x = g_y = self.eval_pos_range
            x, y = x * g_x, y * g_y
        x = x - masked_mean(x, valid)
        y = y - masked_mean(y, valid)
        if self.training:
            if self.max_global_shift > 0:
                x = x + _uniform((batch_size, 1), self.max_global_shift, ref, generator)
                y = y + _uniform((batch_size, 1), self.max_global_shift, ref, generator)
            if self.max_local_shift == 'auto':
                eps_x, eps_y = 1 / n_x, 1 / n_y
            else:
                eps_x = eps_y = self.max_local_shift
            if self.max_local_shift == 'auto' or self.max_local_shift > 0:
                x = x + _uniform((batch_size, H * W), eps_x, ref, generator)
                y = y + _uniform((batch_size, H * W), eps_y, ref, generator)
            if self.max_global_scaling > 1:
                lam = _uniform((batch_size, 1), math.log(self.max_global_scaling), ref,
                               generator).exp()
                x, y = x * lam, y * lam
        return x, y

    def forward(self,
                hw_shape: Sequence[int],
                batch_size: Optional[int] = None,
                padding_mask: Optional[torch.Tensor] = None,
                generator: Optional[torch.Generator] = None) -> torch.Tensor:
        """Embedding of an ``H x W`` grid of patches.

        Args:
            hw_shape (Sequence[int]): The grid ``(H, W)``.
            batch_size (int, optional): ``B``; taken from ``padding_mask`` when given,
                else defaults to 1.
            padding_mask (Tensor, optional): Bool (B, H*W) (or (B, H, W)), True at
                padded tokens.
            generator (torch.Generator, optional): Source of the augmentation noise;
                defaults to ``self.generator``.

        Returns:
            Tensor: (B, H*W, C) on the module's device and dtype, zero at padded tokens.
        """
        if len(hw_shape) != 2 or min(hw_shape) < 1:
            raise ValueError(f'hw_shape must be (H, W) with H, W >= 1, got {tuple(hw_shape)}')
        H, W = _grid_dim(hw_shape[0]), _grid_dim(hw_shape[1])
        if padding_mask is not None:
            if padding_mask.dim() == 3:
                padding_mask = padding_mask.flatten(1)
            if padding_mask.dim() != 2 or padding_mask.shape[1] != H * W or (
                    batch_size is not None and padding_mask.shape[0] != batch_size):
                raise ValueError(f'padding_mask must have shape (B, {H * W}) for hw_shape '
                                 f'{(H, W)}, got {tuple(padding_mask.shape)}')
            batch_size = padding_mask.shape[0]
        batch_size = 1 if batch_size is None else batch_size
        generator = self.generator if generator is None else generator
        x, y = self.positions((H, W), batch_size, padding_mask, generator)
        emb = cape2d_embedding(x, y, *self.frequencies()).to(self.w_x.dtype)
        if padding_mask is not None:
            emb = emb.masked_fill(padding_mask.to(emb.device, torch.bool)[..., None], 0)
        return emb

    def add_to_tokens(self, x: torch.Tensor, hw_shape: Sequence[int]) -> torch.Tensor:
        self.check_grid(x, hw_shape)
        pe = self(hw_shape, batch_size=x.shape[0]).to(x.dtype)
        if self.num_extra_tokens:
            pe = torch.cat((self.extra_embed.expand(x.shape[0], -1, -1).to(x.dtype), pe), 1)
        return x + pe

    def extra_repr(self) -> str:
        return (super().extra_repr() + f', max_global_shift={self.max_global_shift}, '
                f'max_local_shift={self.max_local_shift!r}, '
                f'max_global_scaling={self.max_global_scaling}, '
                f'eval_pos_range={self.eval_pos_range!r}, grid_size={self.grid_size}')
