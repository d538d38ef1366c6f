"""Helpers shared by the necks and the detectors (pure torch, no host imports)."""
from .call_state import CallState  # noqa: F401
from .padding_exact import backbone_image_shapes, bound_image_shapes, zero_padding  # noqa: F401
from .padding_masks import (as_bool_padding_mask, conv_padding_masks,  # noqa: F401
                            feature_padding_masks, masks_from_valid_shapes, measure_stride,
                            valid_feature_shapes, valid_shapes_of_masks)
from .stable_sort import StableSort  # noqa: F401
