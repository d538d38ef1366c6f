from .resolution_tta import ResolutionTTAClassifier  # noqa: F401
