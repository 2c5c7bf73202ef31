"""`kwiden.training.recipe`: the `--grow` spec, the small model found by undoing it, growths placed at equal FLOPs, and
the advice on a budget."""

import fnmatch
import math
import pathlib
import re

import pytest

from kwiden.text import vocabulary
from kwiden.training import recipe


def test_the_growth_spec_and_undoing_it():
    growths = recipe.parse("0.33:k=2 2/3:depth=2,optimizer_state=grown,spread=0")
    assert [(g.fraction, g.arguments) for g in growths] == [
        (0.33, {"k": 2}), (2 / 3, {"depth": 2, "optimizer_state": "grown", "spread": 0.0})]  # fmt: skip
    target = dict(hidden_size=64, intermediate_size=256, num_hidden_layers=4, num_attention_heads=4,
                  attention_head_size=16)  # fmt: skip
    small = recipe.undone(target, growths)
    assert small == dict(hidden_size=32, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                         attention_head_size=8)  # fmt: skip
    counted = recipe.undone(target, recipe.parse("0.5:k=2,heads=count"))
    assert (counted["num_attention_heads"], counted["attention_head_size"]) == (2, 16)
    assert recipe.parse(" none ") == "none" and recipe.parse("auto") == "auto"
    with pytest.raises(ValueError, match=r"'0.5' is not FRACTION:ARG=VALUE"):
        recipe.parse("0.5")
    with pytest.raises(ValueError, match=r"optimizer_state=fresh; it takes"):
        recipe.parse("0.5:optimizer_state=fresh")
    assert recipe.parse("0.8:k=2,relax_learning_rates=300")[0].arguments == {"k": 2, "relax_learning_rates": 300}
    with pytest.raises(ValueError, match=r"relax_learning_rates=1e3 is not an integer"):
        recipe.parse("0.8:k=2,relax_learning_rates=1e3")


def test_growth_points_are_placed_at_equal_flops():
    growths = recipe.parse("0.5:k=2")
    total, placed = recipe.place(growths, 100, [1.0, 3.0], warmup=5)
    # 100 updates at cost 3 = 300; half the run's U updates at cost 1, half at 3: 2U = 300, U = 150
    assert (placed[0].update, total) == (75, 150) and growths[0].update is None  # its input is left as it was
    assert recipe.flops_spent(total, [75], [1.0, 3.0]) == 75 * 1.0 + 75 * 3.0 == 300


@pytest.mark.parametrize(
    "tokens, says, table",
    [
        (2_000_000, "larger than compute-optimal. For the lowest loss on this compute, train a smaller target",
         "the small model it starts from, trained alone on the same compute, ended lower"),
        (20_000_000, "about compute-optimal", "the small model it starts from"),
        (56_000_000, "smaller than compute-optimal", "ended below both the target from scratch and the small model"),
        (100_000_000, "smaller than compute-optimal", "the target from scratch ended lowest"),
    ],
)  # fmt: skip
def test_advice_places_the_target_against_the_compute_optimal_size(tokens, says, table):
    """A tokenizer the sweep did not measure (or none said): Chinchilla's 20, with a factor of 2 either side."""
    text = recipe.advice(1_000_000, tokens, 6 * 1_000_000 * tokens)
    assert f"{tokens / 1e6:.1f} tokens per parameter" in text and says in text
    assert text.endswith(recipe.measured(tokens / 1e6)) and table in text
    optimal = f"about 20 tokens per parameter, about {(tokens / 20) ** 0.5 * 1000:,.0f} parameters"  # √(C / 120)
    assert optimal in text and recipe._measured()["compute_optimal"]["chinchilla"]["says"] in text


