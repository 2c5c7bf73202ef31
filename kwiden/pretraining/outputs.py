"""What a pretraining run leaves in its folder besides backups: `run.json`
(its arguments, checked when the command is run again), `log.txt`,
`metrics.jsonl`, `loss.png` and `final/`."""

import json
import os
import pathlib
import shutil
import warnings

from kwiden.checkpoints import save_checkpoint
from kwiden.files import TEMPORARY, replaced_atomically

RUN_FILE = "run.json"
LOG_FILE = "log.txt"
METRICS_FILE = "metrics.jsonl"
PLOT_FILE = "loss.png"
FINAL = "final"
# What a run refused before training may have written besides its record (`RunFolder.release` removes them),
# and what may stay in the folder for the corrected call: those, and the token file.
RELEASED = (LOG_FILE, METRICS_FILE, "vocab.txt")
LEFT_BY_A_REFUSED_RUN = ("tokens", *RELEASED)
# The fields every metrics line has.
METRICS = ("update", "tokens", "flops", "hidden_size", "num_layers", "lr", "train_loss", "valid_loss", "seconds")


class RunFolder:
    def __init__(self, folder, verbose=True):
        self.folder = pathlib.Path(folder)
        if self.folder.exists() and not self.folder.is_dir():
            raise ValueError(f"--output-dir {self.folder} is a file; give a folder (it is made if missing).")
        self.verbose = verbose

    def claim(self, arguments, defaults=None, free=()):
        """Record the run's `arguments`; a folder holding a run with other
        arguments is refused, naming the first that differs. An argument its
        record lacks (a kwiden before it had one) counts at its value in
        `defaults`: what that kwiden did. The arguments named in `free` change
        nothing the run computes: they may differ, and the record takes the new ones."""
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / RUN_FILE
        if path.is_file():
            try:
                record = json.loads(path.read_text("utf-8"))
                before = record["arguments"]
            except (ValueError, KeyError, TypeError):
                raise ValueError(f"{path} is not a run record kwiden wrote; give another --output-dir.") from None
            before = {**{n: v for n, v in (defaults or {}).items() if n in arguments}, **before}
            for name in sorted((set(before) | set(arguments)) - set(free)):
                if before.get(name) != arguments.get(name):
                    flag = "--" + name.replace("_", "-")
                    raise ValueError(
                        f"--output-dir {self.folder} holds a run made with {flag} {before.get(name)!r}, not "
                        f"{arguments.get(name)!r}: run the same command to resume it, or give another --output-dir."
                    )
            if any(before.get(name) != arguments.get(name) for name in free):
                self._write_record({**record, "arguments": arguments})
            return True
        if any(p.name not in LEFT_BY_A_REFUSED_RUN for p in self.folder.iterdir()):
            raise ValueError(
                f"--output-dir {self.folder} already holds files that are not a kwiden pretraining run; "
                "give an empty or new folder."
            )
        self._write_record(dict(arguments=arguments))
        return False

    def _write_record(self, record):
        with replaced_atomically(self.folder / RUN_FILE) as temporary:
            temporary.write_text(json.dumps(record, indent=1, ensure_ascii=False), "utf-8")

    def check_tokens(self, token_file):
        """Refuse a resumed run whose corpus no longer gives the tokens it began with (a file added,
        removed or edited); the first call records them."""
        record = json.loads((self.folder / RUN_FILE).read_text("utf-8"))
        began = record.get("tokens")
        now = dict(count=len(token_file), digest=token_file.digest)
        if began is None:
            self._write_record({**record, "tokens": now})
        elif began != now:
            raise ValueError(
                f"--output-dir {self.folder} holds a run that began on other text: its corpus gave "
                f"{began['count']:,} tokens then and gives {now['count']:,} {'other ' * (began['count'] == now['count'])}"
                "tokens now (a file added, removed or edited). Resume it on the files it began with, or give "
                "another --output-dir for a new run."
            )

    def release(self):
        """Undo `claim` for a run refused before it trained: its record, log and built vocabulary
        (the token file stays, keyed by what it was made from)."""
        for name in (RUN_FILE, *RELEASED):
            (self.folder / name).unlink(missing_ok=True)

    def log(self, line):
        if self.verbose:
            print(line, flush=True)
        with open(self.folder / LOG_FILE, "a", encoding="utf-8") as file:
            file.write(line + "\n")

    def metrics(self, until=None, regrow=False):
        """The metrics lines written so far, those after update `until` dropped (and the file rewritten so);
        `regrow`: also the growth's lines at `until`, which a run resumed before that growth writes again."""
        path = self.folder / METRICS_FILE
        if not path.is_file():
            return []
        rows = [json.loads(line) for line in path.read_text("utf-8").splitlines() if line.strip()]
        if until is not None:
            kept = [
                row
                for row in rows
                if row["update"] < until or (row["update"] == until and not (regrow and row.get("grew")))
            ]
            if len(kept) != len(rows):
                with replaced_atomically(path) as temporary:
                    temporary.write_text("".join(json.dumps(row) + "\n" for row in kept), "utf-8")
            rows = kept
        return rows

    def add_metrics(self, row):
        with open(self.folder / METRICS_FILE, "a", encoding="utf-8") as file:
            file.write(json.dumps(row) + "\n")
            file.flush()

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
        with replaced_atomically(self.folder / PLOT_FILE) as temporary:
            figure.savefig(temporary, dpi=110)
        plt.close(figure)

    def write_final(self, model, tokenizer):
        """`final/`: a Hugging Face folder with the tokenizer, made beside it
        and moved into place whole, so a kill never leaves half of one."""
        final = self.folder / FINAL
        staging = self.folder / f"{FINAL}{TEMPORARY}"
        shutil.rmtree(staging, ignore_errors=True)
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.filterwarnings("always", category=UserWarning)
                save_checkpoint(model, staging)
            tokenizer.save(staging)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        for warning in caught:  # what a Hugging Face user of final/ should know: in the log, not on the bar
            if issubclass(warning.category, UserWarning):
                self.log(f"final/: {warning.message}")
        previous = self.folder / f"{FINAL}{TEMPORARY}old"
        if final.exists():
            shutil.rmtree(previous, ignore_errors=True)
            os.replace(final, previous)
        os.replace(staging, final)
        shutil.rmtree(previous, ignore_errors=True)
        return final
