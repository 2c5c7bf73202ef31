"""A pretraining run's folder: `run.json` (its arguments, checked when the
command is run again, and what it has written), `log.txt`, `metrics.jsonl`,
`loss.png`, `final/`, and the trainer's `backup/`, held by one call at a time."""

import json
import os
import pathlib
import shutil
import warnings

from kwiden.arguments import is_count
from kwiden.checkpoints import save_checkpoint
from kwiden.checkpoints.generation_config import GENERATION_CONFIG, trained_max_length, write_trained_max_length
from kwiden.files import (
    TEMPORARY,
    FolderLock,
    append_text,
    remove_stale,
    replaced_atomically,
    sweep,
    temporary_beside,
)  # fmt: skip
from kwiden.messages import warn

RUN_FILE = "run.json"
LOG_FILE = "log.txt"
METRICS_FILE = "metrics.jsonl"
PLOT_FILE = "loss.png"
FINAL = "final"
VOCABULARY = "vocab.txt"
TOKENS = "tokens"
BACKUP = "backup"
# Everything a run may write besides run.json. run.json's `written` lists those it has begun to write, recorded
# before the first byte: kwiden removes nothing else, and of those only what a call that never trained wrote.
OWN = (LOG_FILE, METRICS_FILE, PLOT_FILE, FINAL, VOCABULARY, TOKENS, BACKUP)
# What a call that never trained leaves for the next: the token file, keyed by what it was made from.
KEPT = (TOKENS,)
# run.json's states: arguments recorded and nothing trained yet (a call that stops here, refused or killed, leaves
# the folder to the next call, whatever its arguments); refused (nothing but `KEPT` left); training (only the
# same call resumes it). A record without a state is an older kwiden's: training.
CLAIMED, REFUSED, TRAINING = "claimed", "refused", "training"
# The fields every metrics line has.
METRICS = ("update", "tokens", "flops", "hidden_size", "num_layers", "lr", "train_loss", "valid_loss", "seconds")


