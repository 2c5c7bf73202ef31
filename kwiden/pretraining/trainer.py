"""The pretraining loop: updates of deterministic batches, growths at their
updates, evaluations, backups (model, optimizer, position) to resume from,
and a Ctrl-C that saves one first."""

import contextlib
import dataclasses
import re
import signal
import time
import zipfile

import keras
import numpy as np

from kwiden.growth.pipeline import grow
from kwiden.keras_internals import seed_generator_states
from kwiden.models import naming
from kwiden.models.builder import build_transformer_model
from kwiden.models.config import is_count
from kwiden.models.hf import refuse_copied_rotary
from kwiden.optimizers import AdamW
from kwiden.pretraining.outputs import BACKUP, trained_length
from kwiden.training import recipe
from kwiden.training.backups import SavedModel
from kwiden.training.compute import flops_per_token
from kwiden.training.stretch import train_stretch

STATE_FILE = "state.json"
EVALUATIONS = 20
# Updates a compiled call runs where nothing happens between them (Keras' steps_per_execution, in updates).
UPDATES_PER_CALL = 32
WEIGHT_DECAY = 0.01
# `grow`'s arguments about the optimizer, left out where a growth is tried on a model without one
# (`scale_learning_rates` and `relax_learning_rates` are checked there, together: `grow` takes them without one).
OPTIMIZER_ARGUMENTS = ("optimizer_state", "rewarm")


def weight_shapes(model):
    return tuple(sorted((w.path, tuple(w.shape)) for w in model.weights))


@dataclasses.dataclass
class Phase:
    """One model size of a run: its FLOPs per token and weight shapes, and
    the model itself for the first phase."""

    flops_per_token: int
    hidden_size: int
    num_layers: int
    parameters: int
    weight_shapes: tuple
    model: object = None

    @classmethod
    def of(cls, model, seq_len, keep=False):
        return cls(
            flops_per_token(model, seq_len),
            model.get_layer(naming.EMBEDDING_TOKEN).output_dim,
            naming.count_blocks(layer.name for layer in model.layers),
            model.count_params(),
            weight_shapes(model),
            model if keep else None,
        )

    @classmethod
    def built(cls, config, family, objective):
        model = build_transformer_model(config, model=family.name, **objective.model_arguments)
        return cls.of(model, objective.seq_len, keep=True)

    @classmethod
    def grown_from(cls, model, growths, family, objective):
        """The first phase (`model`) and what each growth makes of it, grown
        once here, untrained, to learn their sizes and to refuse a growth
        `grow` would refuse before any training."""
        phases = [cls.of(model, objective.seq_len, keep=True)]
        for growth in growths:
            shape_only = {k: v for k, v in growth.arguments.items() if k not in OPTIMIZER_ARGUMENTS}
            where = f"--grow: the growth at {growth.fraction:g} ({recipe.arguments_text(shape_only)})"
            try:
                model = grow(model, **shape_only)
            except ValueError as error:  # GrowthError too
                raise ValueError(f"{where}: {error}") from None
            try:
                for layer in model.layers:
                    if hasattr(layer, "rotary_frequencies"):  # attention layers
                        refuse_copied_rotary(layer, family.title)
            except ValueError as error:
                raise ValueError(
                    f"{where} widens rotary heads, whose copied frequencies final/'s config.json cannot say: "
                    f"add heads=count (more heads of the same size). {error}"
                ) from None
            phases.append(cls.of(model, objective.seq_len))
        return phases

    def describe(self):
        return f"width {self.hidden_size} × {self.num_layers} blocks ({self.parameters:,} parameters)"


def _difference(saved, wanted):
    """How a backup's weight shapes differ from the run's model's, the first three of each kind named."""
    saved, wanted = dict(saved), dict(wanted)
    parts = [
        ("it lacks", [path for path in wanted if path not in saved]),
        ("it has, beyond the run's model,", [path for path in saved if path not in wanted]),
        ("other shapes at", [path for path in saved if path in wanted and saved[path] != wanted[path]]),
    ]
    return "; ".join(f"{what} {', '.join(paths[:3])}{' …' * (len(paths) > 3)}" for what, paths in parts if paths)


def mean_loss(losses):
    """The mean over the micro-batches of `(mean loss, micro-batches)` pairs, or None where there are none."""
    counts = sum(count for _, count in losses)
    return float(sum(loss * count for loss, count in losses) / counts) if counts else None


def _averaged(measures):
    """The mean of `(value, weight)` pairs by their weights."""
    values, weights = zip(*measures)
    return float(np.average(values, weights=weights))


