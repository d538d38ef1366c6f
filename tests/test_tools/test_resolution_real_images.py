"""projects/resolution_real_images (study 6 of docs/reproductions.md): the photo
file, the views (the same window at every size, real detail at the larger ones, rotations
without a shape cue, balanced labels), the runs (resume, report, parallel jobs) and its
errors. Photos: a few COCO128 images at their real size."""
import json
import os
import os.path as osp
import subprocess

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from tool_files import load_project, project_argv, project_env

STUDY = 'resolution_real_images.resolution_real_images'


@pytest.fixture(scope='module')
def rr():
    return load_project(STUDY)


@pytest.fixture(scope='module')
def photos_file(rr, coco128_root, tmp_path_factory):
    """A photo file of the first 8 COCO128 images (2 of them test photos)."""
    root = tmp_path_factory.mktemp('coco8')
    os.makedirs(root / 'train2017')
    src = osp.join(coco128_root, 'train2017')
    for name in sorted(os.listdir(src))[:8]:
        os.symlink(osp.join(src, name), root / 'train2017' / name)
    path = str(tmp_path_factory.mktemp('data') / 'photos.npz')
    info = rr.prepare(str(root), path)
    assert info['photos'] == 8 and info['test_photos'] == 2
    return path


def test_prepare_keeps_each_photo_whole_at_the_short_side(rr, photos_file, coco128_root):
    from PIL import Image
    photos, names, test = rr.load_photos(photos_file)
    assert test.tolist() == [True, False, False, False] * 2
    for photo, name in zip(photos, names):
        w, h = Image.open(osp.join(coco128_root, 'train2017', name)).size
        assert photo.dtype == np.uint8 and photo.shape[2] == 3
        assert min(photo.shape[:2]) == rr.SHORT_SIDE
        assert abs(photo.shape[1] / photo.shape[0] - w / h) < 0.01  # not stretched


def test_a_larger_size_shows_real_detail_of_the_same_window(rr, photos_file):
    """At 64 px the window is sampled from the 1/2 level, at 32 px from the 1/4 level: the
    64 px view averaged 2 x 2 is the 32 px view, and it is not the 32 px view upsampled."""
    pyr = rr.PhotoPyramid(rr.load_photos(photos_file)[0])
    idx = torch.tensor([1, 2])
    box = torch.tensor([[8., 12., 128., 128.], [4., 40., 128., 128.]])
    v32, v64 = pyr.views(idx, box, (32, 32)), pyr.views(idx, box, (64, 64))
    torch.testing.assert_close(F.avg_pool2d(v64, 2), v32, atol=1e-5, rtol=0)
    upsampled = F.interpolate(v32, size=(64, 64), mode='bilinear', align_corners=False)
    assert (v64 - upsampled).abs().mean() > 0.1
    # a horizontal flip mirrors the view
    torch.testing.assert_close(pyr.views(idx, box, (32, 32), torch.tensor([True, False])),
                               torch.stack((v32[0].flip(-1), v32[1])), atol=1e-5, rtol=0)


def test_views_sampled_per_photo_are_bit_identical(rr, photos_file):
    """:meth:`PhotoPyramid.views` samples the views of one photo in one call (grids stacked
    along the height): each view is bit for bit the view sampled alone, whatever else is in
    the batch (repeated photos, all three pyramid levels, flips), so study 6's runs before and
    after that change saw the same pixels."""
    pyr = rr.PhotoPyramid(rr.load_photos(photos_file)[0])
    gen = torch.Generator().manual_seed(0)
    idx = torch.tensor([1, 2, 1, 5, 1, 2, 7, 5])
    side = torch.tensor([40., 70., 128., 100., 60., 128., 90., 50.])  # levels 0, 1 and 2
    box = torch.cat((torch.rand(8, 2, generator=gen) * 50, side[:, None], side[:, None] * 0.9),
                    1)
    flip = torch.rand(8, generator=gen) < 0.5
    for hw in [(32, 32), (24, 36)]:
        batched = pyr.views(idx, box, hw, flip)
        alone = torch.cat([pyr.views(idx[i:i + 1], box[i:i + 1], hw, flip[i:i + 1])
                           for i in range(8)])
        assert torch.equal(batched, alone)


@pytest.mark.parametrize('hw', [(24, 24), (32, 48)])
def test_test_views_are_balanced_rotations_of_one_shape(rr, photos_file, hw):
    photos, _, test = rr.load_photos(photos_file)
    pyr = rr.PhotoPyramid(photos)
    windows = rr.test_windows(pyr, torch.from_numpy(np.flatnonzero(test)), per_photo=3)
    x, y = rr.make_test_set(pyr, windows, hw)
    n = 2 * 3
    assert x.shape == (4 * n, 3, *hw)  # every rotation has the size's shape: no aspect cue
    assert torch.bincount(y).tolist() == [n] * 4  # chance is 25 %
    blocks = x.view(4, n, 3, *hw)
    if hw[0] == hw[1]:  # the same window turned: 90 degrees is the 0 degree view rotated
        for k in range(4):
            torch.testing.assert_close(blocks[k], torch.rot90(blocks[0], k, dims=(2, 3)))
    else:  # odd rotations were cut transposed, not squeezed: turned back they are W x H
        assert torch.rot90(blocks[1], -1, dims=(2, 3)).shape[-2:] == hw[::-1]
        assert not torch.allclose(torch.rot90(blocks[2], 2, dims=(2, 3)), blocks[1][..., :1])


