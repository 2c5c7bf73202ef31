"""Growth during training: `GrowthSchedule` says when and how to grow,
`fit_growing` trains, grows at those updates and trains on."""

import weakref

import keras

from kwiden.growth.options import GROW, names
from kwiden.keras_internals import compile_arguments, inner_optimizer
from kwiden.models import get_family
from kwiden.models.builder import build_transformer_model
from kwiden.models.config import is_count
from kwiden.optimizers import AccumulatingOptimizer
from kwiden.training import recipe
from kwiden.training.backups import Backup
from kwiden.training.compute import flops_per_token
from kwiden.training.stretch import fit_stretch

# The growth options a schedule may set: `kwiden.grow`'s (`growth.options.OPTIONS`) but its optimizer, which
# the trainer passes with the model.
GROW_ARGUMENTS = tuple(name for name in names(GROW) if name != "optimizer")
# The attribute in which a model `fit_growing` returns keeps the batches it has trained on.
BATCHES_ATTRIBUTE = "_kwiden_batches_trained"


class GrowthSchedule:
    """When to grow, counted in parameter updates, and how: `{update: grow's
    keyword arguments}`, updates strictly increasing in the order given.

    At update `u` (after `u` updates, before update `u + 1`) `fit_growing`
    calls `kwiden.grow(model, optimizer=model.optimizer, **arguments)`.

    >>> schedule = GrowthSchedule({2000: dict(k=2), 6000: dict(depth=2)})
    >>> schedule.updates
    [2000, 6000]
    >>> GrowthSchedule({6000: dict(depth=2), 2000: dict(k=2)})
    Traceback (most recent call last):
    ...
    ValueError: GrowthSchedule updates must be strictly increasing, got 6000 then 2000.
    """

    def __init__(self, growths):
        if not isinstance(growths, dict):
            raise ValueError(
                f"GrowthSchedule takes a dict {{update: dict(k=2, …)}}, got {type(growths).__name__}: {growths!r}."
            )
        self.growths = []
        for update, arguments in growths.items():
            update = _update(update)
            if self.growths and update <= self.growths[-1][0]:
                raise ValueError(
                    f"GrowthSchedule updates must be strictly increasing, got {self.growths[-1][0]} then {update}."
                )
            self.growths.append((update, _grow_arguments(update, arguments)))

    @classmethod
    def auto(cls, config, budget, model="gpt", seq_len=None, warmup=0, **build_arguments):
        """The growths `kwiden pretrain --grow auto` makes for a target, in
        updates: training to `schedule.steps` spends the FLOPs of `budget`
        updates of the target from scratch, each model charged its own cost
        (`kwiden.training.compute.flops_per_token` at `seq_len`, by default the
        config's `max_position_embeddings`).

        `config` is the target's (a dict, or a config.json path) for the
        family `model`; `build_arguments` go to `build_transformer_model`
        when the sizes are counted (`with_mlm=True` for a masked LM's head).
        The schedule also says where to start and why:
        `schedule.start_config` is the complete config of the small model to
        build and train first, `schedule.steps` the updates to give
        `fit_growing`, `schedule.why` what was chosen and why
        (docs/growth-that-pays.md).

        >>> config = dict(vocab_size=100, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
        ...               intermediate_size=256, max_position_embeddings=64)
        >>> schedule = GrowthSchedule.auto(config, budget=1000)
        >>> schedule.start_config["num_hidden_layers"], schedule.growths, schedule.steps
        (1, [(1285, {'depth': 2})], 1606)
        >>> schedule.why[:44]
        'depth ×2 at 80% of the updates, from 1 block'
        """
        family = get_family(model)
        target = family.config(config) if isinstance(config, dict) else family.config(config_path=config)
        seq_len = seq_len or target["max_position_embeddings"]
        growths, why = recipe.auto(target)
        configs = [recipe.undone(target, growths[i:]) for i in range(len(growths) + 1)]
        costs = [
            flops_per_token(build_transformer_model(c, model=family.name, **build_arguments), seq_len) for c in configs
        ]
        steps, growths = recipe.place(growths, budget, costs, warmup)
        schedule = cls({growth.update: growth.arguments for growth in growths})
        schedule.start_config, schedule.steps, schedule.why = configs[0], steps, why
        return schedule

    @property
    def updates(self):
        return [update for update, _ in self.growths]

    def get_config(self):
        return {"growths": {str(update): arguments for update, arguments in self.growths}}

    @classmethod
    def from_config(cls, config):
        return cls({int(update): arguments for update, arguments in config["growths"].items()})

    def __repr__(self):
        return f"GrowthSchedule({dict(self.growths)!r})"


def _update(value):
    if isinstance(value, str) and value.isdigit():
        value = int(value)
    if not is_count(value, 1):
        raise ValueError(f"GrowthSchedule updates must be integers >= 1, got {value!r}.")
    return int(value)


