"""The run's clock: update times measured a stage at a time, the time left estimated over every stage, and the
lines a run says about it."""

import pytest
from conftest import TINY_GPT, TINY_RUN

import kwiden
from kwiden.pretraining import trainer
from kwiden.pretraining.clock import RunClock, readable_seconds


def test_a_stage_not_yet_reached_is_estimated_by_its_flops_from_the_nearest_measured():
    clock = RunClock(growth_updates=[100, 200], per_update=[1.0, 2.0, 8.0], total=400)
    assert clock.seconds_left(0) is None and clock.update_seconds(0) is None
    clock.measured(4, updates=4, seconds=0.4)  # 0.1 s an update
    clock.measured(8, updates=2, seconds=0.4)  # 0.2 s: the stage's mean is 0.8 s / 6 updates
    assert clock.update_seconds(0) == pytest.approx(0.8 / 6)
    assert clock.update_seconds(2) == pytest.approx(0.8 / 6 * 8)
    assert clock.seconds_left(10) == pytest.approx(90 * 0.8 / 6 + 100 * 0.8 / 6 * 2 + 200 * 0.8 / 6 * 8)
    clock.measured(150, updates=10, seconds=5.0)  # the second stage measured: the third scales from it
    assert not clock.estimated(1) and clock.estimated(2)
    assert clock.update_seconds(2) == pytest.approx(0.5 * 4)
    assert clock.seconds_left(160) == pytest.approx(40 * 0.5 + 200 * 2.0)
    assert clock.seconds_left(400) == 0
    assert [clock.stage_at(u) for u in (0, 99, 100, 199, 200, 399)] == [0, 0, 1, 1, 2, 2]


@pytest.mark.parametrize(
    "seconds, text", [(0.4, "0 s"), (45, "45 s"), (89, "89 s"), (90, "2 min"), (3000, "50 min"), (7500, "2 h 05 min")]
)
def test_a_wait_reads_as_a_person_says_it(seconds, text):
    assert readable_seconds(seconds) == text


def test_a_grown_run_says_its_update_time_and_the_time_left_once_a_stage(english, tmp_path, monkeypatch):
    monkeypatch.setattr(trainer, "UPDATES_PER_CALL", 2)
    result = kwiden.pretrain(english, tmp_path / "run", model="gpt", config=TINY_GPT, grow="0.5:k=2",
                             eval_every=1000, **TINY_RUN)  # fmt: skip
    log = (tmp_path / "run" / "log.txt").read_text()
    times = [line for line in log.splitlines() if line.startswith("time: ")]
    assert len(times) == 2, log  # once in each stage, after its first timed call
    assert "s an update at width 8 × 2 blocks" in times[0] and "not yet reached estimated by FLOPs" in times[0]
    assert "s an update at width 16 × 2 blocks" in times[1] and "estimated" not in times[1]
    assert all("updates left train in about " in line for line in times)
    assert f"this run: {result.updates} updates (more than the budget" in log
