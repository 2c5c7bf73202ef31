"""Kill tests: processes killed with SIGKILL at the worst moments, and what
the next run finds. Each scenario runs kwiden in a child process that kills
itself (a real SIGKILL: no `finally`, no atexit) at a chosen point, then
checks the files left and runs the same thing again.

    python benchmarks/kill_tests.py          # about two minutes on 2 cores

Prints one row per scenario: what was left after the kill, and what the next
run did with it. A row that says FAIL is a guarantee broken.
"""

import json
import pathlib
import subprocess
import sys
import tempfile
import textwrap

import common  # noqa: F401  (this checkout's kwiden first on sys.path)

CHECKOUT = common.CHECKOUT

PRELUDE = f"""
import sys; sys.path.insert(0, {str(CHECKOUT)!r})
import json, os, pathlib, signal
import numpy as np, keras, kwiden
from kwiden.training import backups, loop
from kwiden.testing import padded_batch, randomize_weights, tiny_config

def kill():
    os.kill(os.getpid(), signal.SIGKILL)

def token_loss(y, p):  # not registered with Keras: the resume must not need it to be
    return keras.losses.sparse_categorical_crossentropy(y, p, from_logits=True)

def model(seed=0):
    gpt = kwiden.build_transformer_model(tiny_config(), model="gpt")
    randomize_weights(gpt, seed)
    gpt.compile(kwiden.optimizers.AdamW(3e-3), token_loss)
    return gpt

BATCHES = [(i[:, :-1], i[:, 1:]) for i in (padded_batch(lengths=(9,) * 4, seed=s, segments=False) for s in range(12))]
SCHEDULE = {{3: dict(k=2), 6: dict(depth=2)}}
"""


def child(code, cwd, refused=False):
    """Run `code` after the prelude: `(return code, stdout, stderr)`, the code -9
    where it killed itself (1 is accepted where a refusal is expected)."""
    result = subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(code)], cwd=cwd, capture_output=True)
    if result.returncode not in (0, -9, *((1,) if refused else ())):
        raise RuntimeError(result.stderr.decode()[-3000:])
    return result.returncode, result.stdout.decode(), result.stderr.decode()


def temporaries(folder):
    return sorted(p.name for p in pathlib.Path(folder).iterdir() if ".kwiden-tmp-" in p.name)


def grow_folder_killed(root):
    """`kwiden grow SRC DST` on a folder, killed halfway through writing its shards."""
    child(
        """
        llama = kwiden.build_transformer_model(dict(vocab_size=4000, hidden_size=128, num_hidden_layers=4,
            num_attention_heads=4, intermediate_size=256, mask_padding=False), model="llama")
        kwiden.save_checkpoint(randomize_weights(llama, 0), "src")
        from kwiden.growth import streaming as checkpoint
        real = checkpoint._grown_tensor
        count = [0]
        def grown_then_killed(*args):
            count[0] += 1
            if count[0] == 20:
                kill()
            return real(*args)
        checkpoint._grown_tensor = grown_then_killed
        kwiden.grow_checkpoint("src", "dst", k=2, max_shard_size="1MB")
        """,
        root,
    )
    left = temporaries(root)
    size = sum(f.stat().st_size for name in left for f in (root / name).rglob("*") if f.is_file())
    dst_absent = not (root / "dst").exists()
    code, _, err = child("from kwiden.cli import main; sys.exit(main(['grow', 'src', 'dst', '--factor', '2']))", root)
    loads, _, _ = child("kwiden.build_transformer_model(checkpoint_path='dst')", root)
    ok = dst_absent and len(left) == 1 and "Removed 1 temporary" in err and not temporaries(root) and code == loads == 0
    return (
        f"DST absent: {dst_absent}; {len(left)} temporary ({size / 2**20:.1f} MiB)",
        "removed it (warned); DST grown, loads",
        ok,
    )


