"""The padding-exact mode, pure torch: each image of a padded batch gets, on its own cells,
what it gets alone. Host-side parts are in :mod:`mmposenc.models.detectors.padding_exact`."""
from .binding import backbone_image_shapes, bound_image_shapes, run_backbone
from .masks import (as_bool_padding_mask, cells_after_stride, conv_padding_masks,
                    feature_padding_masks, masks_from_valid_shapes, measure_stride,
                    strided_shapes, valid_feature_shapes, valid_shapes_of_masks)
from .ops import interpolate_valid, masked_conv_module, masked_group_norm, zero_padding
from .switch import (apply_model_switch, padding_exact_parts, refuse_uncovered,
                     switch_part_configs)

__all__ = [
    'backbone_image_shapes', 'bound_image_shapes', 'run_backbone', 'as_bool_padding_mask',
    'cells_after_stride', 'conv_padding_masks', 'feature_padding_masks',
    'masks_from_valid_shapes', 'measure_stride', 'strided_shapes', 'valid_feature_shapes',
    'valid_shapes_of_masks', 'interpolate_valid', 'masked_conv_module', 'masked_group_norm',
    'zero_padding', 'apply_model_switch', 'padding_exact_parts', 'refuse_uncovered',
    'switch_part_configs'
]