class RunFolder:
    """A pretraining run's folder, held by one call at a time (a `flock` on
    the folder, which the kernel drops when the process dies), with a record
    of the run (`run.json`): its arguments, what it computes on, what it has
    written, and whether it has trained."""

    def __init__(self, folder, verbose=True):
        self.folder = pathlib.Path(folder)
        if self.folder.exists() and not self.folder.is_dir():
            raise ValueError(f"--output-dir {self.folder} is a file; give a folder (it is made if missing).")
        if self.folder.is_symlink() and not self.folder.exists():
            raise ValueError(f"--output-dir {self.folder} is a link to nothing; give a folder (it is made if missing).")
        self.verbose = verbose
        self.record = None
        self.lock = FolderLock(self.folder)

    def claim(self, arguments, removed=None, free=(), computed_on=None, defaulted=(), untaken=None):
        """Hold the folder and record the run's `arguments`. Refused: a folder another process
        holds, one with files kwiden did not write, and one holding a run with
        other arguments (the first that differs is named) or computed on another
        backend or precision (`computed_on`). An argument the record holds that
        kwiden no longer takes (`removed`) must hold the value at which it
        changed nothing; one this run does not take (`untaken`: another
        objective's option, which an earlier kwiden recorded in every run) its
        default. The arguments named in `free` change nothing the run
        computes: they may differ, and the record takes the new ones. Those
        named in `defaulted` the call took by default: a resume keeps the
        record's (a default changed since must not make the run another).
        Returns the arguments the run goes on with."""
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise ValueError(
                f"--output-dir {self.folder} cannot be made ({error.strerror}); give a folder that can."
            ) from None
        self._hold()
        try:
            remove_stale(self.folder / RUN_FILE)  # a first claim killed while writing its record
            record = self._read_record()
            if record is not None:  # the folder is kwiden's, and held: no live writer is in here
                sweep(self.folder, f"*{TEMPORARY}*", f"in {self.folder}")
            if record is not None and record.get("state", TRAINING) == TRAINING:
                began = record["arguments"]
                arguments = {**arguments, **{name: began[name] for name in defaulted if name in began}}
                arguments = self._same_run(record, arguments, removed or {}, free, computed_on, untaken or {})
                self._write_record({
                    **record, "arguments": arguments, "computed_on": record.get("computed_on") or computed_on,
                    "written": record.get("written", list(OWN)), "process": os.getpid(),
                })  # fmt: skip
                return arguments
            written = self._take_over(record)
            self._write_record(dict(arguments=arguments, state=CLAIMED, computed_on=computed_on, written=written,
                                    process=os.getpid()))  # fmt: skip
            return arguments
        except BaseException:
            self.unlock()
            raise

    def _hold(self):
        self.lock.hold(
            lambda: (
                f"--output-dir {self.folder} is in use by {self._holder()} (a kwiden run holds it): wait for it "
                "to end, or give another --output-dir."
            ),
            f"--output-dir {self.folder} is on a file system without locks: kwiden cannot refuse a second run "
            "started on it meanwhile, and two at once would mix their files. Start one at a time.",
        )

    def _holder(self):
        """The process the record names as the last to claim the folder."""
        try:
            return f"process {json.loads((self.folder / RUN_FILE).read_text('utf-8'))['process']}"
        except (OSError, ValueError, KeyError, TypeError):
            return "another process"

    def _read_record(self):
        path = self.folder / RUN_FILE
        if not (path.exists() or path.is_symlink()):
            return None
        try:
            record = None if path.is_symlink() else json.loads(path.read_text("utf-8"))
        except (OSError, ValueError):
            record = None
        if not _is_record(record):
            raise ValueError(f"{path} is not a run record kwiden wrote; give another --output-dir.")
        return record

    def _same_run(self, record, arguments, removed, free, computed_on, untaken):
        """The arguments to record for a resume of `record`'s run, refused where they are another run's."""
        before = dict(record["arguments"])
        for name, default in untaken.items():
            if name in before and name not in arguments and before.pop(name) != default:
                raise ValueError(
                    f"--output-dir {self.folder} holds a run made with --{name.replace('_', '-')} "
                    f"{record['arguments'][name]!r}, an option this run's objective does not take: run the same "
                    "command to resume it, or give another --output-dir."
                )
        for name, inert in removed.items():
            if name in before and before.pop(name) != inert:
                raise ValueError(
                    f"--output-dir {self.folder} holds a run made with --{name.replace('_', '-')} "
                    f"{record['arguments'][name]!r}, an option measured not to pay and taken out of kwiden: finish "
                    "it with the kwiden version that began it, or give another --output-dir."
                )
        for name in sorted((set(before) | set(arguments)) - set(free)):
            if before.get(name) != arguments.get(name):
                flag = "--" + name.replace("_", "-")
                raise ValueError(
                    f"--output-dir {self.folder} holds a run made with {flag} {before.get(name)!r}, not "
                    f"{arguments.get(name)!r}: run the same command to resume it, or give another --output-dir."
                )
        began = record.get("computed_on")
        began = {**(computed_on or {}), **(began if isinstance(began, dict) else {})}
        if computed_on and began != computed_on:
            raise ValueError(
                f"--output-dir {self.folder} holds a run begun on the {began['backend']} backend in "
                f"{began['precision']}; resumed on {computed_on['backend']} in {computed_on['precision']} it would "
                f"not end on the weights the run would have reached. Resume it with KERAS_BACKEND={began['backend']} "
                f"(and --precision {began['precision']}), or give another --output-dir."
            )
        return arguments

    def _take_over(self, record):
        """What stays written when this call takes the folder: a call that never trained leaves its token
        file (its other files are removed); an empty folder holds nothing; any other is refused."""
        if record is None:
            found = sorted(p.name for p in self.folder.iterdir())
            if found:
                raise ValueError(
                    f"--output-dir {self.folder} holds files kwiden did not write ({', '.join(found[:8])}"
                    f"{' …' * (len(found) > 8)}); kwiden writes a run into an empty or new folder and never touches "
                    "what it did not write: give another --output-dir, or move those files away."
                )
            return []
        written = record.get("written", [])
        strangers = sorted(p.name for p in self.folder.iterdir() if p.name not in (RUN_FILE, *written))
        if strangers:
            raise ValueError(
                f"--output-dir {self.folder} holds {', '.join(strangers[:8])}{' …' * (len(strangers) > 8)}, which "
                "kwiden did not write there (the folder was given up by a call that did not train): move them "
                "away, or give another --output-dir."
            )
        self._remove(name for name in written if name not in KEPT)
        return [name for name in written if name in KEPT and _present(self.folder / name)]

    def _remove(self, names):
        for name in names:
            path = self.folder / name
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink(missing_ok=True)

    def _write_record(self, record):
        self.record = record
        with replaced_atomically(self.folder / RUN_FILE) as temporary:
            temporary.write_text(json.dumps(record, indent=1, ensure_ascii=False), "utf-8")

    def _update_record(self, **changes):
        self._write_record({**self.record, **changes})

    @property
    def trained(self):
        return self.record is not None and self.record.get("state", TRAINING) == TRAINING

    def starts_training(self):
        """From here the folder is the run's: a failure keeps every file, and only the same call resumes it."""
        if not self.trained:
            self._update_record(state=TRAINING)

    def will_write(self, name):
        """Record that the run writes `name` (one of `OWN`) before it does; a
        file of that name kwiden did not write is refused, never overwritten."""
        if name in self.record["written"]:
            return self.folder / name
        if _present(self.folder / name):
            raise ValueError(
                f"--output-dir {self.folder} holds {name}, which kwiden did not write there: move it away "
                "(the run writes its own), then run the same command again."
            )
        self._update_record(written=[*self.record["written"], name])
        return self.folder / name

    def check_tokens(self, token_file):
        """Refuse a resumed run whose corpus no longer gives the tokens it began with (a file added,
        removed or edited); the first call records them."""
        began = self.record.get("tokens")
        now = dict(count=len(token_file), digest=token_file.digest)
        if began is None:
            self._update_record(tokens=now)
        elif began != now:
            raise ValueError(
                f"--output-dir {self.folder} holds a run that began on other text: its corpus gave "
                f"{began['count']:,} tokens then and gives {now['count']:,} {'other ' * (began['count'] == now['count'])}"
                "tokens now (a file added, removed or edited). Resume it on the files it began with, or give "
                "another --output-dir for a new run."
            )

    def record_value(self, name, value=None):
        """What run.json keeps under `name`; with `value`, record it."""
        if value is not None:
            self._update_record(**{name: value})
        return self.record.get(name)

    def release(self):
        """For a call refused before it trained: remove what it recorded writing but the token file, and leave
        the folder to the next call, whatever its arguments. A run that trained keeps everything."""
        if self.record is None or self.trained:
            return
        try:
            self._remove(name for name in self.record["written"] if name not in KEPT)
            kept = [name for name in self.record["written"] if name in KEPT and _present(self.folder / name)]
            self._write_record(dict(state=REFUSED, written=kept))
        except OSError as error:  # the refusal is what the user must see; the next call takes the folder anyway
            warn(f"--output-dir {self.folder}: could not give the folder up after the refusal ({error}).")

    def unlock(self):
        self.lock.release()

    def log(self, line):
        if self.verbose:
            print(line, flush=True)
        append_text(self.will_write(LOG_FILE), line + "\n", "The log")

    def metrics(self, until=None, regrow=False):
        """The metrics lines written so far, those after update `until` dropped (and the file rewritten so);
        `regrow`: also the growth's lines at `until`, which a run resumed before that growth writes again.
        A torn last line (a disk filled while it was appended) is dropped with a warning: the run writes it
        again from its backup; any other line that is not a metrics row is refused, naming it."""
        path = self.folder / METRICS_FILE
        if not path.is_file():
            return []
        text = path.read_text("utf-8", errors="replace")
        lines = text.splitlines()
        rows, torn = [], False
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError:
                row = None
            if not (isinstance(row, dict) and set(METRICS) <= set(row) and is_count(row["update"])):
                if number == len(lines) and not text.endswith("\n"):
                    warn(f"{path}: its last line was cut short (written when the run stopped); dropped, and "
                         "written again from the backup.")  # fmt: skip
                    torn = True
                    continue
                raise ValueError(
                    f"{path}, line {number}: not a metrics row kwiden wrote ({line[:60]!r}); restore the file, "
                    "or delete the line (the run goes on without it)."
                ) from None
            rows.append(row)
        kept = rows
        if until is not None:
            kept = [
                row
                for row in rows
                if row["update"] < until or (row["update"] == until and not (regrow and row.get("grew")))
            ]
        if torn or len(kept) != len(rows) or not text.endswith("\n"):  # a row the next one must not join
            with replaced_atomically(path) as temporary:
                temporary.write_text("".join(json.dumps(row) + "\n" for row in kept), "utf-8")
        return kept

    def add_metrics(self, row):
        append_text(self.will_write(METRICS_FILE), json.dumps(row) + "\n", "The metrics file")

    def plot(self, rows, title):
        """Validation loss against FLOPs, each growth marked."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        figure, axes = plt.subplots(figsize=(7, 4.5))
        axes.plot([r["flops"] for r in rows], [r["valid_loss"] for r in rows], marker=".")
        for row in rows:
            if row.get("grew"):
                axes.axvline(row["flops"], color="grey", linestyle=":")
                axes.annotate(f"{row['hidden_size']}×{row['num_layers']}", (row["flops"], row["valid_loss"]),
                              fontsize=7, xytext=(3, 6), textcoords="offset points")  # fmt: skip
        axes.set(xlabel="training FLOPs", ylabel="validation loss", title=title)
        axes.title.set_fontsize(8)
        with replaced_atomically(self.will_write(PLOT_FILE)) as temporary:
            figure.savefig(temporary, dpi=110)
        plt.close(figure)

    def write_final(self, model, tokenizer, trained_length=None):
        """`final/`: a Hugging Face folder with the tokenizer (and the
        `trained_length` its positions were trained on, where known), made in a
        temporary folder beside it (a random name, made exclusively) and
        moved into place whole, so a kill never leaves half of one."""
        final = self.will_write(FINAL)
        with temporary_beside(final, folder=True) as staging:
            with warnings.catch_warnings(record=True) as caught:
                warnings.filterwarnings("always", category=UserWarning)
                save_checkpoint(model, staging, copy_from=None)  # the run's own tokenizer, written next
            tokenizer.save(staging)
            if trained_length is not None:  # where kwiden generate, and transformers' generate by default, stop
                write_trained_max_length(staging, trained_length)
            for warning in caught:  # what a Hugging Face user of final/ should know: in the log, not on the bar
                if issubclass(warning.category, UserWarning):
                    self.log(f"final/: {warning.message}")
            if final.is_symlink() or (final.exists() and not final.is_dir()):
                raise ValueError(f"{final} is a link or a file, which kwiden did not write: remove it, then run "
                                 "the same command again to write final/.")  # fmt: skip
            if not final.exists():
                os.replace(staging, final)
                return final
            with temporary_beside(final, folder=True) as previous:  # the old final/, removed once replaced
                os.replace(final, previous)
                os.replace(staging, final)
        return final


def _is_record(record):
    """Whether `record` is a run.json kwiden wrote (any version)."""
    if not isinstance(record, dict) or record.get("state") not in (None, CLAIMED, REFUSED, TRAINING):
        return False
    written = record.get("written", [])
    if not isinstance(written, list) or not all(isinstance(name, str) and name in OWN for name in written):
        return False
    computed_on, tokens = record.get("computed_on"), record.get("tokens")
    if computed_on is not None and not (isinstance(computed_on, dict) and set(computed_on) == {"backend", "precision"}):
        return False
    if tokens is not None and not (isinstance(tokens, dict) and set(tokens) == {"count", "digest"}):
        return False
    if not isinstance(record.get("vocabulary", ""), str) or not isinstance(record.get("backed_up", False), bool):
        return False
    return record.get("state") == REFUSED or isinstance(record.get("arguments"), dict)


def trained_length(seq_len, from_checkpoint=None):
    """The tokens a run's final model has been trained on: `--seq-len`, or
    the length a `--from` folder records, if longer. None where the `--from`
    folder records none: its positions were trained by a run kwiden cannot see."""
    if from_checkpoint is None:
        return seq_len
    recorded, _ = trained_max_length(from_checkpoint)
    return None if recorded is None else max(recorded, seq_len)


def untrained_positions(model, seq_len, length):
    """The log's line where `model`'s position table holds more positions than the run trains (`length`)."""
    tables = [layer.input_dim for layer in model.layers if getattr(layer, "mode", None) == "position"]
    if length is None or not tables or tables[0] <= length:
        return []
    by = f"--seq-len {seq_len}" if length == seq_len else f"--seq-len {seq_len} and the --from run"
    return [
        f"the model holds {tables[0]} positions and {by} trains positions 0 to {length - 1} only: {length} to "
        f"{tables[0] - 1} stay untrained. final/{GENERATION_CONFIG} records max_length {length}, where kwiden "
        "generate stops (and transformers' generate by default)"
    ]


def _present(path):
    return path.exists() or path.is_symlink()
