"""The one training loop that grows: `GrowingLoop` holds a run's position
(batches trained on, updates done, growths had), its `GrowthSchedule` and
next stop, grows (the splits seeded by `recipe.growth_seed` from the run's
seed), backs up (`backups.RunBackup`: before and after each growth, every
`save_every` updates, at Ctrl-C and at the end), stops on Ctrl-C at the end of
the compiled call under way with a backup to resume from, stops on a loss
that is not finite, seeds Dropout, and runs the stretches between
(`stretch.run_stretch`). `fit_growing` and `kwiden pretrain` are its two front
ends: each hands it a `LoopHooks` (batches, evaluation, logging)."""

import contextlib
import signal

import numpy as np

from kwiden.growth.pipeline import grow
from kwiden.keras_internals import compile_arguments, inner_optimizer, seed_generator_states
from kwiden.training import recipe
from kwiden.training.stretch import run_stretch


class LoopHooks:
    """What a front end hands the loop. `stretch_batches` is required; every other hook does nothing unless
    overridden."""

    def stretch_batches(self, position, count):
        """An iterator of the next `count` micro-batches `(x, y)` from `position` (called as a stretch starts)."""
        raise NotImplementedError

    def fit_arguments(self, position):
        """`model.fit`'s `callbacks`, `verbose`, `initial_epoch`, `epochs` for the stretch from `position`, or None
        to run it in compiled calls (`stretch.run_stretch`)."""
        return None

    def stops(self, update):
        """Updates after `update` the front end stops at besides growths and the end (its evaluations)."""
        return ()

    def after_call(self, first, trained, logs):
        """After a compiled call of a stretch that began at update `first` and has trained up to `trained`."""

    def after_stretch(self, model, position, trained, logs, history):
        """After a stretch of `trained` micro-batches ended at `position` with a finite loss."""

    def grown(self, source, model, position, growth, arguments):
        """After `growth` made `model` of `source` (`position` counts it), before the backup after it; `arguments`:
        those `kwiden.grow` was called with (the growth's, its seed added)."""

    def backup_extras(self):
        """What the front end adds to each backup's state, asked just before it is written."""
        return {}

    def stopped(self, position, backed_up):
        """The message of the KeyboardInterrupt a Ctrl-C ends the run with."""
        return f"stopped at update {position.update}"

    def diverged(self, position, loss):
        """The message of the ValueError a loss that is not finite ends the run with."""
        return f"The training loss is {loss} by update {position.update}: training diverged."