def _grow_arguments(update, arguments):
    if not isinstance(arguments, dict):
        raise ValueError(f"GrowthSchedule[{update}] must be a dict of kwiden.grow's arguments, got {arguments!r}.")
    unknown = sorted(set(arguments) - set(GROW_ARGUMENTS))
    if unknown:
        raise ValueError(
            f"GrowthSchedule[{update}] has {unknown[0]!r}, which kwiden.grow does not take (the trainer passes "
            f"the model and its optimizer); it takes {', '.join(GROW_ARGUMENTS)}."
        )
    return dict(arguments)


def fit_growing(model, data, schedule, steps, callbacks=None, verbose="auto", backup_dir=None):
    """Train `model` for `steps` parameter updates, growing it as `schedule` says.

    The model must be compiled with an optimizer `kwiden.grow` can carry
    (kwiden's, or Keras' SGD / Adam / AdamW). At each growth the optimizer is
    grown with the model (its state, its step count, and so its learning-rate
    schedule, which goes on counting updates), and the grown model is
    compiled with the same loss and metrics (the objects given to
    `compile`). Between growths this is `model.fit`: the progress bar and
    `callbacks` work as there, each stretch between growths being one `fit`
    call of one epoch, numbered on. A callback that sets
    `model.stop_training` ends the run at the end of its stretch
    (`TerminateOnNaN` at once); callbacks that keep state across epochs
    start afresh with each stretch, as in any new `fit` (`EarlyStopping`
    compares a stretch only with itself, so it does not stop the run). A growth
    replaces the per-slice multipliers of an earlier growth's `rewarm`.

    Args:
        model: a compiled functional model.
        data: an iterable of batches `(x, y)` or `(x, y, sample_weight)`, one
            per micro-step, long enough for `steps` updates (a repeated
            `tf.data.Dataset`, a generator). Its batches are taken in order.
        schedule: a `GrowthSchedule`, or the dict to make one. A growth
            without a `seed` is seeded by its update, so runs repeat.
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
        return _fit_growing(model, data, schedule, steps, callbacks, verbose, None)
    backup = Backup(backup_dir, schedule)
    with backup.held():
        return _fit_growing(model, data, schedule, steps, callbacks, verbose, backup)


def _fit_growing(model, data, schedule, steps, callbacks, verbose, backup):
    growths_done, consumed = 0, None
    if backup is not None and backup.exists():
        model, growths_done, consumed = backup.load(model)
    _check_compiled(model, schedule)
    accumulation = getattr(inner_optimizer(model.optimizer), "accum_steps", 1)
    if consumed is None:
        consumed = _batches_trained(model)
    _remember_batches(model, consumed)
    _check_not_past(schedule, growths_done, consumed // accumulation)
    _check_length(data, steps * accumulation)
    batches = iter(data)
    _skip(batches, consumed)
    history = {}
    while True:
        done = consumed // accumulation
        pending = [(u, a) for u, a in schedule.growths[growths_done:] if u < steps]
        if pending and pending[0][0] == done:
            update, arguments = pending[0]
            if backup is not None:
                backup.save(model, growths_done, consumed)
            model = _grow(model, update, arguments, verbose)
            _remember_batches(model, consumed)
            growths_done += 1
            if backup is not None:
                backup.save(model, growths_done, consumed)
            continue
        stop = pending[0][0] if pending else steps
        if done >= stop:
            break
        micro_steps = stop * accumulation - consumed
        trained, fitted = fit_stretch(
            model,
            _take(batches, micro_steps, consumed),
            micro_steps,
            initial_epoch=growths_done,  # stretch i is epoch i: callbacks see the epochs go on
            epochs=growths_done + 1,
            callbacks=callbacks or [],
            verbose=verbose,
        )
        for key, values in fitted.items():
            history.setdefault(key, []).extend(values)
        consumed += trained
        _remember_batches(model, consumed)
        if trained < micro_steps or model.stop_training:
            break  # a callback stopped training (TerminateOnNaN, or any that sets stop_training)
    if backup is not None:
        backup.save(model, growths_done, consumed)
    return model, history


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
        growths = [update for update, arguments in schedule.growths if arguments.get(asked)]
        if growths:
            raise ValueError(
                f"GrowthSchedule[{growths[0]}] asks for {shown}, which needs one of kwiden's optimizers ({needs}); "
                f"the model is compiled with {type(inner).__name__}."
            )


def _check_not_past(schedule, growths_done, done):
    """A model that has trained past a growth point it has not had cannot follow the schedule."""
    missed = [update for update, _ in schedule.growths[growths_done:] if update < done]
    if missed:
        raise ValueError(
            f"The model has done {done} updates, past the schedule's growth at update {missed[0]}, which it has "
            "not had: give a schedule whose growths come after the updates already done (or grow it first)."
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


def _grow(model, update, arguments, verbose):
    big, arguments = recipe.grow_and_compile(model, update, arguments)  # seed 0: the splits seeded by the update
    if verbose != 0:
        print(f"Grew at update {update} ({arguments}): {model.count_params():,} -> {big.count_params():,} parameters")
    return big


def _skip(batches, count):
    for taken in range(count):
        if next(batches, None) is None:
            raise ValueError(f"`data` ran out after {taken} batches while skipping the {count} already trained on.")


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
