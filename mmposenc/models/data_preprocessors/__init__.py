from .random_resolution import RandomResolutionDataPreprocessor  # noqa: F401