def test_training_batch_is_square_labelled_and_seeded(rr, photos_file):
    photos, _, test = rr.load_photos(photos_file)
    pyr = rr.PhotoPyramid(photos)
    train_idx = torch.from_numpy(np.flatnonzero(~test))
    a = rr.sample_train_batch(pyr, train_idx, 64, torch.Generator().manual_seed(3), (32, 32))
    b = rr.sample_train_batch(pyr, train_idx, 64, torch.Generator().manual_seed(3), (32, 32))
    assert a[0].shape == (64, 3, 32, 32) and set(a[1].tolist()) == {0, 1, 2, 3}
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


def test_sizes_and_errors(rr, tmp_path):
    assert rr.parse_size('32') == (32, 32) and rr.parse_size('32x48') == (32, 48)
    with pytest.raises(Exception, match='HxW'):
        rr.parse_size('32x')
    with pytest.raises(FileNotFoundError, match='--prepare'):
        rr.load_photos(str(tmp_path / 'missing.npz'))
    with pytest.raises(FileNotFoundError, match='train2017'):
        rr.prepare(str(tmp_path), str(tmp_path / 'x.npz'))
    if not torch.cuda.is_available():
        with pytest.raises(SystemExit):  # one line naming the device, not a CUDA traceback
            rr.parse_args(['--device', 'cuda'])
    args = rr.parse_args(['--quick'])
    rr.ENCODINGS['_unregistered'] = ([dict(type='NoSuchEncoding')], 'cls_token', 'x')
    try:
        with pytest.raises(KeyError, match='_unregistered.*NoSuchEncoding.*--variants'):
            rr.build_model('_unregistered', args)
    finally:
        del rr.ENCODINGS['_unregistered']


def test_every_encoding_builds_and_runs_every_test_size(rr):
    """The study's ten PEViTs (whatever is registered) on a square and a non-square size."""
    args = rr.parse_args(['--quick'])
    for variant in rr.ENCODINGS:
        model = rr.build_model(variant, args).eval()
        for hw in ((24, 24), (32, 48)):
            assert model(torch.rand(2, 3, *hw)).shape == (2, rr.NUM_CLASSES), variant


def test_quick_study_resumes_and_reports(rr, photos_file, tmp_path):
    out = str(tmp_path / 'study')
    bundle = str(tmp_path / 'back' / 'bundle.json')
    argv = ['--quick', '--data', photos_file, '--out-dir', out, '--variants', 'peg-gap',
            'rope-axial', '--eval-sizes', '24', '32x48', '--bundle', bundle]
    runs = rr.main(argv)
    assert {v: [r['seed'] for r in rs] for v, rs in runs.items()} == {
        'peg-gap': [0, 1], 'rope-axial': [0, 1]}
    rec = runs['peg-gap'][0]
    assert set(rec['acc']) == {'32x32', '24x24', '32x48'}
    assert rec['settings']['test_views_per_size'] == 2 * 1 * 4
    assert rec['model_info']['out_type'] == 'avg_featmap' and rec['code']['commit']
    stamp = os.path.getmtime(rr.fs.run_path(out, 'peg-gap', 0))
    rr.main(argv)  # finished runs are skipped
    assert os.path.getmtime(rr.fs.run_path(out, 'peg-gap', 0)) == stamp
    text = rr.main(['--report-only', '--out-dir', out]) and open(
        osp.join(out, 'real_resolution.md')).read()
    assert '| PEG + GAP |' in text and '32×48' in text and '32 px (train)' in text
    assert osp.getsize(osp.join(out, 'real_resolution.png')) > 10000
    # the bundle carries the four runs back: elsewhere they make the same table
    here = str(tmp_path / 'here')
    rr.main(['--report-only', '--from-bundle', bundle, '--out-dir', here, '--figure',
             str(tmp_path / 'fig.png')])
    assert open(osp.join(here, 'real_resolution.md')).read() == text
    assert len(os.listdir(osp.join(here, 'runs'))) == 4 and osp.exists(tmp_path / 'fig.png')


@pytest.mark.slow
def test_parallel_jobs_from_the_users_folder(photos_file, tmp_path):
    """``--jobs 2`` in a fresh process started in the user's folder: two runs in two
    processes, each stored, then the report."""
    res = subprocess.run(
        project_argv(STUDY, '--quick', '--data', photos_file, '--variants', 'ppe',
                     '--jobs', '2', '--eval-sizes', '24', '--out-dir', 'study'),
        cwd=str(tmp_path), capture_output=True, text=True, timeout=600,
        env=project_env(dict(os.environ, OMP_NUM_THREADS='1')))
    assert res.returncode == 0, res.stderr[-3000:]
    assert '2 runs to do on cpu, 2 at a time' in res.stdout
    for seed in (0, 1):
        with open(tmp_path / 'study' / 'runs' / f'ppe__seed{seed}.json') as f:
            assert json.load(f)['settings']['jobs'] == 2
    assert "| PerViT's PPE |" in res.stdout


@pytest.mark.parametrize('flag', ['--deadline-s', '--stop-s'])
def test_time_limits_leave_runs_to_do(rr, photos_file, tmp_path, flag):
    """A run not started by --deadline-s, or still training at --stop-s, stores nothing and
    is reported as left to do (a later call does it)."""
    out = str(tmp_path / 'study')
    args = rr.parse_args(['--quick', '--data', photos_file, '--out-dir', out, '--variants',
                          'none', '--seeds', '0', flag, '1e-9'])
    assert rr.run_study(args) == [('none', 0)]
    assert not os.listdir(osp.join(out, 'runs'))
