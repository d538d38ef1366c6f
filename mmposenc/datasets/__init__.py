"""Data pieces of mmposenc: UniViT's random training resolution (CAPE), drawn per batch and
applied in the data pipeline."""
from .random_resolution import (RandomResolutionBatchSampler,  # noqa: F401
                                RandomResolutionDataset)
