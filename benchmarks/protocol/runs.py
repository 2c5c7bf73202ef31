"""One `kwiden.pretrain` run of the protocol (`train`, which `--jobs` runs in a process of its own) and its
validation curve against FLOPs (`Run`)."""

import concurrent.futures
import contextlib
import dataclasses
import pathlib
import re
import statistics
import tempfile
import time
import warnings

import numpy as np

import kwiden
from kwiden.pretraining.run import default_warmup


@dataclasses.dataclass
class Run:
    """One `kwiden.pretrain` run: its validation curve against FLOPs."""

    label: str
    seed: int
    metrics: list
    flops: float
    updates: int
    wall: float
    error: str = None

    @property
    def final(self):
        return self.metrics[-1]["valid_loss"]

    @property
    def seconds(self):
        """Training seconds, as pretrain counts them (evaluations and saves left out)."""
        return self.metrics[-1]["seconds"]

    def _after_growths(self):
        """For each growth followed by 100 updates: (its row, the evaluations up to 100 updates later as
        (update, loss), the loss 100 updates later, linear between evaluations)."""
        windows = []
        for index, row in enumerate(self.metrics):
            if row.get("grew"):
                later = [r for r in self.metrics[index + 1 :] if r["update"] > row["update"]]
                if later and later[-1]["update"] >= row["update"] + 100:
                    updates = [row["update"]] + [r["update"] for r in later]
                    losses = [row["valid_loss"]] + [r["valid_loss"] for r in later]
                    within = [(u, v) for u, v in zip(updates[1:], losses[1:]) if u <= row["update"] + 100]
                    windows.append((row, within, float(np.interp(row["update"] + 100, updates, losses))))
        return windows

    @property
    def jump(self):
        """The largest rise of the validation loss from a growth to 100 updates later (linear between evaluations)."""
        rises = [at_100 - row["valid_loss"] for row, _, at_100 in self._after_growths()]
        return max(rises) if rises else None

    def against(self, control):
        """`(rise, control's change, gap)` after this run's first growth (the two are one run up to it, and only
        up to it): the rise from the growth to 100 updates later, `control`'s change from this run's loss at the
        growth, and how far apart they were at this run's last evaluation before it (0 when they were one run);
        None where the first growth is not followed by 100 updates."""
        by_update = {r["update"]: r["valid_loss"] for r in control.metrics}
        updates, losses = list(by_update), list(by_update.values())
        first = next((r["update"] for r in self.metrics if r.get("grew")), None)
        for row, _, at_100 in self._after_growths():
            if row["update"] == first:
                before = [r for r in self.metrics if r["update"] < row["update"] and r["update"] in by_update]
                gap = abs(before[-1]["valid_loss"] - by_update[before[-1]["update"]]) if before else float("nan")
                change = float(np.interp(row["update"] + 100, updates, losses)) - row["valid_loss"]
                return at_100 - row["valid_loss"], change, gap
        return None

    @property
    def peak(self):
        """The largest rise of the validation loss at an evaluation within the 100 updates after a growth."""
        rises = [max(v for _, v in within) - row["valid_loss"] for row, within, _ in self._after_growths() if within]
        return max(rises) if rises else None

    def flops_to_reach(self, loss, unit="flops"):
        """FLOPs (or, with `unit="seconds"`, training seconds) at which the curve first reaches `loss` (linear
        between evaluations), or None."""
        previous = None
        for row in self.metrics:
            spent, value = row[unit], row["valid_loss"]
            if value <= loss:
                if previous is None or previous[1] == value:
                    return spent
                fraction = (previous[1] - loss) / (previous[1] - value)
                return previous[0] + fraction * (spent - previous[0])
            previous = (spent, value)
        return None


def slug(text):
    return re.sub(r"[^A-Za-z0-9.=]+", "_", text).strip("_")


def train(args, paths, corpus_name, label, config, grow, budget, schedule, lr, seed, valid_fraction, options):
    """One `kwiden.pretrain` run: `(Run's fields, the lines to report)`. Plain values, so that `--jobs` can run it
    in a process of its own."""
    lines = []
    name = f"{args.model}-{corpus_name}-{config['hidden_size']}x{config['num_hidden_layers']}/"
    name += f"{slug(label)}-b{budget}-{schedule}-lr{lr:g}-seed{seed}"
    with contextlib.ExitStack() as stack:
        if args.work_dir:
            folder = args.work_dir / name
        else:
            folder = pathlib.Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="grow_vs_scratch-")))
        start = time.perf_counter()
        caught = stack.enter_context(warnings.catch_warnings(record=True))
        warnings.simplefilter("always")
        try:
            result = kwiden.pretrain(
                paths, folder, model=args.model, config=config, budget=budget, seq_len=args.seq_len,
                batch_size=args.batch_size, lr=lr, schedule=schedule, decay_fraction=args.decay_fraction,
                grow=grow, valid_fraction=valid_fraction, seed=seed, verbose=0,
                **{"eval_every": max(1, budget // args.evaluations), "warmup": default_warmup(budget), **options},
            )  # fmt: skip
        except Exception as error:  # noqa: BLE001 - a recipe pretrain refuses is reported, not fatal
            lines.append(f"  {label}, seed {seed}: FAILED: {type(error).__name__}: {error}")
            return dict(label=label, seed=seed, metrics=[], flops=0.0, updates=0,
                        wall=time.perf_counter() - start, error=str(error)), lines  # fmt: skip
        run = Run(label, seed, result.metrics, result.flops, result.updates, time.perf_counter() - start)
    kwiden_warnings = [w for w in caught if not issubclass(w.category, DeprecationWarning)]  # not numpy's, TF's
    for first_line in dict.fromkeys(str(w.message).splitlines()[0] for w in kwiden_warnings):
        lines.append(f"  ({label}, seed {seed}: warned: {first_line})")
    lines.append(
        f"  {label}, budget {budget}, seed {seed}: final valid loss {run.final:.4f}, "
        f"{run.updates} updates, {run.flops:.4g} FLOPs ({run.seconds:.0f} s training, {run.wall:.0f} s wall)"
    )
    return dataclasses.asdict(run), lines


class InProcess:
    """`concurrent.futures`' `submit`, run here and now: `--jobs 1`."""

    def submit(self, function, *arguments):
        future = concurrent.futures.Future()
        future.set_result(function(*arguments))
        return future


def finished(runs):
    """Whether there are runs and every one of them finished."""
    return bool(runs) and all(r.error is None for r in runs)


def mean_final(runs):
    return statistics.mean(r.final for r in runs)
