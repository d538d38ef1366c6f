"""Which host stack (upstream / onedl) and mmcv route (ops-free / compiled) this interpreter runs,
and the stack's pins (requirements/<stack>.txt)."""
import importlib.metadata as md
import os
import os.path as osp

REPO_ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))

#: ``{module: {stack: distribution}}`` of the hosts.
DISTRIBUTIONS = {
    'mmengine': {'upstream': 'mmengine', 'onedl': 'onedl-mmengine'},
    'mmcv': {'upstream': 'mmcv', 'onedl': 'onedl-mmcv'},
    'mmdet': {'upstream': 'mmdet', 'onedl': 'onedl-mmdetection'},
    'mmseg': {'upstream': 'mmsegmentation', 'onedl': 'onedl-mmsegmentation'},
    'mmpretrain': {'upstream': 'mmpretrain', 'onedl': 'onedl-mmpretrain'},
}


def _installed(dist):
    try:
        md.distribution(dist)
        return True
    except md.PackageNotFoundError:
        return False


#: ``'onedl'`` where onedl-mmengine is installed, else ``'upstream'``.
STACK = 'onedl' if _installed('onedl-mmengine') else 'upstream'
#: The route the Makefile asked for (``make ... ROUTE=...``), or None outside ``make``.
EXPECTED_ROUTE = os.environ.get('MMPOSENC_ROUTE')


def mmcv_distribution():
    """The distribution that provides the ``mmcv`` module here."""
    for dist in ('mmcv', 'mmcv-lite', 'onedl-mmcv'):
        if _installed(dist):
            return dist
    raise LookupError('no mmcv distribution installed')


def pins(stack=STACK):
    """``{distribution: version}`` of ``requirements/<stack>.txt``."""
    found = {}
    with open(osp.join(REPO_ROOT, 'requirements', f'{stack}.txt')) as f:
        for line in f:
            line = line.split('#')[0].strip()
            if '==' in line and not line.startswith('@'):
                name, version = line.split('==')
                found[name.strip().lower()] = version.strip()
    return found
