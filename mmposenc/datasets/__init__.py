"""Data pieces of mmposenc: UniViT's random training resolution (CAPE), drawn per batch and
applied in the data pipeline; the dataset check and the datasets that run it when built."""
from .checked import DatasetCheckMixin  # noqa: F401 (registers mmposenc.Checked* datasets)
from .dataset_check import CheckReport, DatasetCheckError, check_dataset  # noqa: F401
from .random_resolution import (RandomResolutionBatchSampler,  # noqa: F401
                                RandomResolutionDataset)
