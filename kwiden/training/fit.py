"""`fit_growing`: Keras training that grows, one front end of the training
loop (`kwiden.training.loop`): it hands the loop the user's batches in order,
`fit`'s callbacks and progress bar, and keeps the history."""

import pathlib
import weakref

import keras

from kwiden.arguments import is_count
from kwiden.keras_internals import compile_arguments, inner_optimizer
from kwiden.optimizers import AccumulatingOptimizer
from kwiden.training.backups import Position, RunBackup, held
from kwiden.training.loop import GrowingLoop, LoopHooks, could_be_at, missed_growth
from kwiden.training.schedule import GrowthSchedule

# The attribute in which a model `fit_growing` returns keeps the batches it has trained on.
BATCHES_ATTRIBUTE = "_kwiden_batches_trained"
# The files of a `backup_dir`: only those named so are ever deleted, so the folder may hold a user's own.
STATE_FILE = "kwiden-growing.json"
BACKUP_PREFIX = "kwiden-backup-"


def fit_growing(model, data, schedule, steps, callbacks=None, verbose="auto", backup_dir=None, seed=0):
    """Train `model` for `steps` parameter updates, growing it as `schedule` says.

    The model must be compiled with an optimizer `kwiden.grow` can carry
    (kwiden's, or Keras' SGD / Adam / AdamW). At each growth the optimizer is
    grown with the model (its state, its step count, and so its learning-rate
    schedule, which goes on counting updates), and the grown model is
    compiled with the same loss and metrics (the objects given to
    `compile`). Between growths this is `model.fit`: the progress bar and
    `callbacks` work as there, each stretch between growths being one `fit`
    call of one epoch, numbered on. A callback that sets
    `model.stop_training` ends the run at the end of its stretch;
    callbacks that keep state across epochs start afresh with each stretch,
    as in any new `fit` (`EarlyStopping` compares a stretch only with itself,
    so it does not stop the run). A growth replaces the per-slice
    multipliers of an earlier growth's `rewarm`.

    This is the Keras front end of kwiden's one training loop
    (`kwiden.training.loop`, which `kwiden pretrain` runs too): a Ctrl-C
    stops at the end of the `fit` call under way (`steps_per_execution`
    batches), saves a backup in `backup_dir` and raises KeyboardInterrupt
    (the same call resumes; a second Ctrl-C stops at once, unsaved); a
    training loss that turns NaN or infinite stops the run there with a
    ValueError naming the update, `backup_dir` keeping the last backup
    before it (`TerminateOnNaN` is not needed).

    Args:
        model: a compiled functional model.
        data: an iterable of batches `(x, y)` or `(x, y, sample_weight)`, one
            per micro-step, long enough for `steps` updates (a repeated
            `tf.data.Dataset`, a generator). Its batches are taken in order.
        schedule: a `GrowthSchedule`, or the dict to make one. A growth
            without a `seed` is seeded from `seed` and its update
            (`recipe.growth_seed`), so runs repeat.
        steps: the number of parameter updates to train to, counted from
            the optimizer's first (a resumed run goes on to the same number),
            in batches trained on: one update is `accum_steps` batches, and
            a step that mixed precision's loss scaling skips counts as done.
            A growth at update `u` happens before update `u + 1`, so growths
            at `steps` or later are not reached (a later call with more
            steps reaches them). The model must not have done more updates
            than a growth it has not had.
        callbacks, verbose: as for `model.fit`.
        backup_dir: a folder. The model (with its optimizer) is saved there
            just before and just after each growth and when training ends; if
            it holds a save when `fit_growing` starts, training resumes from it
            instead of `model`, skipping the batches of `data` already trained
            on (pass the same data again), compiled with `model`'s loss,
            metrics and settings and the saved optimizer and its state (so an
            unregistered loss function resumes too). Its files are named
            `kwiden-backup-*.keras` and `kwiden-growing.json`; only those it
            wrote are ever deleted, so the folder may hold other files.
        seed: the run's seed, from which each growth's splits and the grown
            model's Dropout generators are seeded with the growth's update
            (0: the growths seeded as before kwiden's one loop, by their
            update alone).

    Returns:
        `(model, history)`: the final, grown model, and a dict of each logged
        value per epoch.

    Example:

    >>> import keras, numpy as np, kwiden
    >>> small = kwiden.build_transformer_model(dict(vocab_size=30, hidden_size=8,
    ...     num_hidden_layers=1, num_attention_heads=2), model="gpt")
    >>> small.compile(kwiden.optimizers.Adam(1e-3),
    ...     keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    >>> ids = np.random.default_rng(0).integers(1, 30, (4, 9))
    >>> data = [(ids[:, :-1], ids[:, 1:])] * 6
    >>> big, history = kwiden.fit_growing(small, data, {3: dict(k=2)}, steps=6, verbose=0)
    >>> big.get_layer("Embedding-Token").output_dim, len(history["loss"])
    (16, 2)
    """
    if not isinstance(schedule, GrowthSchedule):
        schedule = GrowthSchedule(schedule)
    steps = _steps(steps)
    if backup_dir is None:
        return _fit_growing(model, data, schedule, steps, _FitHooks(data, callbacks, verbose, None), seed, None)
    if pathlib.Path(backup_dir).exists() and not pathlib.Path(backup_dir).is_dir():
        raise ValueError(f"`backup_dir` {backup_dir} is a file; give a folder (it is made if missing).")
    with held(backup_dir, "backup_dir"):
        hooks = _FitHooks(data, callbacks, verbose, backup_dir)
        return _fit_growing(model, data, schedule, steps, hooks, seed, backup_dir)


