"""Multigrid schedules against the rules of the method (training.md: long cycle, short cycle, final phase)."""
import math

import pytest

from trainer.methods import multigrid as mg

BASE = dict(epochs=100, stages=[0, 40, 80], frames=8, size=224, clips_per_epoch=240_000, base_batch=96)


def test_long_cycle_shapes_and_multipliers():
    phases = mg.schedule(**BASE)
    first_stage = [p for p in phases if p.stage == 0]
    assert [(p.frames, p.size) for p in first_stage] == [(2, 158), (4, 158), (4, 224), (8, 224)]
    assert [p.batch_mult for p in first_stage] == [8, 4, 2, 1]
    assert [p.lr_mult for p in first_stage] == [8, 4, 2, 1]  # LR scales linearly with the batch


def test_each_stage_gives_the_shapes_equal_iterations_and_the_same_clips():
    phases = mg.schedule(**BASE)
    for stage in (0, 1):
        ph = [p for p in phases if p.stage == stage]
        assert len({p.iterations for p in ph}) == 1
        # The stage sees the clips of 40 base epochs: I * 96 * (8 + 4 + 2 + 1) = 40 * 240k.
        clips = sum(p.iterations * BASE["base_batch"] * p.batch_mult for p in ph)
        assert clips == pytest.approx(40 * 240_000, rel=1e-3)
        assert ph[0].iterations == round(40 * 240_000 / (96 * 15))


def test_final_phase_full_shape_with_the_same_saving():
    phases = mg.schedule(**BASE)
    final = phases[-1]
    assert (final.cycle, final.frames, final.size, final.batch_mult) == (-1, 8, 224, 1.0)
    saving = 80 * 240_000 / 96 / sum(p.iterations for p in phases[:-1])
    assert saving == pytest.approx(15 / 4, rel=1e-3)
    assert final.iterations == pytest.approx(20 * 240_000 / 96 / saving, abs=1)


def test_long_cycle_without_short_cycle_does_not_crash_and_has_no_short_shapes():
    phases = mg.schedule(**BASE, short_cycle=False)
    assert all(p.short_cycle == () for p in phases)
    assert phases[0].shape_at(5) == mg.Shape(2, 158, 8.0)


@pytest.mark.parametrize("cycle", [0, 1, 2, 3])
def test_short_cycle_is_relative_to_the_current_long_cycle_shape(cycle):
    """The defect of PySlowFast (issue 429): short-cycle sizes taken from the default size outside the last phase."""
    phases = mg.schedule(**BASE, short_cycle=True)
    p = next(x for x in phases if x.stage == 0 and x.cycle == cycle)
    t, s = mg.LONG_CYCLE[cycle]
    sizes = [sh.size for sh in p.short_cycle]
    assert sizes == [round(224 * s * f) for f in (0.5, 1 / math.sqrt(2), 1.0)]
    assert [sh.frames for sh in p.short_cycle] == [round(8 * t)] * 3
    long_mult = 1 / (t * s * s)
    assert [sh.batch_mult for sh in p.short_cycle] == pytest.approx([4 * long_mult, 2 * long_mult, long_mult])
    # Iterations cycle through the three shapes in order.
    assert [p.shape_at(i).size for i in range(6)] == sizes * 2


def test_short_cycle_iterations_account_for_average_batch():
    phases = mg.schedule(**BASE, short_cycle=True)
    ph = [p for p in phases if p.stage == 0]
    avg = [sum(s.batch_mult for s in p.short_cycle) / 3 for p in ph]
    clips = sum(p.iterations * 96 * a for p, a in zip(ph, avg))
    assert clips == pytest.approx(40 * 240_000, rel=1e-3)


def test_epoch_factor_stretches_budget():
    a = mg.schedule(**BASE)
    b = mg.schedule(**BASE, epoch_factor=1.5)
    assert sum(p.iterations for p in b) == pytest.approx(1.5 * sum(p.iterations for p in a), rel=1e-3)


@pytest.mark.parametrize("stages", [[10, 40], [0, 50, 40], [0, 100], []])
def test_bad_stages(stages):
    with pytest.raises(ValueError):
        mg.schedule(**{**BASE, "stages": stages})
