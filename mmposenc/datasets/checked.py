"""mmdet's / mmseg's datasets that check their data when they are built.

``mmposenc.CheckedCocoDataset`` and ``mmposenc.CheckedADE20KDataset`` are the host datasets
plus :func:`~mmposenc.datasets.dataset_check.check_dataset`, run when the dataset loads its data
list: whatever builds the dataset (our ``tools/train.py`` / ``tools/test.py``, the hosts' own
tools, ``Runner.from_cfg``, ``browse_dataset.py``) gets every problem of the data as one error
before the first iteration, and a logged count of what the host drops on purpose. The shipped
COCO and ADE20K configs use them; a user config that inherits one keeps the check as long as it
does not set the dataset ``type`` itself.

A dataset wrapper or a hook would not do: a Runner builds its datasets before any hook runs,
and building is where an empty ``"annotations"`` list or a JSON without ``"categories"`` fails;
a wrapper would move ``ann_file`` & co. one level down, breaking ``--cfg-options
train_dataloader.dataset.ann_file=...``.

Args (besides the host dataset's):
    check_cfg (dict, optional): Arguments of ``check_dataset``: ``files`` (``'none'``,
        ``'exists'``, ``'header'`` or ``'full'``; defaults to ``'header'``), ``allow`` (kinds
        counted as drops instead of errors: ``'category_not_in_classes'`` to train on a subset
        of the categories, ``'bbox_beyond_image'``) and ``num_threads``. ``False`` turns the
        check off. Defaults to None (the defaults).
"""
from mmposenc.registry import DATASETS

from .dataset_check import check_dataset


class DatasetCheckMixin:
    """Run :func:`check_dataset` before the host dataset loads its data list."""

    def __init__(self, *args, check_cfg=None, **kwargs):
        self.check_cfg = check_cfg
        super().__init__(*args, **kwargs)

    def load_data_list(self):
        if self.check_cfg is not False:
            report = check_dataset(self, **(self.check_cfg or {}))
            report.raise_or_log()
            self._checked_json = report.coco_json
        try:
            return super().load_data_list()
        finally:
            self._checked_json = None


try:
    from mmdet.datasets import CocoDataset
except ImportError:  # mmdet is not installed: no checked COCO dataset
    pass
else:

    @DATASETS.register_module()
    class CheckedCocoDataset(DatasetCheckMixin, CocoDataset):
        """mmdet's ``CocoDataset`` that checks its annotations and images when built.

        The JSON is parsed once: the check's copy is indexed by mmdet's COCO API.

        Examples:
            >>> train_dataloader = dict(dataset=dict(
            ...     type='mmposenc.CheckedCocoDataset', data_root='data/coco/',
            ...     ann_file='annotations/instances_train2017.json',
            ...     data_prefix=dict(img='train2017/'),
            ...     check_cfg=dict(files='exists')))
        """

        def COCOAPI(self, annotation_file):  # noqa: N802 (what CocoDataset calls)
            data = getattr(self, '_checked_json', None)
            if data is None:
                return CocoDataset.COCOAPI(annotation_file)
            coco = CocoDataset.COCOAPI()  # mmdet's COCO, then indexed as from the file
            coco.dataset = data
            coco.createIndex()
            coco.img_ann_map, coco.cat_img_map = coco.imgToAnns, coco.catToImgs
            return coco


try:
    from mmseg.datasets import ADE20KDataset
except ImportError:  # mmseg is not installed
    pass
else:

    @DATASETS.register_module()
    class CheckedADE20KDataset(DatasetCheckMixin, ADE20KDataset):
        """mmseg's ``ADE20KDataset`` that checks its images and label PNGs when built.

        Examples:
            >>> train_dataloader = dict(dataset=dict(
            ...     type='mmposenc.CheckedADE20KDataset', data_root='data/ade/',
            ...     data_prefix=dict(img_path='images/training',
            ...                      seg_map_path='annotations/training')))
        """