def _fit_growing(model, data, schedule, steps, hooks, seed, backup_dir):
    backup = None
    if backup_dir is not None:
        backup = RunBackup(backup_dir, STATE_FILE, BACKUP_PREFIX, "backup_dir", schedule)
    model, position = _start(model, schedule, steps, backup)
    accumulation = _accumulation(model)
    _check_length(data, steps * accumulation)
    hooks.skip(position.batches)
    loop = GrowingLoop(schedule, steps, accumulation, hooks, backup, seed=seed)
    model, position = loop.run(model, position)
    return model, hooks.history


def _start(model, schedule, steps, backup):
    """`(model, position)` to train on from: the backup's, or `model`'s as it is; refused where the model cannot
    follow the schedule."""
    state = backup.read() if backup is not None else None
    if state is not None:
        model = backup.load(state, live=model)
        _check_compiled(model, schedule)
        position = backup.position(state, _accumulation(model), counted=_batches_trained(model))
        if not could_be_at(schedule, steps, position):
            raise ValueError(
                f"{backup.saved.state_path} is not a backup of this schedule's run to {steps} updates (it is at "
                f"update {position.update}, after {position.growths_done} growth(s)); delete it, or give another "
                "backup_dir."
            )
    else:
        _check_compiled(model, schedule)
        batches = _batches_trained(model)
        position = Position(batches, batches // _accumulation(model), 0)
    _remember_batches(model, position.batches)
    missed = missed_growth(schedule, position)
    if missed is not None:
        raise ValueError(
            f"The model has done {position.update} updates, past the schedule's growth at update {missed}, which it "
            "has not had: give a schedule whose growths come after the updates already done (or grow it first)."
        )
    return model, position


def _accumulation(model):
    return getattr(inner_optimizer(model.optimizer), "accum_steps", 1)


class _FitHooks(LoopHooks):
    """`fit_growing`'s side of the loop: the user's batches in order, one `fit` epoch a stretch (numbered on, so
    callbacks see the epochs go on), the history, the batches trained on kept on the model."""

    def __init__(self, data, callbacks, verbose, backup_dir):
        self.batches, self.callbacks, self.verbose = iter(data), callbacks or [], verbose
        self.backup_dir, self.history = backup_dir, {}

    def skip(self, count):
        for taken in range(count):
            if next(self.batches, None) is None:
                raise ValueError(f"`data` ran out after {taken} batches while skipping the {count} already trained on.")

    def stretch_batches(self, position, count):
        return _take(self.batches, count, position.batches)

    def fit_arguments(self, position):
        epoch = position.growths_done  # stretch i is epoch i (a stretch stopped by Ctrl-C goes on in the same one)
        return dict(callbacks=self.callbacks, verbose=self.verbose, initial_epoch=epoch, epochs=epoch + 1)

    def after_stretch(self, model, position, trained, logs, history):
        for key, values in history.items():
            self.history.setdefault(key, []).extend(values)
        _remember_batches(model, position.batches)

    def grown(self, source, model, position, growth, arguments):
        if self.verbose != 0:
            print(f"Grew at update {growth.update} ({arguments}): {source.count_params():,} -> "
                  f"{model.count_params():,} parameters")  # fmt: skip
        _remember_batches(model, position.batches)

    def stopped(self, position, backed_up):
        if backed_up:
            return (f"fit_growing stopped at update {position.update} (Ctrl-C): backed up in {self.backup_dir}; "
                    "call it again with the same arguments to resume")  # fmt: skip
        return f"fit_growing stopped at update {position.update} (Ctrl-C); give backup_dir= to resume from there"

    def diverged(self, position, loss):
        kept = f"; {self.backup_dir} keeps the last backup before it" if self.backup_dir is not None else ""
        return (
            f"The training loss is {loss} by update {position.update}: training diverged. Lower the learning rate "
            f"or lengthen its warmup{kept}."
        )


def _remember_batches(model, consumed):
    """Keep on `model` the batches trained on, its optimizer and that
    optimizer's iterations then, so that a later call goes on from there (the
    two part where loss scaling skipped steps)."""
    # A weak reference, not `id`: a new optimizer may be given the freed one's address.
    setattr(model, BATCHES_ATTRIBUTE, (consumed, _iterations(model), weakref.ref(model.optimizer)))


def _batches_trained(model):
    """The batches `model` has trained on: its optimizer's iterations, and
    the steps loss scaling skipped in an earlier `fit_growing` call with the
    same optimizer (a model compiled afresh starts from its new optimizer's count)."""
    consumed, iterations, optimizer = getattr(model, BATCHES_ATTRIBUTE, (0, 0, None))
    skipped = consumed - iterations if optimizer is not None and optimizer() is model.optimizer else 0
    return _iterations(model) + skipped


def _iterations(model):
    return int(keras.ops.convert_to_numpy(model.optimizer.iterations))


def _steps(value):
    if not is_count(value, 0):
        raise ValueError(f"`steps` must be an integer >= 0 (parameter updates), got steps={value!r}.")
    return int(value)


def _check_compiled(model, schedule):
    optimizer = getattr(model, "optimizer", None)
    if optimizer is None or compile_arguments(model) is None:
        raise ValueError(
            f"fit_growing needs a compiled model: call {model.name}.compile(optimizer, loss) first "
            "(with one of kwiden's optimizers, or Keras' SGD, Adam or AdamW)."
        )
    inner = inner_optimizer(optimizer)
    if getattr(inner, "gradient_accumulation_steps", None):
        raise ValueError(
            "fit_growing counts growth points in updates, and Keras' gradient_accumulation_steps counts "
            "them its own way: use kwiden.optimizers with accum_steps= instead."
        )
    if isinstance(inner, AccumulatingOptimizer):
        return
    for asked, shown, needs in (
        ("rewarm", "`rewarm`", "per-slice learning rates"),
        ("scale_learning_rates", "`scale_learning_rates=True`", "per-tensor learning rates"),
    ):
        growths = [growth.update for growth in schedule.growths if growth.arguments.get(asked)]
        if growths:
            raise ValueError(
                f"GrowthSchedule[{growths[0]}] asks for {shown}, which needs one of kwiden's optimizers ({needs}); "
                f"the model is compiled with {type(inner).__name__}."
            )


def _check_length(data, micro_steps):
    """Data with a length must hold a batch for every micro-step."""
    try:
        length = len(data)
    except TypeError:
        return  # a generator or an infinite dataset: checked as it is read
    if 0 <= length < micro_steps:
        raise ValueError(
            f"`data` holds {length} batches; fit_growing needs one per micro-step, {micro_steps} for "
            "these `steps` (repeat the dataset)."
        )


def _take(batches, count, consumed):
    """The next `count` batches; a clear error if `data` runs out."""
    for taken in range(count):
        batch = next(batches, None)
        if batch is None:
            raise ValueError(
                f"`data` ran out after {consumed + taken} batches; fit_growing needs one per micro-step "
                "for all `steps` updates (repeat the dataset)."
            )
        yield batch


__all__ = ["GrowthSchedule", "fit_growing"]
