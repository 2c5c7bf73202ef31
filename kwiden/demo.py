"""`kwiden demo`: `kwiden.pretrain` on the shipped text twice at one budget:
a byte-level GPT of width 64 × 2 blocks trained from scratch, and the same
target grown on the way (`--grow auto`: from 1 block, deepened at 80% of the
updates), both to the end of their schedules
at equal compute. Prints the table, and where the grown run reaches the
scratch run's final loss."""

import contextlib
import pathlib
import tempfile
from importlib import resources

from kwiden.models.presets import DEMO
from kwiden.pretraining import pretrain

TEXT = "python_tutorial.txt.gz"
SEQ_LEN, BATCH_SIZE, LEARNING_RATE = 64, 16, 2e-3
# The preset's GPT ("gpt-demo") with the positions of the window it trains.
CONFIG = {**DEMO, "max_position_embeddings": SEQ_LEN}


def run(budget=300, seed=0, output_dir=None, verbose=1):
    """The two runs' `PretrainResult`s, `{"grown": …, "scratch": …}`; prints the table."""
    with contextlib.ExitStack() as stack:
        text = stack.enter_context(resources.as_file(resources.files("kwiden").joinpath("data", TEXT)))
        folder = (
            pathlib.Path(output_dir) if output_dir else pathlib.Path(stack.enter_context(tempfile.TemporaryDirectory()))
        )
        results = {}
        for name, grow in (("grown", "auto"), ("scratch", "none")):
            if verbose:
                print(f"\n{name}: kwiden pretrain --grow {grow}")
            results[name] = pretrain(
                text, folder / name, config=CONFIG, budget=budget, seq_len=SEQ_LEN,
                batch_size=BATCH_SIZE, lr=LEARNING_RATE, grow=grow, seed=seed, verbose=verbose,
            )  # fmt: skip
        print(table(results))
        if not output_dir:  # the runs' logs named their folders, which go now
            print(f"\nThe two runs were in {folder}, a temporary folder, deleted now: give --output-dir DIR to keep "
                  "them (metrics, loss plots, final/ models).")  # fmt: skip
    return results


def table(results):
    lines = [f"\n{'run':<10}{'final model':>14}{'updates':>9}{'FLOPs':>11}{'valid loss':>12}{'seconds':>9}"]
    for name, result in results.items():
        last = result.metrics[-1]
        size = f"{last['hidden_size']}×{last['num_layers']}"
        lines.append(
            f"{name:<10}{size:>14}{result.updates:>9}{result.flops:>11.3g}{last['valid_loss']:>12.4f}{last['seconds']:>9.1f}"
        )
    target = results["scratch"].metrics[-1]["valid_loss"]
    reached = next((row for row in results["grown"].metrics if row["valid_loss"] <= target), None)
    budget = results["scratch"].flops
    if reached is None:
        lines.append(f"\nThe grown run does not reach the scratch run's final loss {target:.4f} on the same compute.")
    else:
        seconds = results["scratch"].metrics[-1]["seconds"]
        lines.append(
            f"\nThe grown run reaches the scratch run's final loss {target:.4f} at update {reached['update']}, "
            f"{reached['flops']:.3g} FLOPs: {reached['flops'] / budget:.0%} of the compute in FLOPs, "
            f"{reached['seconds'] / max(seconds, 1e-9):.0%} in seconds of training ({reached['seconds']:.1f} s "
            f"against {seconds:.1f} s)."
        )
    return "\n".join(lines)
