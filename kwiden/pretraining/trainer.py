"""`kwiden pretrain`'s front end of the one training loop
(`kwiden.training.loop`, which grows, backs up, stops on Ctrl-C and on a loss
that is not finite): its phases, deterministic batches, evaluations, metrics
rows and log."""

import dataclasses
import re
import time
import zipfile

import keras
import numpy as np

from kwiden.arguments import is_count
from kwiden.growth.pipeline import grown_skeleton
from kwiden.models import naming
from kwiden.models.builder import build_transformer_model
from kwiden.models.hf import refuse_copied_rotary
from kwiden.optimizers import AdamW
from kwiden.pretraining.clock import RunClock, readable_seconds
from kwiden.pretraining.outputs import BACKUP, trained_length
from kwiden.training import recipe
from kwiden.training.backups import Position, RunBackup
from kwiden.training.compute import flops_per_token
from kwiden.training.loop import GrowingLoop, LoopHooks, could_be_at, seed_dropout
from kwiden.training.schedule import GrowthSchedule

STATE_FILE = "state.json"
EVALUATIONS = 20
# Updates a compiled call runs where nothing happens between them (Keras' steps_per_execution, in updates).
UPDATES_PER_CALL = 32
PROGRESS_BAR = "{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}, {rate_fmt}{postfix}]"
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
    def planned(cls, config, family, objective):
        """The phase of a model `config` gives, built as a skeleton: shapes, no weights held."""
        with keras.StatelessScope(initialize_variables=False):
            model = build_transformer_model(config, model=family.name, **objective.model_arguments)
        return cls.of(model, objective.seq_len)

    @classmethod
    def grown_from(cls, model, growths, family, objective):
        """The first phase (`model`) and what each growth makes of it, grown
        here as skeletons (`grown_skeleton`: shapes, no weights held) to learn
        their sizes and to refuse a growth `grow` would refuse, before any
        training."""
        phases = [cls.of(model, objective.seq_len, keep=True)]
        for growth in growths:
            shape_only = {k: v for k, v in growth.arguments.items() if k not in OPTIMIZER_ARGUMENTS}
            where = f"--grow: the growth at {growth.fraction:g} ({recipe.arguments_text(shape_only)})"
            try:
                model = grown_skeleton(model, **shape_only)
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