def fit_growing_killed(root, where):
    """`fit_growing` with a backup, killed `where`: between growths (at update 5), just
    after a growth (before its backup), or inside a backup's save; then resumed."""
    hooks = {
        "between growths": """
            class KillAt(keras.callbacks.Callback):
                def on_train_batch_end(self, batch, logs=None):
                    if int(self.model.optimizer.iterations) == 5:
                        kill()
            callbacks = [KillAt()]
        """,
        "at a growth": """
            real = loop.grow_and_compile
            growths = [0]
            def grown_then_killed(*args):
                big = real(*args)
                growths[0] += 1
                if growths[0] == 2:  # the second growth (depth), killed before its backup is saved
                    kill()
                return big
            loop.grow_and_compile = grown_then_killed
            callbacks = []
        """,
        "inside a backup's save": """
            real = backups.RunBackup.save
            saves = [0]
            def save_then_killed(self, model, *args):
                saves[0] += 1
                if saves[0] == 3:  # just after the first growth: killed halfway through writing the .keras file
                    real_save = model.save
                    model.save = lambda path, **kw: (open(path, "wb").write(b"half"), kill())
                return real(self, model, *args)
            backups.RunBackup.save = save_then_killed
            callbacks = []
        """,
    }
    run = 'kwiden.fit_growing(model(), BATCHES, SCHEDULE, steps=9, verbose=0, callbacks=callbacks, backup_dir="run")'
    child(textwrap.dedent(hooks[where]) + run, root)
    state = json.loads((root / "run" / "kwiden-growing.json").read_text())
    left = temporaries(root / "run")
    code, out, _ = child(
        """
        straight, _ = kwiden.fit_growing(model(), BATCHES, SCHEDULE, steps=9, verbose=0)
        resumed, _ = kwiden.fit_growing(model(seed=5), BATCHES, SCHEDULE, steps=9, verbose=0, backup_dir="run")
        print(max(float(np.max(np.abs(a - b))) for a, b in zip(straight.get_weights(), resumed.get_weights())))
        """,
        root,
    )
    difference = float(out.strip().splitlines()[-1]) if code == 0 else float("nan")
    files = sorted(p.name for p in (root / "run").iterdir())
    ok = code == 0 and difference <= 1e-6 and not temporaries(root / "run") and len(files) == 2
    return (
        f"backup at batch {state['batches']}, {state['growths_done']} growth(s); {len(left)} temporary",
        f"resumed, |straight - resumed| <= {difference:.0e}; {len(files)} files left",
        ok,
    )


def save_checkpoint_killed(root, where):
    """`save_checkpoint` into a folder holding an earlier checkpoint, killed while writing
    its temporary folder, or between the renames that move its files in."""
    hook = {
        "while writing": "kwiden.checkpoints.SafetensorsWriter.write = lambda *a: kill()",
        "between renames": """
            real = os.replace
            def replace(a, b):
                real(a, b)
                if str(b).endswith("config.json"):
                    kill()
            os.replace = replace
        """,
    }[where]
    bert = "bert = lambda seed: randomize_weights(kwiden.build_transformer_model(tiny_config()), seed)\n"
    child(
        bert
        + 'kwiden.save_checkpoint(bert(0), "out")\n'
        + textwrap.dedent(hook)
        + '\nkwiden.save_checkpoint(bert(1), "out")',
        root,
    )
    left = temporaries(root)
    code, _, err = child("kwiden.build_transformer_model(checkpoint_path='out')", root, refused=True)
    loads = (
        "the old checkpoint loads" if code == 0 else "loading refuses it (" + err.strip().splitlines()[-1][12:60] + "…)"
    )
    redo, _, _ = child(
        """
        kwiden.save_checkpoint(randomize_weights(kwiden.build_transformer_model(tiny_config()), 1), "out")
        kwiden.build_transformer_model(checkpoint_path="out")
        """,
        root,
    )
    expected_code = 0 if where == "while writing" else 1
    ok = code == expected_code and redo == 0 and not temporaries(root)
    return f"{len(left)} temporary; {loads}", "removed it; saved, loads", ok


PRETRAIN = """
from kwiden.text import corpus
from kwiden.pretraining import outputs
from kwiden.text import tokens
pathlib.Path("corpus.txt").write_text(corpus.load_text()[:40000], encoding="utf-8")
CONFIG = dict(hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
              max_position_embeddings=32, layer_norm_eps=1e-3)
def pretrain(folder="run", **changes):
    arguments = dict(model="gpt", config=CONFIG, seq_len=16, batch_size=4, budget=12, lr=3e-3, save_every=4, verbose=0)
    return kwiden.pretrain("corpus.txt", folder, **{**arguments, **changes})
def kill_at_update(n):  # at the end of the compiled call that trains update n
    from kwiden.pretraining import trainer
    real = trainer.Trainer._after_call
    def watched(self, first, trained, *args):
        if trained >= n:
            kill()
        return real(self, first, trained, *args)
    trainer.Trainer._after_call = watched
"""
# The next call after a kill: the uninterrupted run beside it, then the call; prints the weights' largest
# difference and whether the metrics rows (but their seconds) are the same.
COMPARED = """
whole = pretrain("whole")
again = pretrain({changes})
print(max(float(np.max(np.abs(a - b))) for a, b in zip(whole.model.weights, again.model.weights)))
print([{{k: v for k, v in r.items() if k != "seconds"}} for r in whole.metrics] ==
      [{{k: v for k, v in r.items() if k != "seconds"}} for r in again.metrics])
"""
# A first call that holds the folder, training forever.
HOLDER = """
import time
from kwiden.training import loop
def slow(*args, **kwargs):
    print("training", flush=True)
    time.sleep(3600)
loop.run_stretch = slow
pretrain()
"""


