"""No loss spike after growth: 100 updates after any growth made by `--grow
auto` or with `kwiden.grow`'s defaults, the validation loss is no higher
than at the growth (+0.01), at constant, cosine and WSD rates, early and late
in the run."""

import numpy as np
import pytest

import kwiden

from conftest import TINY_GPT

AFTER = 100
SLACK = 0.01
RUN = dict(seq_len=16, batch_size=8, lr=3e-3, valid_fraction=0.05, eval_every=20, verbose=0)


def jumps(result):
    """`[(update, loss at the growth, loss AFTER updates later)]`, the later one linear between evaluations."""
    rows = result.metrics
    out = []
    for growth in result.growths:
        at = next(r["valid_loss"] for r in rows if r.get("grew") and r["update"] == growth.update)
        later = [r for r in rows if r["update"] > growth.update]
        assert later[-1]["update"] >= growth.update + AFTER, "the run ends too soon after its growth to tell"
        loss = np.interp(growth.update + AFTER, [growth.update] + [r["update"] for r in later], [at] + [r["valid_loss"] for r in later])
        out.append((growth.update, at, float(loss)))
    return out


@pytest.mark.parametrize("schedule", ["constant", "cosine", "wsd"])
@pytest.mark.parametrize(
    "grow",
    [
        "auto",
        "0.25:k=2 0.75:depth=2",  # grow's defaults: width early, depth late
        "0.25:depth=2 0.75:k=2",  # and depth early, width late
    ],
)
def test_no_loss_spike_after_growth(english, tmp_path, grow, schedule):
    result = kwiden.pretrain(english, tmp_path, model="gpt", config=TINY_GPT, budget=400, grow=grow,
                             schedule=schedule, **RUN)  # fmt: skip
    assert result.growths
    for update, at, later in jumps(result):
        assert later <= at + SLACK, (
            f"--grow {grow!r}, {schedule}: the validation loss {AFTER} updates after the growth at update {update} "
            f"is {later:.4f}, above {at:.4f} at the growth"
        )
