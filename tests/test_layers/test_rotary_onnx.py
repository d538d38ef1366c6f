"""RoPE-Mixed, the DINOv3-style RoPE and RoPE-Axial (RoPE2d) export to real-valued ONNX with
dynamic height and width: a PEViT (class token) exported at one image size runs in onnxruntime
at others, matching PyTorch, and the graph has no complex tensors (RoPE2d read the grid size
with int() and ran only at the traced size). (The eval angle cache must not turn
the angles into constants of the traced size.)"""
import warnings

import pytest
import torch

from mmposenc.models.backbones import PEViT

ort = pytest.importorskip('onnxruntime')
onnx = pytest.importorskip('onnx')

ATOL = 1e-4  # onnxruntime against PyTorch, as tools/deployment/pytorch2onnx.py
COMPLEX = {onnx.TensorProto.COMPLEX64, onnx.TensorProto.COMPLEX128}


@pytest.mark.parametrize('pe', ['RoPEMixed', 'DINOv3RoPE', 'RoPE2d'])
def test_onnx_dynamic_size_real_valued(pe, tmp_path):
    torch.manual_seed(0)
    vit = PEViT(arch=dict(embed_dims=32, num_layers=2, num_heads=2, feedforward_channels=64),
                img_size=32, patch_size=8, pos_encoding=dict(type=pe), out_type='raw').eval()
    if pe == 'RoPEMixed':
        with torch.no_grad():
            vit.pos_encodings[0].freqs.normal_()
    path = tmp_path / 'vit.onnx'
    with torch.no_grad():
        vit(torch.randn(1, 3, 32, 32))  # fill the eval cache first: export must not use it
        with warnings.catch_warnings():
            warnings.simplefilter('ignore')
            torch.onnx.export(vit, (torch.randn(1, 3, 32, 32), ), str(path), dynamo=False,
                              opset_version=17, input_names=['img'], output_names=['tokens'],
                              dynamic_axes={'img': {0: 'batch', 2: 'height', 3: 'width'}})
    model = onnx.load(str(path))
    onnx.checker.check_model(model)
    types = {v.type.tensor_type.elem_type for v in
             list(model.graph.value_info) + list(model.graph.input) + list(model.graph.output)}
    assert not types & COMPLEX
    assert not {n.op_type for n in model.graph.node} & {'DFT', 'STFT'}
    session = ort.InferenceSession(str(path), providers=['CPUExecutionProvider'])
    for shape in [(2, 3, 48, 40), (1, 3, 16, 64), (1, 3, 32, 32)]:
        img = torch.randn(*shape)
        with torch.no_grad():
            ref = vit(img)[0]
        got = torch.from_numpy(session.run(None, {'img': img.numpy()})[0])
        assert got.shape == ref.shape
        assert (got - ref).abs().max() <= ATOL, shape
