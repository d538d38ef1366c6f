"""The encoder layers of mmposenc's DETR-family detectors."""
from .peg_encoder_layers import (PEG_ENCODERS, MultiLevelPEGEncoderMixin,
                                 PEGDABDetrTransformerEncoder, PEGDeformableDetrTransformerEncoder,
                                 PEGDetrTransformerEncoder, PEGEncoderMixin,
                                 PEGMask2FormerTransformerEncoder, SingleLevelPEGEncoderMixin,
                                 build_pegs, check_peg_after)
from .rotary_encoder_layers import (RotaryMultiheadAttention, encoder_angles,
                                    install_rotary_attention, rotary_attention)

__all__ = [
    'PEG_ENCODERS', 'PEGEncoderMixin', 'SingleLevelPEGEncoderMixin', 'MultiLevelPEGEncoderMixin',
    'PEGDetrTransformerEncoder', 'PEGDABDetrTransformerEncoder',
    'PEGDeformableDetrTransformerEncoder', 'PEGMask2FormerTransformerEncoder', 'build_pegs',
    'check_peg_after', 'RotaryMultiheadAttention', 'encoder_angles', 'install_rotary_attention',
    'rotary_attention'
]