@pytest.mark.parametrize("sweep", [0, 1])
@pytest.mark.parametrize(
    "factor, says",
    [(0.3, "larger than compute-optimal"), (1, "about compute-optimal"), (1.8, "about compute-optimal"),
     (3, "smaller than compute-optimal")],
)  # fmt: skip
def test_a_byte_level_budget_inside_the_sweep_gets_the_ratio_measured_at_its_batch(sweep, factor, says):
    """Up to 1e12 FLOPs with bytes: the ratio benchmarks/isoflop.py measured at the run's tokens an update, not
    Chinchilla's; the same run with a WordPiece vocabulary gets Chinchilla's."""
    figures = recipe._measured()["compute_optimal"]
    measured = figures["measured"][sweep]
    ratio, per_update = measured["tokens_per_parameter"], measured["tokens_per_update"]
    assert figures["measured_for"]["tokenizer"] == vocabulary.byte_tokenizer().kind
    parameters = 10_000
    tokens = int(factor * ratio * parameters)
    flops = 6 * parameters * tokens
    assert flops <= figures["measured_for"]["flops_up_to"]
    text = recipe.advice(parameters, tokens, flops, tokenizer="bytes", tokens_per_update=per_update)
    assert says in text and measured["says"] in text
    assert f"about {ratio} tokens per parameter, about {(flops / (6 * ratio)) ** 0.5:,.0f} parameters" in text
    other = recipe.advice(parameters, tokens, flops, tokenizer="wordpiece", tokens_per_update=per_update)
    assert "about 20 tokens per parameter" in other and figures["chinchilla"]["says"] in other


def test_the_ratio_of_the_nearest_batch_measured_and_the_range_where_none_is_said():
    figures = recipe._measured()["compute_optimal"]
    small, large = sorted(figures["measured"], key=lambda sweep: sweep["tokens_per_update"])
    assert small["tokens_per_parameter"] < large["tokens_per_parameter"]  # a larger batch favours a smaller model
    between = (small["tokens_per_update"] * large["tokens_per_update"]) ** 0.5  # nearest to each in log
    assert recipe.compute_optimal(1e11, "bytes", between * 0.99)[2] == small["says"]
    assert recipe.compute_optimal(1e11, "bytes", between * 1.01)[2] == large["says"]
    assert recipe.compute_optimal(1e11, "bytes", 1)[:2] == (small["tokens_per_parameter"],) * 2
    assert recipe.compute_optimal(1e11, "bytes", 10**6)[:2] == (large["tokens_per_parameter"],) * 2
    low, high, says = recipe.compute_optimal(1e11, "bytes")
    assert (low, high) == (small["tokens_per_parameter"], large["tokens_per_parameter"])
    assert small["says"] in says and large["says"] in says


@pytest.mark.parametrize("flops", [2e12, 1e15, 1e18, 1e21])
@pytest.mark.parametrize(
    "end, factor, says",
    [("low", 0.4, "larger than compute-optimal"), ("low", 0.75, "about compute-optimal"),
     ("high", 1.5, "about compute-optimal"), ("high", 2.5, "smaller than compute-optimal")],
)  # fmt: skip
def test_a_byte_level_budget_beyond_the_sweep_gets_a_range_toward_chinchillas(flops, end, factor, says):
    """Bytes beyond the largest budget swept: the high end the ratio measured at the run's batch, the low end on
    its way to Chinchilla's 20 (there from the smallest budget Chinchilla measured); larger or smaller only beyond a
    factor of 2 of the ends."""
    figures = recipe._measured()["compute_optimal"]
    measured = max(figures["measured"], key=lambda sweep: sweep["tokens_per_update"])
    per_update = measured["tokens_per_update"]
    low, high, _ = recipe.compute_optimal(flops, "bytes", per_update)
    assert high == measured["tokens_per_parameter"] and 20 <= low < high
    assert (low == 20) == (flops >= figures["chinchilla"]["from_flops"])
    ratio = factor * (low if end == "low" else high)
    parameters = (flops / (6 * ratio)) ** 0.5  # C = 6·N·D with D = ratio·N
    text = recipe.advice(
        round(parameters), ratio * round(parameters), flops, tokenizer="bytes", tokens_per_update=per_update
    )
    sizes = " to ".join(f"{(flops / (6 * r)) ** 0.5:,.0f}" for r in (low, high))  # the low ratio's size first
    assert says in text and f"{low} to {high} tokens per parameter, {sizes} parameters" in text
    assert figures["beyond"]["says"] in text and measured["says"] in text