class Trainer(LoopHooks):
    """`kwiden pretrain`'s front end of the training loop (`kwiden.training.loop`): deterministic batches from
    `(seed, update, micro-step)`, evaluations and metrics rows, the log and the progress bar, the run's folder."""

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
        self.growth_schedule = GrowthSchedule.placed(growths)
        self.backup = RunBackup(self.backups, STATE_FILE, "model-", "--output-dir", self.growth_schedule)
        self.eval_every = options.eval_every or max(1, total // EVALUATIONS)
        self.tokens_per_update = options.batch_size * options.accum_steps * objective.seq_len
        self.train_losses = []  # since the last metrics row
        self.seconds, self.rows, self.progress, self.stretch_start = 0.0, [], None, None
        self.clock = RunClock([g.update for g in growths], per_update, total)
        # (update, time) the clock runs from in this stretch (time None: not yet); stages whose step is compiled; said
        self.last_call, self.warm, self.timed = None, set(), set()

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
        return self.objective.prepared(model)

    def fresh_model(self):
        optimizer = AdamW(self.schedule, weight_decay=WEIGHT_DECAY, accum_steps=self.options.accum_steps)
        return seed_dropout(self.compile(self.phases[0].model, optimizer), self.options.seed, 0)

    # Backups
    def backup_extras(self):
        """What a backup adds to the loop's position: the seconds of training and the training losses since the
        last metrics row (the next row averages them, resumed or not)."""
        if self.folder.will_write(BACKUP).is_symlink():
            raise ValueError(f"{self.backups} is a link; kwiden keeps its backups in a folder of its own: remove it.")
        if not self.folder.record_value("backed_up"):  # from here a missing state.json is a loss, not a new run
            self.folder.record_value("backed_up", True)
        return dict(seconds=self.seconds, train_losses=self.train_losses)

    def restore(self):
        """`(model, position)` from the last backup, or None where the run never backed up."""
        path = self.backup.saved.state_path
        if not path.is_file():
            if self.folder.record_value("backed_up"):
                raise ValueError(
                    f"{path} is missing, though this run has backed up: it would start again from update 0 and "
                    "replace its backup. Restore backup/, or give another --output-dir for a new run."
                )
            return None
        state = self.backup.read()
        position = self._position(state, path)
        model_file = self.backups / state["model"]
        try:
            model = self.objective.prepared(self.backup.load(state, **self.compile_arguments()))
        except (OSError, ValueError, zipfile.BadZipFile) as error:
            raise ValueError(f"The backup {model_file} cannot be loaded ({str(error)[:200]}); restore it, or give "
                             "another --output-dir.") from None  # fmt: skip
        wanted = self.phases[position.growths_done].weight_shapes
        if weight_shapes(model) != wanted:
            raise ValueError(f"The backup {model_file} is not this run's model after {position.growths_done} "
                             f"growth(s) ({_difference(weight_shapes(model), wanted)}); restore it, or give another "
                             "--output-dir (a run an older kwiden began, whose objective's model has changed since, "
                             "resumes with that kwiden).")  # fmt: skip
        # A backup of an older kwiden holds no losses (the next row then averages the resumed updates' alone), or
        # one a micro-batch.
        self.train_losses = [tuple(loss) if isinstance(loss, list) else (loss, 1) for loss in state["train_losses"]]
        self.seconds = float(state["seconds"])
        return model, position

    def _position(self, state, path):
        """The `Position` of a backup's state, refused where it is not one this run could have written."""
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
        position = self.backup.position(state, self.options.accum_steps) if fits else None
        if position is None or not could_be_at(self.growth_schedule, self.total, position):
            raise ValueError(
                f"{path}, the backup's position, is not one this run wrote (or names a backup missing from "
                f"{self.backups}); restore backup/, or give another --output-dir."
            )
        return position

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

    def record(self, model, update, growths_done, train_losses, grew=False):
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
            seconds=round(self.seconds, 3),
        )
        if grew:
            row["grew"] = True
        self.folder.add_metrics(row)
        self.rows.append(row)
        return row

    # The run
    def run(self):
        model, position = self._start()
        from tqdm.auto import tqdm

        self.folder.starts_training()
        loop = GrowingLoop(self.growth_schedule, self.total, self.options.accum_steps, self, self.backup,
                           self.options.save_every, self.options.seed)  # fmt: skip
        with tqdm(total=self.total, initial=position.update, disable=not self.verbose, unit="update",
                  dynamic_ncols=True) as self.progress:  # fmt: skip
            model, position = loop.run(model, position)
        return self._finish(model, position.update)

    def _start(self):
        """`(model, position)` to train on from: the last backup's, or a fresh model's (the rows after the backup
        dropped)."""
        restored = self.restore()
        if restored is None:
            model, position = self.fresh_model(), Position(0, 0, 0)
            self.folder.metrics(until=-1)
        else:
            model, position = restored
            self.folder.log(f"resuming from the backup at update {position.update}")
            regrow = self.growth_schedule.due(position.update, position.growths_done, self.total) is not None
            self.folder.metrics(until=position.update, regrow=regrow)
        self.rows = self.folder.metrics()
        if not self.rows:
            self.record(model, 0, position.growths_done, [])
        return model, position

    # The loop's hooks
    def stops(self, update):
        return [(update // self.eval_every + 1) * self.eval_every]

    def stretch_batches(self, position, count):
        self.stretch_start = time.perf_counter()  # a stretch's seconds begin as its batches are asked for
        self.last_call = (position.update, None)
        accum = self.options.accum_steps
        return (
            self.objective.training_batch(self.train, self.options.batch_size, self.options.seed, u, micro_step)
            for u in range(position.update, position.update + count // accum)
            for micro_step in range(accum)
        )

    def after_call(self, first, trained, logs):
        self._after_call(first, trained, logs)

    def _after_call(self, first, trained, logs):
        """After a compiled call that trained up to update `trained` (from `first`): the progress bar moved on."""
        loss, now = logs.get("loss", np.nan), time.perf_counter()
        self.progress.update(trained - self.progress.n)
        tokens_per_second = (trained - first) * self.tokens_per_update / max(now - self.stretch_start, 1e-9)
        stage = self.clock.stage_at(first)
        phase = self.phases[stage]
        self._time_call(stage, trained, now)
        left = self.clock.seconds_left(trained)
        if left is not None:  # tqdm's time left assumes every update takes as long: the clock's counts every stage
            self.progress.bar_format = PROGRESS_BAR
        self.progress.set_postfix_str(
            f"loss {loss:.3f}, {tokens_per_second:,.0f} tok/s, {phase.hidden_size}×{phase.num_layers}"
            + ("" if left is None else f", about {readable_seconds(left)} left")
        )

    def _time_call(self, stage, trained, now):
        """The clock told of a compiled call of `stage` that ended at `now` with update `trained`. A stage's first
        call compiles its step: the clock starts after it. A call that ended inside an update (accumulation on
        PyTorch, one micro-batch a call) is timed with the next."""
        previous, since = self.last_call
        if since is None and stage in self.warm:
            since = self.stretch_start  # a later stretch: its first call compiles nothing
        self.warm.add(stage)
        if since is None:
            self.last_call = (trained, now)
        elif trained > previous:
            self.clock.measured(previous, trained - previous, now - since)
            self.last_call = (trained, now)
            self._say_time(trained)

    def _say_time(self, update):
        """The log's line, once a stage: its measured update time and the training time left, every stage in."""
        stage = self.clock.stage_at(update - 1)
        if stage in self.timed:
            return
        self.timed.add(stage)
        later = [s for s in range(stage + 1, len(self.phases)) if self.clock.estimated(s)]
        self.folder.log(
            f"time: {self.clock.update_seconds(stage):.3g} s an update at {self.phases[stage].describe()}; the "
            f"{self.total - update} updates left train in about {readable_seconds(self.clock.seconds_left(update))}"
            + (f" (the stage{'s' * (len(later) > 1)} not yet reached estimated by FLOPs)" if later else "")
            + ", evaluations and backups aside"
        )

    def after_stretch(self, model, position, trained, logs, history):
        self.seconds += time.perf_counter() - self.stretch_start
        self.train_losses.append((logs.get("loss", np.nan), trained))
        if position.update % self.eval_every == 0 or position.update == self.total:
            self.record(model, position.update, position.growths_done, self.train_losses)
            self.train_losses = []

    def grown(self, source, model, position, growth, arguments):
        self.objective.prepared(model)  # compiled by the growth as `source` was, its loss step not carried
        self.folder.log(f"update {position.update}: grew ({recipe.arguments_text(growth.arguments)}) to "
                        f"{self.phases[position.growths_done].describe()}")  # fmt: skip
        self.record(model, position.update, position.growths_done, [], grew=True)

    def stopped(self, position, backed_up):
        message = f"stopped at update {position.update}: backup saved; run the same command to resume"
        self.folder.log(message)
        return message

    def diverged(self, position, loss):
        message = (
            f"The training loss is {loss} by update {position.update}: training diverged. Give a "
            f"lower --lr or a longer --warmup, in a new --output-dir; {self.folder.folder} keeps this "
            "run's log, metrics and last backup (the same command resumes it from there)."
        )
        self.folder.log(message)
        return message

    def _finish(self, model, update):
        title = f"{self.options.model or self.phases[-1].describe()}: {self.options.grow}, budget {self.options.budget}"
        self.folder.plot(self.rows, title)
        final = self.folder.write_final(
            model, self.tokenizer, trained_length(self.options.seq_len, self.options.from_checkpoint)
        )
        flops = self.flops_at(update)
        self.folder.log(
            f"done: {update} updates, {flops:.3g} FLOPs in {self.seconds:.0f} s of training, validation loss "
            f"{self.rows[-1]['valid_loss']:.4f}; the model is in {final}"
        )
        return dict(model=model, output_dir=self.folder.folder, final=final, metrics=self.rows, growths=self.growths,
                    updates=update, flops=flops, seconds=self.seconds)  # fmt: skip
