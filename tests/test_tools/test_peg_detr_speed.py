"""tools/benchmark/peg_detr_speed.py: shared weights, interleaving, paired ratios, the table
(no timings asserted)."""

import pytest
import torch

from tool_files import load_tool

peg_detr_speed = load_tool('benchmark/peg_detr_speed.py')

pytest.importorskip('mmdet')


def test_rounds_interleave_and_rotate():
    calls = []
    fns = {k: (lambda k=k: calls.append(k)) for k in 'abc'}
    times = peg_detr_speed.interleaved(fns, repeats=3, warmup=1)
    assert calls == list('abc') + list('bca') + list('cab') + list('abc')
    assert all(len(v) == 3 for v in times.values())
    # the ratio pairs the rounds: a slow round slows both models and cancels
    assert peg_detr_speed.paired_ratio([2., 20., 4.], [1., 10., 4.]) == 2.


def test_models_share_every_common_weight():
    models = peg_detr_speed.build_models(peg_detr_speed.CONFIGS['deformable'])
    sine = models['sine'].state_dict()
    for pe in ('peg', 'cape'):
        state = models[pe].state_dict()
        assert models[pe].encoder_pos == pe
        for key, value in sine.items():
            assert torch.equal(state[key], value), (pe, key)
    assert set(models['peg'].state_dict()) - set(sine)  # the PEG's own parameters
    assert set(models['cape'].state_dict()) == set(sine)


def test_quick_run_writes_the_table(tmp_path):
    out = tmp_path / 'speed.md'
    threads = torch.get_num_threads()
    argv = ['--models', 'deformable', '--quick', '--clock', 'cpu', '--out', str(out)]
    rows = peg_detr_speed.main(argv)
    torch.set_num_threads(threads)
    assert [r['stage'] for r in rows] == list(peg_detr_speed.STAGES)
    for r in rows:
        assert all(r[pe] > 0 for pe in ('sine', 'peg', 'cape'))
        assert r['peg/sine'] > 0 and r['cape/sine'] > 0
    text = out.read_text()
    table = [line for line in text.splitlines() if line.startswith('| ')]
    assert len(table) == 2 + len(rows)  # header, alignment, one row per stage
    assert all(line.endswith(('| yes |', '| no |')) for line in table[2:])
    assert 'Command: `python tools/benchmark/peg_detr_speed.py ' + ' '.join(argv) in text
    assert f'torch {torch.__version__}' in text
    with pytest.raises(SystemExit):
        peg_detr_speed.parse_args(['--models', 'yolo'])


def test_mask2former_switch_is_the_pixel_decoders_and_dino_gets_enough_tokens():
    models = peg_detr_speed.build_models(peg_detr_speed.CONFIGS['mask2former'], ('sine', 'peg'))
    decoders = [m.panoptic_head.pixel_decoder for m in models.values()]
    assert [d.encoder_pos for d in decoders] == ['sine', 'peg']
    assert [len(d.encoder.pegs) for d in decoders] == [0, 1]
    # DINO picks 900 queries among the encoder tokens of strides 8, 16, 32, 64
    h, w = peg_detr_speed.input_size('dino', (64, 96))
    assert sum(-(-h // s) * -(-w // s) for s in (8, 16, 32, 64)) == 1343 >= 900
    assert peg_detr_speed.input_size('detr', (64, 96)) == [64, 96]