def test_the_range_beyond_the_sweep_starts_where_the_measured_ratio_ends():
    """No jump at the sweep's edge: just past it the range is the measured ratio, and its low end falls steadily."""
    figures = recipe._measured()["compute_optimal"]
    edge = figures["measured_for"]["flops_up_to"]
    for sweep in figures["measured"]:
        per_update, measured = sweep["tokens_per_update"], sweep["tokens_per_parameter"]
        assert recipe.compute_optimal(edge, "bytes", per_update)[:2] == (measured, measured)
        assert recipe.compute_optimal(edge * 1.001, "bytes", per_update)[:2] == (measured, measured)
        lows = [recipe.compute_optimal(edge * 10**k, "bytes", per_update)[0] for k in range(1, 9)]
        assert lows == sorted(lows, reverse=True) and lows[0] < measured and lows[-1] == 20
    assert recipe.compute_optimal(1e11, "bytes", 0)[:2] == recipe.compute_optimal(1e11, "bytes")[:2]  # no batch


def test_the_measured_figures_are_shipped_data_covering_every_ratio():
    """kwiden/data/growth_protocol.json loads, its bounds rise, the last is unbounded, so every ratio has its text;
    setup.py ships it."""
    table = recipe.measured_table()
    bounds = [up_to for up_to, _ in table]
    assert len(table) >= 2 and bounds == sorted(set(bounds)) and bounds[0] > 0 and bounds[-1] == math.inf
    assert all(says.startswith("Measured") and says.endswith(".") for _, says in table)
    assert recipe.measured(0) == table[0][1] and recipe.measured(1e12) == table[-1][1]
    for (up_to, says), (_, beyond) in zip(table, table[1:]):
        assert recipe.measured(up_to) == says and recipe.measured(up_to + 1e-6) == beyond
    assert recipe.measured_table() is table  # read once
    reuse = recipe.measured_reuse()
    assert reuse.startswith("Measured") and reuse.endswith(".") and "docs/reuse.md" in reuse
    assert recipe.advice(1_000_000, 2_000_000, 1.2e13, continued=True).endswith(reuse)
    setup = (pathlib.Path(__file__).resolve().parents[2] / "setup.py").read_text()
    patterns = re.findall(r'"(data/[^"]+)"', setup)
    assert any(fnmatch.fnmatch(f"data/{recipe.MEASURED_FILE}", pattern) for pattern in patterns), patterns


@pytest.mark.parametrize(
    "spec, message",
    [
        ("0.5:k=1", r"nothing grows in '0.5:k=1' \(k, ffn_factor, depth are 1\)"),
        ("0.5:depth=1", r"nothing grows in '0.5:depth=1'"),
        ("0.5:k=1,ffn_factor=1,depth=1", r"nothing grows"),
        ("0.5:spread=3", r"nothing grows in '0.5:spread=3'"),
        ("0.5:k=-2", r"k=-2 in '0.5:k=-2': a factor must be at least 1 \(2 doubles\)"),
        ("0.5:k=1/2", r"k=1/2 in '0.5:k=1/2': a factor must be at least 1"),
        ("0.5:depth=0", r"depth=0 in '0.5:depth=0': a factor must be at least 1"),
        ("0.3:k=2 0.6:k=1", r"nothing grows in '0.6:k=1'"),
    ],
)
def test_a_growth_in_which_nothing_grows_or_a_factor_below_one_is_refused(spec, message):
    with pytest.raises(ValueError, match=message):
        recipe.parse(spec)


def test_growths_of_one_factor_alone_are_taken():
    assert [g.arguments for g in recipe.parse("0.5:k=1,ffn_factor=2 0.7:depth=2")] == [
        dict(k=1, ffn_factor=2), dict(depth=2)]  # fmt: skip