class GrowingLoop:
    """Train from a `Position` to update `end`, growing as `schedule` says; `backup` (a `RunBackup`) or None."""

    def __init__(self, schedule, end, accumulation, hooks, backup=None, save_every=None, seed=0):
        self.schedule, self.end, self.accumulation, self.hooks = schedule, end, accumulation, hooks
        self.backup, self.save_every, self.seed = backup, save_every, seed

    def run(self, model, position):
        """`(model, position)` at the end (or where a callback of `fit` stopped it), backed up there."""
        with ctrl_c() as interrupt:
            while True:
                growth = self.schedule.due(position.update, position.growths_done, self.end)
                if growth is not None:
                    model, position = self._grow(model, position, growth)
                    if interrupt.asked:  # asked during the growth: before another call
                        self._stop(position)
                    continue
                stop = self._next_stop(position.update)
                if position.update >= stop:
                    break
                position, ended = self._stretch(model, position, stop, interrupt)
                if ended:
                    break
        self._save(model, position)
        return model, position

    def _stretch(self, model, position, stop, interrupt):
        """`(position, whether a callback of fit ended the run)` after training up to update `stop`; a Ctrl-C
        saves a backup and stops, a loss that is not finite stops before any save."""
        count = stop * self.accumulation - position.batches
        first = position.update

        def after_call(trained, logs):
            self.hooks.after_call(first, (position.batches + trained) // self.accumulation, logs)
            return interrupt.asked or not _finite(logs)

        batches = self.hooks.stretch_batches(position, count)
        fit_arguments = self.hooks.fit_arguments(position)
        trained, logs, history = run_stretch(model, batches, count, after_call, fit_arguments)
        position = position.advanced(trained, self.accumulation)
        if not _finite(logs):
            raise ValueError(self.hooks.diverged(position, logs["loss"]))
        self.hooks.after_stretch(model, position, trained, logs, history)
        if (self.save_every and position.update % self.save_every == 0) or interrupt.asked:
            self._save(model, position)
        if interrupt.asked:
            self._stop(position)
        return position, trained < count or getattr(model, "stop_training", False)

    def _next_stop(self, update):
        """The first update after `update` at which something happens between updates: a growth, the end, a
        backup every `save_every`, or a stop of the front end's."""
        stops = [self.end, self.schedule.next_after(update), *self.hooks.stops(update)]
        if self.save_every:
            stops.append((update // self.save_every + 1) * self.save_every)
        return min(stop for stop in stops if stop is not None)

    def _grow(self, model, position, growth):
        self._save(model, position)  # before: a growth that fails loses nothing
        big, arguments = grow_and_compile(model, position.update, growth.arguments, self.seed)
        big = seed_dropout(big, self.seed, position.update)
        position = position.grown()
        self.hooks.grown(model, big, position, growth, arguments)
        self._save(big, position)
        return big, position

    def _save(self, model, position):
        if self.backup is not None:
            self.backup.save(model, position, **self.hooks.backup_extras())

    def _stop(self, position):
        raise KeyboardInterrupt(self.hooks.stopped(position, self.backup is not None))


def _finite(logs):
    """Whether the logs' training loss is finite; a model whose train step logs no loss is not checked."""
    return "loss" not in logs or bool(np.isfinite(logs["loss"]))


def missed_growth(schedule, position):
    """The first growth before `position.update` a run there has not had (so cannot follow `schedule`), or None."""
    missed = [u for u in schedule.updates[position.growths_done :] if u < position.update]
    return missed[0] if missed else None


def could_be_at(schedule, end, position):
    """Whether a run to update `end` under `schedule` could have been at `position`: not past its end, its growths
    those due by then (a growth at the position's update had or not)."""
    updates = schedule.updates
    had_enough = sum(u < position.update for u in updates) <= position.growths_done
    return position.update <= end and had_enough and position.growths_done <= sum(u <= position.update for u in updates)


def seed_dropout(model, seed, update):
    """Dropout's generators seeded from (seed, update) when a model starts training (at the start of a run and
    after each growth), so that a run resumed before a growth draws what it would have."""
    for index, state in enumerate(seed_generator_states(model)):
        value = np.random.default_rng([seed, update, index]).integers(0, 2**31)
        state.assign(np.array([value, 0], dtype=state.dtype))
    return model


class _Interrupt:
    asked = False


@contextlib.contextmanager
def ctrl_c():
    """Ctrl-C asks the loop to stop after the compiled call under way (`.asked`), a backup saved first; a second
    Ctrl-C stops at once. Outside the main thread no handler can be set: Ctrl-C stops at once."""
    interrupt = _Interrupt()

    def ask(signum, frame):
        if interrupt.asked:
            raise KeyboardInterrupt
        interrupt.asked = True

    try:
        previous = signal.signal(signal.SIGINT, ask)
    except ValueError:  # not the main thread
        yield interrupt
        return
    try:
        yield interrupt
    finally:
        signal.signal(signal.SIGINT, previous)


__all__ = ["GrowingLoop", "LoopHooks", "could_be_at", "ctrl_c", "missed_growth", "seed_dropout"]


def grow_and_compile(model, update, arguments, seed=0):
    """`(grown model, the arguments grown with)`: `kwiden.grow(model, **arguments)` with the optimizer grown too
    (the one under mixed_float16's loss scaling), the splits seeded by `recipe.growth_seed`, compiled with `model`'s loss
    and metrics (a mixed_float16 model's new optimizer is wrapped for loss scaling again, with a fresh scale)."""
    arguments = {"seed": recipe.growth_seed(seed, update), **arguments}
    big, optimizer = grow(model, optimizer=inner_optimizer(model.optimizer), **arguments)
    config = compile_arguments(model)
    config.pop("optimizer")
    big.compile(optimizer=optimizer, **config)
    return big, arguments
