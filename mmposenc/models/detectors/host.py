"""The mmdet this package runs on, checked before any of it imports mmdet."""
from mmposenc.utils.hosts import check_host

#: ``mmdet.__version__`` (mmdet 3.3 or onedl-mmdetection 3.4-3.5).
MMDET_VERSION = check_host('mmdet', 'mmposenc.models.detectors')
