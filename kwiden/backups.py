"""`fit_growing`'s backups: the model saved with its optimizer, how many
growths it has had and how many batches it has trained on, in a folder held by
one run at a time; and `load_with_optimizer`, which both training loops
resume with."""

import contextlib
import json
import pathlib

import keras

from kwiden.files import HELD, LOCKED, TEMPORARY, FolderLock, replaced_atomically, sweep
from kwiden.keras_internals import compile_arguments, saved_optimizer_config
from kwiden.messages import warn

STATE_FILE = "kwiden-growing.json"
# The name of every model a backup writes: `fit_growing` deletes only files it wrote.
BACKUP_PREFIX = "kwiden-backup-"


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
        # Growth arguments may be Fractions or arrays: compared by their text.
        self.schedule_text = json.loads(json.dumps(schedule.get_config(), default=repr))

    @contextlib.contextmanager
    def held(self):
        """The folder held for this call alone (a `flock`, dropped by the
        kernel if the process dies): two runs backing up into one folder
        would delete each other's saves."""
        self.folder.mkdir(parents=True, exist_ok=True)
        lock = FolderLock(self.folder)
        taken = lock.acquire()
        if taken == HELD:
            raise ValueError(
                f"`backup_dir` {self.folder} is in use by another process backing up there: wait for it to end, "
                "or give another backup_dir."
            )
        if taken != LOCKED:
            warn(f"`backup_dir` {self.folder} is on a file system without locks: start one run on it at a time.")
        try:
            yield
        finally:
            lock.release()

    def exists(self):
        return (self.folder / STATE_FILE).exists()

    def save(self, model, growths_done, consumed):
        self.folder.mkdir(parents=True, exist_ok=True)
        previous = self._state()["model"] if self.exists() else None
        # A save a kill interrupted left a temporary named after its own file, which no later save may share.
        sweep(self.folder, f".{BACKUP_PREFIX}*{TEMPORARY}*.keras")
        name = f"{BACKUP_PREFIX}{consumed}-{growths_done}.keras"
        with replaced_atomically(self.folder / name) as temporary:
            model.save(temporary)
        state = {"model": name, "growths_done": growths_done, "batches": consumed, "schedule": self.schedule_text,
                 "backend": keras.backend.backend()}  # fmt: skip
        with replaced_atomically(self.folder / STATE_FILE) as temporary:
            temporary.write_text(json.dumps(state, indent=1))
        # The save the state named before, and any a kill left between writing the state and this line.
        stale = {previous} | {old.name for old in self.folder.glob(f"{BACKUP_PREFIX}*.keras")}
        for old in stale - {None, name}:
            (self.folder / old).unlink(missing_ok=True)

    def _state(self):
        path = self.folder / STATE_FILE
        try:
            state = json.loads(path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            raise ValueError(
                f"{path} is not a backup state kwiden can read ({error}): it was changed or damaged. Delete it "
                "to start afresh (its model files stay), or give another backup_dir."
            ) from None
        if (
            not isinstance(state, dict)
            or not {"model", "growths_done", "schedule"} <= set(state)
            or not isinstance(state["model"], str)
            or pathlib.Path(state["model"]).name != state["model"]
            or not state["model"].endswith(".keras")
        ):
            raise ValueError(
                f"{path} is not a backup state kwiden wrote (it names a .keras file in its folder); delete it, or "
                "give another backup_dir."
            )
        return state

    def load(self, live):
        """`(model, growths done, batches trained on or None)`: the saved
        model, compiled as `live` is (its loss, metrics, settings) with the
        saved optimizer and state; not compiled by Keras' loader, which
        cannot find a loss function that is not registered. An uncompiled
        `live` takes the saved compile."""
        state = self._state()
        if state["schedule"] != self.schedule_text:
            raise ValueError(
                f"The backup in {self.folder} was made under another growth schedule "
                f"({state['schedule']['growths']}, now {self.schedule!r}): pass the same "
                "schedule to resume, or another backup_dir to start afresh."
            )
        began = state.get("backend", keras.backend.backend())  # an older kwiden's state does not say
        if began != keras.backend.backend():
            raise ValueError(
                f"The backup in {self.folder} was made on the {began} backend; resumed on "
                f"{keras.backend.backend()} it would not end on the weights the run would have reached: resume "
                f"with KERAS_BACKEND={began}, or give another backup_dir to start afresh."
            )
        path = self.folder / state["model"]
        config = compile_arguments(live)
        if config is None:
            try:
                return keras.saving.load_model(path), state["growths_done"], state.get("batches")
            except TypeError as error:  # Keras' "Could not locate function 'my_loss'"
                raise ValueError(
                    f"The backup {path} cannot be compiled as saved ({str(error).split('. ')[0]}): pass fit_growing "
                    "the model compiled with its loss and metrics, and it resumes with those."
                ) from None
        config.pop("optimizer")
        return load_with_optimizer(path, **config), state["growths_done"], state.get("batches")


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
