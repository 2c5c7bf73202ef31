"""What each `--config` preset gives with `kwiden pretrain`'s defaults (`--seq-len 128`, `--batch-size 32`,
`--budget 1000`, `--grow auto`): its parameters and training FLOPs per token, the growth `auto` plans and the
share of the scratch run's FLOPs it spends before the growth, and, for the presets small enough for a CPU,
seconds per update here (measured: 2 warm updates timed after one compiled). Models are built as skeletons
(`keras.StatelessScope`: shapes, no weights held) for the counts.

    python benchmarks/presets.py            # counts for every preset, seconds for those under 5M parameters
"""

import sys
import time

import keras
import numpy as np

import kwiden
from kwiden.models import get_family, presets
from kwiden.training import recipe
from kwiden.training.compute import flops_per_token

SEQ_LEN, BATCH, BUDGET = 128, 32, 1000
# The vocabularies a user starts from: bytes for the GPTs, bert-base-chinese's WordPiece for the BERTs.
VOCAB = {"gpt": 258, "bert": 21128}
TIMED_BELOW = 5_000_000  # parameters


def skeleton(family, config):
    with keras.StatelessScope(initialize_variables=False):
        return kwiden.build_transformer_model(config, model=family)


def seconds_per_update(family, config):
    masked = family == "bert"  # its masked LM, as pretrain trains it: the encoder's output and the MLM logits
    model = kwiden.build_transformer_model(config, model=family, with_mlm=masked)
    tokens = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    model.compile(kwiden.optimizers.AdamW(1e-3), loss=[None, tokens] if masked else tokens)
    ids = np.random.default_rng(0).integers(1, config["vocab_size"], (BATCH, SEQ_LEN)).astype("int32")
    x, y = ((ids, np.zeros_like(ids)), (None, ids)) if masked else (ids, ids)
    model.train_on_batch(x, y)  # compiled here
    start = time.perf_counter()
    for _ in range(2):
        model.train_on_batch(x, y)
    return (time.perf_counter() - start) / 2


def row(name):
    family, config = presets.preset(name)
    config = {**config, "vocab_size": VOCAB[family], "max_position_embeddings": max(SEQ_LEN, config.get(
        "max_position_embeddings", SEQ_LEN))}  # fmt: skip
    complete = get_family(family).config(config)
    target = skeleton(family, config)
    growths, _ = recipe.auto(complete)
    stages = [recipe.undone(complete, growths[i:]) for i in range(len(growths) + 1)]  # each model before the rest
    costs = [flops_per_token(skeleton(family, s), SEQ_LEN) * BATCH * SEQ_LEN for s in stages]
    total, placed = recipe.place(growths, BUDGET, costs, warmup=int(0.05 * BUDGET))
    before = recipe.flops_spent(placed[0].update, [g.update for g in placed], costs) if placed else 0
    seconds = seconds_per_update(family, config) if target.count_params() < TIMED_BELOW else None
    return dict(
        preset=name,
        params=target.count_params(),
        flops_token=flops_per_token(target, SEQ_LEN),
        auto=", ".join(_growth(g.arguments) + f" at update {g.update}" for g in placed) or "none",
        updates=total,
        before=before / (BUDGET * costs[-1]),
        seconds=seconds,
    )


def _growth(arguments):
    return ", ".join(f"{key}={value}" for key, value in arguments.items() if key in ("k", "depth", "heads"))


def main():
    print(f"kwiden pretrain defaults: --seq-len {SEQ_LEN}, --batch-size {BATCH}, --budget {BUDGET}, --grow auto")
    print("| preset | parameters | FLOPs/token | auto growth | updates | FLOPs before growth | s/update here |")
    print("|---|---|---|---|---|---|---|")
    for name in sys.argv[1:] or presets.PRESETS:
        r = row(name)
        seconds = f"{r['seconds']:.2f}" if r["seconds"] is not None else "(not timed)"
        print(f"| {r['preset']} | {r['params']:,} | {r['flops_token']:,} | {r['auto']} | {r['updates']} | "
              f"{r['before']:.0%} | {seconds} |", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