def pretrain_killed(root, where):
    """`kwiden pretrain` killed before it trains (while tokenizing), mid-training, or while
    writing final/; then the next call: a corrected one (another --lr) where nothing trained,
    else the same command, whose weights and metrics must be the uninterrupted run's."""
    hook = {
        "while tokenizing": """
            real = tokens._encoded
            def encoded_then_killed(*args):
                real(*args)
                kill()
            tokens._encoded = encoded_then_killed
        """,
        "mid-training": "kill_at_update(7)",
        "while writing final/": "outputs.save_checkpoint = lambda model, folder, **arguments: kill()",
    }[where]
    child(PRETRAIN + textwrap.dedent(hook) + "\npretrain()", root)
    state = json.loads((root / "run" / "run.json").read_text())
    left = temporaries(root / "run")
    corrected = where == "while tokenizing"
    code, out, err = child(PRETRAIN + COMPARED.format(changes="lr=1e-3" if corrected else ""), root, refused=True)
    lines = out.strip().splitlines()
    difference, same_rows = (float(lines[-2]), lines[-1] == "True") if code == 0 else (float("nan"), False)
    ok = code == 0 and not temporaries(root / "run") and (corrected or (difference == 0 and same_rows))
    after = f"run.json {state.get('state')}; {len(left)} temporary"
    if code != 0:
        next_run = err.strip().splitlines()[-1]
    elif corrected:
        next_run = "the corrected call (--lr 1e-3) took the folder and trained"
    else:
        next_run = f"resumed, |whole - resumed| = {difference:g}, rows {'equal' if same_rows else 'DIFFER'}"
    return after, next_run, ok


def pretrain_twice_at_once(root):
    """Two `kwiden pretrain` calls on one folder: the second is refused at once, naming the
    first's process; once the first is killed, the same command resumes it."""
    first = subprocess.Popen([sys.executable, "-c", PRELUDE + PRETRAIN + HOLDER], cwd=root, stdout=subprocess.PIPE,
                             text=True)  # fmt: skip
    try:
        assert first.stdout.readline() == "training\n"
        code, _, err = child(PRETRAIN + "pretrain()", root, refused=True)
    finally:
        first.kill()
        first.wait()
    refusal = err.strip().splitlines()[-1] if err.strip() else ""
    named = f"in use by process {first.pid}" in refusal
    again, _, _ = child(PRETRAIN + "pretrain()", root)
    ok = code == 1 and named and again == 0
    return (
        f"second call refused: ...{refusal[refusal.find('is in use') :][:40]}",
        "first killed; the same command ran",
        ok,
    )


def main():
    rows = []
    scenarios = [
        ("kwiden grow SRC DST (folder), killed mid-write", grow_folder_killed),
        *[(f"fit_growing, killed {w}", lambda r, w=w: fit_growing_killed(r, w))
          for w in ("between growths", "at a growth", "inside a backup's save")],
        *[(f"save_checkpoint into an existing folder, killed {w}", lambda r, w=w: save_checkpoint_killed(r, w))
          for w in ("while writing", "between renames")],
        *[(f"kwiden pretrain, killed {w}", lambda r, w=w: pretrain_killed(r, w))
          for w in ("while tokenizing", "mid-training", "while writing final/")],
        ("two kwiden pretrain on one folder at once", pretrain_twice_at_once),
    ]  # fmt: skip
    for name, scenario in scenarios:
        with tempfile.TemporaryDirectory() as folder:
            after, next_run, ok = scenario(pathlib.Path(folder))
        rows.append((name, after, next_run, "ok" if ok else "FAIL"))
    print("\n".join(" | ".join(row) for row in [("scenario", "after the kill", "the next run", ""), *rows]))
    return 0 if all(row[-1] == "ok" for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
