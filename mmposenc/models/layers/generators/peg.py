"""Position Encoding Generator (PEG), the conditional position encoding of CPVT."""
import math
from typing import Optional, Sequence, Tuple

import torch
import torch.nn as nn
from mmcv.cnn import build_activation_layer, build_norm_layer
from mmengine.model import BaseModule

from mmposenc.registry import MODELS

CONV_TYPES = ('depthwise', 'separable', 'dense')
PADDING_MODES = ('zeros', 'none')


def tokens_to_map(x: torch.Tensor, hw_shape: Sequence[int]) -> torch.Tensor:
    """(B, H*W, C) tokens -> (B, C, H, W) map."""
    B, N, C = x.shape
    H, W = hw_shape
    return x.transpose(1, 2).reshape(B, C, H, W)


def map_to_tokens(x: torch.Tensor) -> torch.Tensor:
    """(B, C, H, W) map -> (B, H*W, C) tokens."""
    return x.flatten(2).transpose(1, 2)


@MODELS.register_module()
class PEG(BaseModule):
    """Position Encoding Generator of `Conditional Positional Encodings for
    Vision Transformers <https://arxiv.org/abs/2102.10882>`_.

    The patch tokens are reshaped to their 2D grid and ``X + F(X)`` is
    returned, where ``F`` is a small convolution whose zero padding lets the
    tokens near the border infer their absolute position. Leading extra
    tokens (e.g. the class token) pass through unchanged. Because ``F`` is a
    convolution the same module runs at any ``H x W`` (including 1x1,
    non-square and odd grids) with no interpolation.

    Args:
        in_channels (int): Channels ``C`` of the tokens.
        kernel_size (int): Odd kernel size ``k``. Defaults to 3. The paper's PEG
            has ``k >= 3``; ``k = 1`` is its "no local relationship" ablation
            (CPVT [E] Table 9 / [L] Table 5: depthwise 1x1, or twelve stacked
            dense 1x1 layers with ``conv_type='dense', num_layers=12``).
        num_extra_tokens (int): Number of leading tokens (class/distillation
            tokens) that bypass ``F``. Defaults to 0.
        conv_type (str): Form of ``F`` (CPVT [E] Table 12, [L] Table 14):

            - ``'depthwise'``: k x k depthwise convolution (default, the
              paper's PEG; ``C * k * k`` weights per layer).
            - ``'separable'``: k x k depthwise followed by 1x1 pointwise.
            - ``'dense'``: full k x k convolution.

        num_layers (int): Number ``l`` of stacked convolutions. With ``l > 1``
            each one is followed by the norm and activation
            (``l x (conv + BN + ReLU)``). Defaults to 1.
        padding (str): ``'zeros'`` pads every convolution with ``(k-1)/2``
            zeros (default). ``'none'`` is the no-padding ablation of CPVT
            ([E] Table 10, [L] Table 11, "this shortens the input sequence
            length from 196 to 144"): valid convolutions, so the grid shrinks
            by ``k - 1`` per layer (14 x 14 -> 12 x 12 for one 3x3 layer) and
            the residual adds the centre crop of ``X``; the output has
            ``H' x W'`` tokens (:meth:`out_shape`) and every later layer works
            on that smaller grid. No zero ever enters, so no border token is
            marked.
        stride (int): Stride of the (first) convolution. ``stride > 1`` is
            the strided form (downsampling PEG, no residual). Defaults to 1.
        residual (bool, optional): Whether to return ``X + F(X)`` (True) or
            ``F(X)``. Defaults to ``stride == 1``.
        bias (bool): Bias in the convolutions. Defaults to True.
        frozen (bool): Freeze the weights at their initial values (CPVT
            [L] Table 5, [E] Table 11). Defaults to False.
        norm_cfg (dict): Norm after each convolution when ``num_layers > 1``.
            Defaults to ``dict(type='BN')``.
        act_cfg (dict): Activation after each convolution when
            ``num_layers > 1``. Defaults to ``dict(type='ReLU')``.
        init_cfg (dict, optional): Initialization config. Defaults to None,
            which uses ``N(0, sqrt(2 / fan_out))`` for the convolutions as the
            official implementation.

    Examples:
        >>> import torch
        >>> peg = PEG(192, num_extra_tokens=1)
        >>> x = torch.rand(2, 1 + 14 * 14, 192)
        >>> peg(x, (14, 14)).shape
        torch.Size([2, 197, 192])
        >>> sum(p.numel() for p in peg.parameters())  # 192 * 9 + 192
        1920
    """

    def __init__(self,
                 in_channels: int,
                 kernel_size: int = 3,
                 num_extra_tokens: int = 0,
                 conv_type: str = 'depthwise',
                 num_layers: int = 1,
                 padding: str = 'zeros',
                 stride: int = 1,
                 residual: Optional[bool] = None,
                 bias: bool = True,
                 frozen: bool = False,
                 norm_cfg: dict = dict(type='BN'),
                 act_cfg: dict = dict(type='ReLU'),
                 init_cfg: Optional[dict] = None):
        super().__init__(init_cfg=init_cfg)
        if not isinstance(in_channels, int) or in_channels < 1:
            raise ValueError(f'in_channels must be a positive int, got {in_channels!r}')
        if (not isinstance(kernel_size, int) or kernel_size < 1 or kernel_size % 2 == 0):
            raise ValueError('kernel_size must be an odd int >= 1 (e.g. 3, 5, 7; 1 for the '
                             f'no-neighbourhood ablation), got {kernel_size!r}')
        if not isinstance(num_extra_tokens, int) or num_extra_tokens < 0:
            raise ValueError('num_extra_tokens must be an int >= 0, '
                             f'got {num_extra_tokens!r}')
        if conv_type not in CONV_TYPES:
            raise ValueError(f'conv_type must be one of {CONV_TYPES}, got {conv_type!r}')
        if not isinstance(num_layers, int) or num_layers < 1:
            raise ValueError(f'num_layers must be an int >= 1, got {num_layers!r}')
        if padding not in PADDING_MODES:
            raise ValueError(f'padding must be one of {PADDING_MODES}, got {padding!r}')
        if not isinstance(stride, int) or stride < 1:
            raise ValueError(f'stride must be an int >= 1, got {stride!r}')
        if residual is None:
            residual = stride == 1
        if residual and stride != 1:
            raise ValueError('residual=True needs stride=1 (the strided PEG changes the '
                             f'grid and has no residual), got stride={stride}')
        if stride != 1 and padding != 'zeros':
            raise ValueError("the strided PEG needs padding='zeros', "
                             f'got padding={padding!r}')

        self.in_channels = in_channels
        self.kernel_size = kernel_size
        self.num_extra_tokens = num_extra_tokens
        self.conv_type = conv_type
        self.num_layers = num_layers
        self.padding = padding
        self.stride = stride
        self.residual = residual
        self.frozen = frozen

        pad = (kernel_size - 1) // 2 if padding == 'zeros' else 0
        layers = []
        for i in range(num_layers):
            s = stride if i == 0 else 1
            if conv_type == 'depthwise':
                layers.append(nn.Conv2d(in_channels, in_channels, kernel_size, s, pad,
                                        groups=in_channels, bias=bias))
            elif conv_type == 'dense':
                layers.append(nn.Conv2d(in_channels, in_channels, kernel_size, s, pad,
                                        bias=bias))
            else:  # separable
                layers.append(nn.Conv2d(in_channels, in_channels, kernel_size, s, pad,
                                        groups=in_channels, bias=bias))
                layers.append(nn.Conv2d(in_channels, in_channels, 1, bias=bias))
            if num_layers > 1:
                layers.append(build_norm_layer(norm_cfg, in_channels)[1])
                layers.append(build_activation_layer(act_cfg))
        #: The convolutional generator ``F``; a stable name for ``custom_keys``.
        self.proj = nn.Sequential(*layers)
        if frozen:
            for p in self.proj.parameters():
                p.requires_grad = False

    @property
    def shrink(self) -> int:
        """Grid cells lost on each side by the valid convolutions (padding='none')."""
        return 0 if self.padding == 'zeros' else self.num_layers * (self.kernel_size - 1) // 2

    def out_shape(self, hw_shape: Sequence[int]) -> Tuple[int, int]:
        """Output grid ``(H', W')`` for an input grid ``hw_shape``: ``(H, W)`` unless
        strided, ``(H - 2s, W - 2s)`` with ``s = shrink`` for ``padding='none'``."""
        H, W = hw_shape
        if self.stride == 1:
            s = self.shrink  # no int(): traced (ONNX) sizes stay dynamic
            return H - 2 * s, W - 2 * s
        pad = (self.kernel_size - 1) // 2
        return ((H + 2 * pad - self.kernel_size) // self.stride + 1,
                (W + 2 * pad - self.kernel_size) // self.stride + 1)

    def init_weights(self):
        """Official CPVT/Twins initialisation unless ``init_cfg`` says otherwise."""
        if self.init_cfg is not None:
            super().init_weights()
            return
        for m in self.proj.modules():
            if isinstance(m, nn.Conv2d):
                fan_out = m.kernel_size[0] * m.kernel_size[1] * m.out_channels // m.groups
                nn.init.normal_(m.weight, 0, math.sqrt(2.0 / fan_out))
                if m.bias is not None:
                    nn.init.zeros_(m.bias)

    def train(self, mode: bool = True):
        """Keep norm statistics frozen together with the weights."""
        super().train(mode)
        if self.frozen:
            self.proj.eval()
        return self

    def _check_input(self, x: torch.Tensor, hw_shape: Sequence[int]):
        if x.dim() != 3:
            raise ValueError(f'PEG expects tokens of shape (B, N, C), got {tuple(x.shape)}')
        if len(hw_shape) != 2 or min(hw_shape) < 1:
            raise ValueError(f'hw_shape must be (H, W) with H, W >= 1, got {tuple(hw_shape)}')
        if x.shape[2] != self.in_channels:
            raise ValueError(f'PEG expects {self.in_channels} channels (in_channels), '
                             f'got {x.shape[2]}')
        expected = self.num_extra_tokens + hw_shape[0] * hw_shape[1]
        if x.shape[1] != expected:
            raise ValueError(
                f'PEG expects N = num_extra_tokens + H * W = {self.num_extra_tokens} + '
                f'{hw_shape[0]} * {hw_shape[1]} = {expected} tokens, got {x.shape[1]}')

    def forward(self, x: torch.Tensor, hw_shape: Sequence[int]) -> torch.Tensor:
        """Apply the conditional position encoding.

        Args:
            x (Tensor): Tokens of shape (B, N, C) with
                ``N = num_extra_tokens + H * W``, extra tokens first and the
                patch tokens in row-major order.
            hw_shape (Sequence[int]): The grid ``(H, W)``.

        Returns:
            Tensor: Shape (B, num_extra_tokens + H' * W', C) where
            ``(H', W') = self.out_shape(hw_shape)`` (``= (H, W)`` unless
            strided or ``padding='none'``). Extra tokens are returned
            unchanged.
        """
        self._check_input(x, hw_shape)
        extra, tokens = x[:, :self.num_extra_tokens], x[:, self.num_extra_tokens:]
        feat = tokens_to_map(tokens, hw_shape)
        s = self.shrink
        if s and min(hw_shape) <= 2 * s:
            raise ValueError(
                f"padding='none' shrinks the grid by {2 * s} per side pair "
                f'({self.num_layers} valid {self.kernel_size}x{self.kernel_size} '
                f'convolutions); the grid {tuple(hw_shape)} is too small')
        out = self.proj(feat)
        if self.residual:
            out = out + (feat[:, :, s:feat.shape[2] - s, s:feat.shape[3] - s] if s else feat)
        out = map_to_tokens(out)
        if self.num_extra_tokens:
            out = torch.cat((extra, out), dim=1)
        return out

    def extra_repr(self) -> str:
        return (f'in_channels={self.in_channels}, kernel_size={self.kernel_size}, '
                f'num_extra_tokens={self.num_extra_tokens}, conv_type={self.conv_type!r}, '
                f'num_layers={self.num_layers}, padding={self.padding!r}, '
                f'stride={self.stride}, residual={self.residual}, frozen={self.frozen}')
