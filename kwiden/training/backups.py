"""The training loop's backups (`kwiden.training.loop`): the model saved with
its optimizer and the run's position, one format for `fit_growing` and
`kwiden pretrain`, in a folder held by one run at a time."""

import contextlib
import dataclasses
import json
import pathlib

import keras
import numpy as np

from kwiden.arguments import is_count
from kwiden.files import TEMPORARY, FolderLock, replaced_atomically, sweep
from kwiden.keras_internals import compile_arguments, saved_optimizer_config, seed_generator_states


class SavedModel:
    """One run's backup in `folder`, the format both training loops share:
    the model with its optimizer (`{prefix}{tag}.keras`, written beside and
    renamed) and a JSON state naming it, with the backend it was made on and
    Dropout's generator states (not in the .keras file), beside what the loop
    adds (its position, its running losses). The state is written after the
    model, so a kill mid-save keeps the previous backup; then the model the
    state named before and any other of `prefix`'s names are removed, and no
    other file: the folder may hold the user's."""

    def __init__(self, folder, state_file, prefix):
        self.folder, self.state_file, self.prefix = pathlib.Path(folder), state_file, prefix

    @property
    def state_path(self):
        return self.folder / self.state_file

    def write(self, model, tag, state):
        self.folder.mkdir(parents=True, exist_ok=True)
        previous = self._named()
        # A save a kill interrupted left a temporary named after its own file, which no later save may share.
        sweep(self.folder, f".{self.prefix}*{TEMPORARY}*.keras")
        name = f"{self.prefix}{tag}.keras"
        with replaced_atomically(self.folder / name) as temporary:
            model.save(temporary)
        generators = [np.asarray(variable).tolist() for variable in seed_generator_states(model)]
        state = {"model": name, "backend": keras.backend.backend(), "generators": generators, **state}
        with replaced_atomically(self.state_path) as temporary:
            temporary.write_text(json.dumps(state, indent=1), "utf-8")
        # The one the state named before (an earlier kwiden's name, too), and any a kill left.
        for old in {previous, *(path.name for path in self.folder.glob(f"{self.prefix}*.keras"))} - {None, name}:
            (self.folder / old).unlink(missing_ok=True)
        return name

    def _named(self):
        """The model file the state names now, or None."""
        try:
            name = json.loads(self.state_path.read_text(encoding="utf-8")).get("model")
        except (OSError, ValueError, AttributeError):
            return None
        return name if _model_file(name) else None

    def read(self, where):
        """The state, or None where there is none; refused, naming `where` (the argument that gave the folder),
        where it is not one kwiden wrote or was made on another backend."""
        if not self.state_path.is_file():
            return None
        try:
            state = json.loads(self.state_path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            raise ValueError(
                f"{self.state_path} is not a backup state kwiden can read ({error}): it was changed or damaged. "
                f"Delete it to start afresh (its model files stay), or give another {where}."
            ) from None
        name = state.get("model") if isinstance(state, dict) else None
        if not _model_file(name):
            raise ValueError(
                f"{self.state_path} is not a backup state kwiden wrote (it names a .keras file of its own in its "
                f"folder); delete it, or give another {where}."
            )
        began = state.get("backend", keras.backend.backend())  # an older kwiden's state does not say
        if began != keras.backend.backend():
            raise ValueError(
                f"The backup in {self.folder} was made on the {began} backend; resumed on "
                f"{keras.backend.backend()} it would not end on the weights the run would have reached: resume "
                f"with KERAS_BACKEND={began}, or give another {where} to start afresh."
            )
        return state

    def load(self, state, loaded=None, **compile_arguments):
        """The model `state` names, compiled with `compile_arguments` and its saved optimizer state
        (`load_with_optimizer`), or as `loaded(path)` loads it; Dropout's generators as they were."""
        path = self.folder / state["model"]
        model = loaded(path) if loaded is not None else load_with_optimizer(path, **compile_arguments)
        for variable, value in zip(seed_generator_states(model), state.get("generators", [])):
            variable.assign(np.array(value, dtype=variable.dtype))
        return model


def _model_file(name):
    """Whether `name` is a .keras file's name in the backup's own folder (no path)."""
    return isinstance(name, str) and pathlib.Path(name).name == name and name.endswith(".keras")


@dataclasses.dataclass(frozen=True)
class Position:
    """Where a run is: the micro-batches it has trained on (its place in the data; a step that mixed precision's
    loss scaling skipped counts as trained), the parameter updates done, the growths had."""

    batches: int
    update: int
    growths_done: int

    def advanced(self, batches, accumulation):
        batches += self.batches
        return Position(batches, batches // accumulation, self.growths_done)

    def grown(self):
        return dataclasses.replace(self, growths_done=self.growths_done + 1)


class RunBackup:
    """A run's backup, the one format of both front ends of the loop (`fit_growing`, `kwiden pretrain`):
    `SavedModel`'s model, optimizer and Dropout generators, with the run's `Position`, its schedule's config and
    what the front end adds (pretrain: its seconds and running losses). Each front end names its own state file
    and model prefix (`kwiden-growing.json` beside a user's files, `state.json` in a run's backup/).

    A state an earlier kwiden wrote resumes: `fit_growing`'s held no update (its batches over the accumulation
    give it), pretrain's neither its batches (its updates times the accumulation) nor its schedule (the run's
    run.json fixes that)."""

    def __init__(self, folder, state_file, prefix, where, schedule):
        self.saved = SavedModel(folder, state_file, prefix)
        self.where, self.schedule = where, schedule
        # Growth arguments may be Fractions or arrays: compared by their text.
        self.schedule_text = json.loads(json.dumps(schedule.get_config(), default=repr))

    @property
    def folder(self):
        return self.saved.folder

    def exists(self):
        return self.saved.state_path.exists()

    def save(self, model, position, **extras):
        state = {**dataclasses.asdict(position), "schedule": self.schedule_text, **extras}
        self.saved.write(model, f"{position.update}-{position.growths_done}", state)

    def read(self):
        """The backup's state, or None where there is none; refused where it is not one kwiden wrote, or was made
        under another schedule."""
        state = self.saved.read(self.where)
        if state is None:
            return None
        if "schedule" in state and state["schedule"] != self.schedule_text:
            raise ValueError(
                f"The backup in {self.folder} was made under another growth schedule "
                f"({state['schedule'].get('growths') if isinstance(state['schedule'], dict) else state['schedule']}, "
                f"now {self.schedule!r}): pass the same schedule to resume, or another {self.where} to start afresh."
            )
        return state

    def position(self, state, accumulation, counted=None):
        """The `Position` of a state `read` gave, of a model accumulating over `accumulation` batches an update;
        `counted`: the batches the loaded model's optimizer counts, for a state that says neither its batches nor
        its updates (`fit_growing`'s in its first versions)."""
        update, batches = state.get("update"), state.get("batches", counted if "update" not in state else None)
        if update is None and is_count(batches):
            update = batches // accumulation  # fit_growing's state before the one loop
        if batches is None and is_count(update):
            batches = update * accumulation  # pretrain's state before the one loop
        if not (is_count(update) and is_count(batches) and is_count(state.get("growths_done"))):
            raise ValueError(
                f"{self.saved.state_path} is not a backup state kwiden wrote (it holds the updates, batches and "
                f"growths done); delete it, or give another {self.where}."
            )
        return Position(batches, update, state["growths_done"])

    def load(self, state, live=None, **compile_arguments):
        """The model the state names, compiled with `compile_arguments` and the saved optimizer and its state;
        with `live` (a model), compiled as `live` is (its loss, metrics, settings), or as saved where `live` is not
        compiled; not compiled by Keras' loader, which cannot find a loss function that is not registered."""
        config = compile_arguments if live is None else _compile_arguments(live)
        if config is not None:
            return self.saved.load(state, **config)
        try:
            return self.saved.load(state, loaded=keras.saving.load_model)
        except TypeError as error:  # Keras' "Could not locate function 'my_loss'"
            raise ValueError(
                f"The backup {self.folder / state['model']} cannot be compiled as saved "
                f"({str(error).split('. ')[0]}): pass the model compiled with its loss and metrics, "
                "and it resumes with those."
            ) from None


def _compile_arguments(model):
    config = compile_arguments(model)
    if config is not None:
        config.pop("optimizer")
    return config


@contextlib.contextmanager
def held(folder, where):
    """The folder held for this call alone (a `flock`, dropped by the kernel if the process dies): two runs
    backing up into one folder would delete each other's saves."""
    folder = pathlib.Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    lock = FolderLock(folder)
    lock.hold(
        lambda: (
            f"`{where}` {folder} is in use by another process backing up there: wait for it to end, "
            f"or give another {where}."
        ),
        f"`{where}` {folder} is on a file system without locks: start one run on it at a time.",
    )
    try:
        yield
    finally:
        lock.release()


def load_with_optimizer(path, **compile_arguments):
    """The model saved at `path` with its optimizer and the optimizer's state,
    compiled with `compile_arguments` (loss, metrics, …): not compiled by
    Keras' loader, which cannot find a loss function that is not registered."""
    model = keras.saving.load_model(path, compile=False)
    optimizer = keras.optimizers.deserialize(saved_optimizer_config(path))
    model.compile(optimizer=optimizer, **compile_arguments)
    # The compiled optimizer: under mixed_float16 `compile` wraps the saved one for loss scaling,
    # and the wrapper's scale is part of the saved state.
    model.optimizer.build(model.trainable_variables)
    model.load_weights(path)  # the weights again, and the optimizer's state
    return model
