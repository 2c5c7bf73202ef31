"""How long a run will take: the seconds an update of each stage takes, measured as it trains, and the wall time
of the updates left, a stage not yet reached estimated from a measured one by its FLOPs per update.

The first compiled call of each stretch is not measured: it compiles the step (after a growth) and starts the
batches. Evaluations, backups and compiles are not counted either: the estimate is of training alone.

>>> clock = RunClock(growth_updates=[100], per_update=[1e9, 4e9], total=300)
>>> clock.measured(10, updates=10, seconds=0.5)  # 0.05 s an update of the first stage
>>> round(clock.seconds_left(10), 6)  # 90 more at 0.05 s, then 200 at 0.2 s (four times the FLOPs)
44.5
"""


class RunClock:
    """The update times of a run whose stages begin at update 0 and at each of `growth_updates`, with `per_update`
    FLOPs an update in each, `total` updates in all."""

    def __init__(self, growth_updates, per_update, total):
        self.starts = [0, *growth_updates]
        self.per_update, self.total = list(per_update), total
        self.spent = {}  # stage: (updates, seconds) measured

    def stage_at(self, update):
        """The stage that trains update `update` + 1."""
        return sum(start <= update for start in self.starts[1:])

    def measured(self, first, updates, seconds):
        """A compiled call that trained `updates` updates from update `first` in `seconds`."""
        stage = self.stage_at(first)
        done, taken = self.spent.get(stage, (0, 0.0))
        self.spent[stage] = (done + updates, taken + seconds)

    def update_seconds(self, stage):
        """Seconds an update of `stage`: measured, else the nearest measured stage's scaled by FLOPs; None before
        any is measured."""
        if stage in self.spent:
            updates, seconds = self.spent[stage]
            return seconds / updates
        if not self.spent:
            return None
        nearest = min(self.spent, key=lambda measured: abs(measured - stage))
        updates, seconds = self.spent[nearest]
        return seconds / updates * self.per_update[stage] / self.per_update[nearest]

    def seconds_left(self, update):
        """Seconds of training from update `update` to the end; None before any update time is measured."""
        if not self.spent:
            return None
        ends = [*self.starts[1:], self.total]
        return sum(
            max(0, end - max(start, update)) * self.update_seconds(stage)
            for stage, (start, end) in enumerate(zip(self.starts, ends))
        )

    def estimated(self, stage):
        """Whether `stage`'s update time is estimated from another's, not measured."""
        return stage not in self.spent


def readable_seconds(seconds):
    """`seconds` as a person reads a wait: '45 s', '12 min', '2 h 05 min'."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    minutes = round(seconds / 60)
    return f"{minutes} min" if minutes < 90 else f"{minutes // 60} h {minutes % 60:02d} min"
