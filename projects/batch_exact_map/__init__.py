"""Study 8: COCO128 mAP at test batch 1, 2 and 8 for every detector class shipped exact."""