def _is_loss(loss):
    """Whether `loss` is a backup's training loss: `[mean, micro-batches]`, or one number (one micro-batch)."""
    if isinstance(loss, list) and len(loss) == 2:
        return isinstance(loss[0], (int, float)) and is_count(loss[1])
    return isinstance(loss, (int, float)) and not isinstance(loss, bool)


class Trainer:
    def __init__(self, folder, options, objective, train, valid, phases, growths, per_update, total, schedule,
                 tokenizer, verbose):  # fmt: skip
        self.folder, self.options, self.objective = folder, options, objective
        self.train, self.valid_batches = (
            train,
            objective.validation_batches(valid, options.batch_size, options.seed),
        )
        self.phases, self.growths, self.per_update, self.total = phases, growths, per_update, total
        self.schedule, self.tokenizer, self.verbose = schedule, tokenizer, verbose
        self.backups = folder.folder / BACKUP
        self.saved = SavedModel(self.backups, STATE_FILE, "model-")
        self.eval_every = options.eval_every or max(1, total // EVALUATIONS)
        self.tokens_per_update = options.batch_size * options.accum_steps * objective.seq_len
        self.stop_asked = False
        self.train_losses = []  # since the last metrics row

    # Compute
    def flops_at(self, update):
        """Training FLOPs of the first `update` updates, each phase at its own cost."""
        return recipe.flops_spent(update, [g.update for g in self.growths], self.per_update)

    def compile_arguments(self):
        # Keras' PyTorch trainer runs one batch a call.
        calls = 1 if keras.backend.backend() == "torch" else UPDATES_PER_CALL * self.options.accum_steps
        return dict(loss=self.objective.losses(), steps_per_execution=calls)

    def compile(self, model, optimizer):
        model.compile(optimizer, **self.compile_arguments())
        return model

    def fresh_model(self):
        optimizer = AdamW(self.schedule, weight_decay=WEIGHT_DECAY, accum_steps=self.options.accum_steps)
        return self.seed_dropout(self.compile(self.phases[0].model, optimizer), 0)

    def seed_dropout(self, model, update):
        """Dropout's generators seeded from (seed, update) when a model starts
        training, so that a run resumed before a growth draws what it would have."""
        for index, state in enumerate(seed_generator_states(model)):
            seed = np.random.default_rng([self.options.seed, update, index]).integers(0, 2**31)
            state.assign(np.array([seed, 0], dtype=state.dtype))
        return model

    # Backups
    def save(self, model, update, growths_done, seconds):
        """A backup to resume from (`kwiden.training.backups.SavedModel`: the model with its optimizer, Dropout's
        generators), with the position and the training losses since the last metrics row (the next row
        averages them, resumed or not)."""
        if self.folder.will_write(BACKUP).is_symlink():
            raise ValueError(f"{self.backups} is a link; kwiden keeps its backups in a folder of its own: remove it.")
        position = dict(update=update, growths_done=growths_done, seconds=seconds, train_losses=self.train_losses)
        self.saved.write(model, f"{update}-{growths_done}", position)
        if not self.folder.record_value("backed_up"):  # from here a missing state.json is a loss, not a new run
            self.folder.record_value("backed_up", True)

    def restore(self):
        """`(model, update, growths done, seconds)` from the last backup, or None where the run never backed up."""
        path = self.saved.state_path
        if not path.is_file():
            if self.folder.record_value("backed_up"):
                raise ValueError(
                    f"{path} is missing, though this run has backed up: it would start again from update 0 and "
                    "replace its backup. Restore backup/, or give another --output-dir for a new run."
                )
            return None
        state = self.saved.read("--output-dir")
        update, growths_done = self._position(state, path)
        model_file = self.backups / state["model"]
        try:
            model = self.saved.load(state, **self.compile_arguments())
        except (OSError, ValueError, zipfile.BadZipFile) as error:
            raise ValueError(f"The backup {model_file} cannot be loaded ({str(error)[:200]}); restore it, or give "
                             "another --output-dir.") from None  # fmt: skip
        if weight_shapes(model) != self.phases[growths_done].weight_shapes:
            raise ValueError(f"The backup {model_file} is not this run's model after {growths_done} growth(s) "
                             f"({_difference(weight_shapes(model), self.phases[growths_done].weight_shapes)}); restore "
                             "it, or give another --output-dir (a run an older kwiden began, whose objective's model "
                             "has changed since, resumes with that kwiden).")  # fmt: skip
        # A backup of an older kwiden holds no losses (the next row then averages the resumed updates' alone), or
        # one a micro-batch.
        self.train_losses = [tuple(loss) if isinstance(loss, list) else (loss, 1) for loss in state["train_losses"]]
        return model, update, growths_done, float(state["seconds"])

    def _position(self, state, path):
        """`(update, growths done)` of a backup's state, refused where it is not one this run could have written."""
        fits = (
            isinstance(state, dict)
            and isinstance(state.get("model"), str)
            and re.fullmatch(r"model-\d+-\d+\.keras", state["model"]) is not None
            and (self.backups / state["model"]).is_file()
            and is_count(state.get("update"))
            and is_count(state.get("growths_done"))
            and isinstance(state.get("seconds"), (int, float))
            and isinstance(state.setdefault("train_losses", []), list)
            and all(_is_loss(loss) for loss in state["train_losses"])
            and isinstance(state.get("generators", []), list)
        )
        if fits:
            update, done = state["update"], state["growths_done"]
            passed = [g.update for g in self.growths]
            fits = update <= self.total and sum(u < update for u in passed) <= done <= sum(u <= update for u in passed)
        if not fits:
            raise ValueError(
                f"{path}, the backup's position, is not one this run wrote (or names a backup missing from "
                f"{self.backups}); restore backup/, or give another --output-dir."
            )
        return state["update"], state["growths_done"]

    # Evaluation
    def evaluate(self, model):
        """`{"valid_loss": …}` over the validation batches, and `valid_NAME` of each measure the objective names
        (`Objective.measured`: its `measures` of the model's outputs, averaged over the batches by their weights)."""
        losses, weights, measures = [], [], {name: [] for name in self.objective.measured}
        for x, y in self.valid_batches:
            losses.append(float(model.test_on_batch(x, y, return_dict=True)["loss"]))
            weights.append(self.objective.counted(y))
            if measures:
                for name, measure in self.objective.measures(model.predict_on_batch(x), y).items():
                    measures[name].append(measure)
        averaged = {f"valid_{name}": _averaged(measure) for name, measure in measures.items()}
        return {"valid_loss": float(np.average(losses, weights=weights)), **averaged}

    def record(self, model, update, growths_done, train_losses, seconds, grew=False):
        phase = self.phases[growths_done]
        row = dict(
            update=update,
            tokens=update * self.tokens_per_update,
            flops=self.flops_at(update),
            hidden_size=phase.hidden_size,
            num_layers=phase.num_layers,
            lr=float(keras.ops.convert_to_numpy(self.schedule(update))),
            train_loss=mean_loss(train_losses),
            **self.evaluate(model),
            seconds=round(seconds, 3),
        )
        if grew:
            row["grew"] = True
        self.folder.add_metrics(row)
        return row

    # The loop
    def run(self):
        model, update, growths_done, seconds, rows = self._start()
        from tqdm.auto import tqdm

        self.folder.starts_training()
        with self._stop_on_interrupt(), tqdm(total=self.total, initial=update, disable=not self.verbose,
                                               unit="update", dynamic_ncols=True) as progress:  # fmt: skip
            while update < self.total:
                if growths_done < len(self.growths) and self.growths[growths_done].update == update:
                    model = self._grow(model, update, growths_done, seconds)  # the source need not live on
                    growths_done += 1
                    rows.append(self.record(model, update, growths_done, [], seconds, grew=True))
                    self.save(model, update, growths_done, seconds)
                if self.stop_asked:  # asked during the growth: before another call
                    self._stop(update)
                trained, took = self._train(model, update, self._next_stop(update), progress, growths_done)
                seconds += took
                update += trained
                if update % self.eval_every == 0 or update == self.total:
                    rows.append(self.record(model, update, growths_done, self.train_losses, seconds))
                    self.train_losses = []
                if (self.options.save_every and update % self.options.save_every == 0) or self.stop_asked:
                    self.save(model, update, growths_done, seconds)
                if self.stop_asked:
                    self._stop(update)
        return self._finish(model, update, growths_done, seconds, rows)

    def _stop(self, update):
        self.folder.log(f"stopped at update {update}: backup saved; run the same command to resume")
        raise KeyboardInterrupt

    def _next_stop(self, update):
        """The first update after `update` at which something happens between updates: an evaluation, a backup,
        a growth, the end. The updates up to it run in compiled calls of `UPDATES_PER_CALL`."""
        stops = [self.total, (update // self.eval_every + 1) * self.eval_every]
        if self.options.save_every:
            stops.append((update // self.options.save_every + 1) * self.options.save_every)
        stops.extend(g.update for g in self.growths if g.update > update)
        return min(stops)

    def _start(self):
        """`(model, update, growths done, seconds, metrics rows)` to train on from: the last backup's, or a fresh
        model's (the rows after the backup dropped)."""
        restored = self.restore()
        if restored is None:
            model, update, growths_done, seconds = self.fresh_model(), 0, 0, 0.0
            self.folder.metrics(until=-1)
        else:
            model, update, growths_done, seconds = restored
            self.folder.log(f"resuming from the backup at update {update}")
            regrow = growths_done < len(self.growths) and self.growths[growths_done].update == update
            self.folder.metrics(until=update, regrow=regrow)
        rows = self.folder.metrics()
        if not rows:
            rows.append(self.record(model, 0, growths_done, [], seconds))
        return model, update, growths_done, seconds, rows

    def _train(self, model, update, stop, progress, growths_done):
        """Train updates `update + 1` to `stop` (fewer where Ctrl-C stops it); `(updates trained, seconds)`. Their
        training loss joins `train_losses`; a loss that is not finite stops the run."""
        accum, phase, start = self.options.accum_steps, self.phases[growths_done], time.perf_counter()
        batches = (
            self.objective.training_batch(self.train, self.options.batch_size, self.options.seed, u, micro_step)
            for u in range(update, stop)
            for micro_step in range(accum)
        )

        def after_call(steps, logs):
            return self._after_call(update, update + steps // accum, logs, progress, phase, start)

        steps, logs = train_stretch(model, batches, (stop - update) * accum, after_call)
        took, loss = time.perf_counter() - start, logs.get("loss", np.nan)
        self.train_losses.append((loss, steps))
        if not np.isfinite(loss):
            message = (
                f"The training loss is {loss} by update {update + steps // accum}: training diverged. Give a "
                f"lower --lr or a longer --warmup, in a new --output-dir; {self.folder.folder} keeps this "
                "run's log, metrics and last backup (the same command resumes it from there)."
            )
            self.folder.log(message)
            raise ValueError(message)
        return steps // accum, took

    def _after_call(self, first, trained, logs, progress, phase, start):
        """After a compiled call that trained up to update `trained` (from `first`): the progress bar moved on;
        whether to stop there (Ctrl-C asked, or the loss, the mean since `first`, is not finite)."""
        loss = logs.get("loss", np.nan)
        progress.update(trained - progress.n)
        tokens_per_second = (trained - first) * self.tokens_per_update / max(time.perf_counter() - start, 1e-9)
        progress.set_postfix_str(
            f"loss {loss:.3f}, {tokens_per_second:,.0f} tok/s, {phase.hidden_size}×{phase.num_layers}"
        )
        return self.stop_asked or not np.isfinite(loss)

    def _finish(self, model, update, growths_done, seconds, rows):
        self.save(model, update, growths_done, seconds)
        title = f"{self.options.model or self.phases[-1].describe()}: {self.options.grow}, budget {self.options.budget}"
        self.folder.plot(rows, title)
        final = self.folder.write_final(
            model, self.tokenizer, trained_length(self.options.seq_len, self.options.from_checkpoint)
        )
        flops = self.flops_at(update)
        self.folder.log(
            f"done: {update} updates, {flops:.3g} FLOPs in {seconds:.0f} s of training, validation loss "
            f"{rows[-1]['valid_loss']:.4f}; the model is in {final}"
        )
        return dict(model=model, output_dir=self.folder.folder, final=final, metrics=rows, growths=self.growths,
                    updates=update, flops=flops, seconds=seconds)  # fmt: skip

    def _grow(self, model, update, growths_done, seconds):
        growth = self.growths[growths_done]
        self.save(model, update, growths_done, seconds)  # before: a growth that fails loses nothing
        big, _ = recipe.grow_and_compile(model, update, growth.arguments, self.options.seed)
        self.folder.log(f"update {update}: grew ({recipe.arguments_text(growth.arguments)}) to "
                        f"{self.phases[growths_done + 1].describe()}")  # fmt: skip
        return self.seed_dropout(big, update)

    @contextlib.contextmanager
    def _stop_on_interrupt(self):
        """Ctrl-C asks the loop to stop after the update under way, saving a backup first."""

        def ask(signum, frame):
            if self.stop_asked:  # a second Ctrl-C: stop now
                raise KeyboardInterrupt
            self.stop_asked = True

        try:
            previous = signal.signal(signal.SIGINT, ask)
        except ValueError:  # not the main thread: no handler
            yield
            return
        try:
            yield
        finally:
            signal.signal(signal.SIGINT, previous)
