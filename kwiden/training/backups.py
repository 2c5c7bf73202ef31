"""`fit_growing`'s backups: the model saved with its optimizer, how many
growths it has had and how many batches it has trained on, in a folder held by
one run at a time; and `load_with_optimizer`, which both training loops
resume with."""

import contextlib
import json
import pathlib

import keras
import numpy as np

from kwiden.files import TEMPORARY, FolderLock, replaced_atomically, sweep
from kwiden.keras_internals import compile_arguments, saved_optimizer_config, seed_generator_states

STATE_FILE = "kwiden-growing.json"
# The name of every model a backup writes: `fit_growing` deletes only files it wrote.
BACKUP_PREFIX = "kwiden-backup-"


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


class Backup:
    """The model saved under `folder`, with how many growths it has had and
    how many batches it has trained on; a small JSON file names the current
    save, so a crash mid-save keeps the previous one. Only files this class
    wrote are deleted: the folder may hold a user's own models."""

    def __init__(self, folder, schedule):
        self.folder = pathlib.Path(folder)
        if self.folder.exists() and not self.folder.is_dir():
            raise ValueError(f"`backup_dir` {self.folder} is a file; give a folder (it is made if missing).")
        self.schedule = schedule
        self.saved = SavedModel(self.folder, STATE_FILE, BACKUP_PREFIX)
        # Growth arguments may be Fractions or arrays: compared by their text.
        self.schedule_text = json.loads(json.dumps(schedule.get_config(), default=repr))

    @contextlib.contextmanager
    def held(self):
        """The folder held for this call alone (a `flock`, dropped by the
        kernel if the process dies): two runs backing up into one folder
        would delete each other's saves."""
        self.folder.mkdir(parents=True, exist_ok=True)
        lock = FolderLock(self.folder)
        lock.hold(
            lambda: (
                f"`backup_dir` {self.folder} is in use by another process backing up there: wait for it to end, "
                "or give another backup_dir."
            ),
            f"`backup_dir` {self.folder} is on a file system without locks: start one run on it at a time.",
        )
        try:
            yield
        finally:
            lock.release()

    def exists(self):
        return self.saved.state_path.exists()

    def save(self, model, growths_done, consumed):
        self.saved.write(model, f"{consumed}-{growths_done}",
                         {"growths_done": growths_done, "batches": consumed, "schedule": self.schedule_text})  # fmt: skip

    def load(self, live):
        """`(model, growths done, batches trained on or None)`: the saved
        model, compiled as `live` is (its loss, metrics, settings) with the
        saved optimizer and state; not compiled by Keras' loader, which
        cannot find a loss function that is not registered. An uncompiled
        `live` takes the saved compile."""
        state = self.saved.read("backup_dir")
        if not {"growths_done", "schedule"} <= set(state):
            raise ValueError(
                f"{self.saved.state_path} is not a backup state kwiden wrote (it holds the growths done and the "
                "schedule); delete it, or give another backup_dir."
            )
        if state["schedule"] != self.schedule_text:
            raise ValueError(
                f"The backup in {self.folder} was made under another growth schedule "
                f"({state['schedule']['growths']}, now {self.schedule!r}): pass the same "
                "schedule to resume, or another backup_dir to start afresh."
            )
        config = compile_arguments(live)
        if config is None:
            try:
                model = self.saved.load(state, loaded=keras.saving.load_model)
            except TypeError as error:  # Keras' "Could not locate function 'my_loss'"
                raise ValueError(
                    f"The backup {self.folder / state['model']} cannot be compiled as saved "
                    f"({str(error).split('. ')[0]}): pass fit_growing the model compiled with its loss and metrics, "
                    "and it resumes with those."
                ) from None
        else:
            config.pop("optimizer")
            model = self.saved.load(state, **config)
        return model, state["growths_done"], state.get("batches")


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
