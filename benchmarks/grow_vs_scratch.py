"""Does growth save compute? A byte-level GPT (Pre-LN causal LM) trained from
scratch against the same model grown from a half-width one, at equal compute.

The small model is charged. Compute is counted in training FLOPs, Kaplan et
al.'s estimate: per token, 6·N + 6·L·T·d, where N counts every weight used in
a matrix product (the tied logits included, the embedding lookups not), L the
blocks, T the context and d the width. Every run logs its validation loss
against cumulative FLOPs; the table gives, per recipe, the FLOPs it needed to
reach the scratch run's final validation loss and the saving in percent
against what the scratch run needed to first reach it ("never" if it did not
within the same compute). The scratch run is the best
of `--lrs`; every grown run uses that learning rate and the same schedule.

Recipes after growth (`--share` of the scratch run's tokens go to the small model):
  default         kwiden.grow(small, 2, optimizer=small.optimizer): plain copies,
                  grown Adam state, per-tensor learning-rate multipliers
  spread 3        the same with exact symmetry breaking, spread=3
  spread 3, fresh spread=3 and a fresh Adam (no state carried)
  spread 3, source state   spread=3; each source element keeps its grown moments,
                  its copies start from zero (asymmetric state; SPARKLING's best)

    python benchmarks/grow_vs_scratch.py                   # about 10 minutes on 2 cores
    python benchmarks/grow_vs_scratch.py --corpus /usr/share/doc/python3.11/html/_sources/library/os.rst.txt
    python benchmarks/grow_vs_scratch.py --quick
"""

import argparse
import pathlib
import time

import keras
import numpy as np
from common import environment, table

import kwiden
from kwiden import corpus, naming, optimizers
from kwiden.files import replaced_atomically
from kwiden.growth import weight_axes
from kwiden.keras_internals import optimizer_slots, slot_of

LOSS = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
RESULTS = pathlib.Path(__file__).parent / "results"


def gpt(hidden, layers, length):
    config = corpus.gpt_config(hidden, layers, length)
    return kwiden.build_transformer_model(config, model="gpt")


def flops_per_token(model, length):
    """6·N + 6·L·T·d (training: forward and backward)."""
    matmul = sum(int(np.prod(w.shape)) for w in model.trainable_weights if len(w.shape) >= 2)
    token = model.get_layer("Embedding-Token")
    layers = naming.count_blocks(layer.name for layer in model.layers)
    return 6 * matmul + 6 * layers * length * token.output_dim


class Run:
    """One training run: its validation curve against cumulative FLOPs."""

    def __init__(self, name, data, args):
        self.name, self.data, self.args = name, data, args
        self.flops, self.curve, self.seconds = 0.0, [], 0.0

    def train(self, model, steps):
        args, per_step = self.args, flops_per_token(model, self.args.length) * self.args.batch * self.args.length
        for done in range(0, steps, args.eval_every):
            chunk = min(args.eval_every, steps - done)
            x, y = corpus.windows(self.data["train"], args.length, chunk * args.batch, self.data["rng"])
            start = time.perf_counter()
            model.fit(x, y, batch_size=args.batch, epochs=1, verbose=0, shuffle=False)
            self.seconds += time.perf_counter() - start
            self.flops += chunk * per_step
            self.curve.append((self.flops, self.evaluate(model)))

    def evaluate(self, model):
        return float(model.evaluate(*self.data["valid"], batch_size=128, verbose=0))

    def flops_to_reach(self, loss):
        """FLOPs at which the curve first reaches `loss` (linear between points), or None."""
        previous = (0.0, float("inf"))
        for flops, value in self.curve:
            if value <= loss:
                if previous[1] == float("inf"):
                    return flops
                fraction = (previous[1] - loss) / (previous[1] - value)
                return previous[0] + fraction * (flops - previous[0])
            previous = (flops, value)
        return None


def schedule(args, steps):
    if args.schedule == "constant":
        return args.lr
    return optimizers.WarmupDecay(args.lr, max(1, steps // 20), steps, decay="cosine", end=0.1 * args.lr)


def copies_zeroed(optimizer, big, small_axes):
    """Asymmetric state: in every slot, each source element keeps its grown
    value and its other copies start from zero."""
    for _, slots, _ in optimizer_slots(optimizer):
        for variable in big.trainable_variables:
            axes = small_axes.get(variable.path)
            if axes is None:
                continue
            slot = slot_of(optimizer, slots, variable)
            mask = np.ones(slot.shape, bool)
            for axis, spec in enumerate(axes):
                if spec is not None and spec[0].factor != 1:
                    source = spec[0].source(slot.shape[axis] // spec[0].factor)
                    first = np.zeros(len(source), bool)
                    first[np.unique(source, return_index=True)[1]] = True
                    shape = [1] * slot.ndim
                    shape[axis] = -1
                    mask &= first.reshape(shape)
            slot.assign(np.where(mask, keras.ops.convert_to_numpy(slot), 0).astype(slot.dtype))


def grown_run(name, small_template, data, args, spread, carry_state, asymmetric=False):
    keras.utils.set_random_seed(args.seed)
    run = Run(name, dict(data, rng=np.random.default_rng(args.seed)), args)
    small = gpt(args.hidden // 2, args.layers, args.length)
    small.set_weights(small_template.get_weights())
    small_steps = int(args.share * args.scratch_steps)
    small.compile(optimizers.Adam(schedule(args, args.scratch_steps)), LOSS)
    run.train(small, small_steps)
    big, optimizer = kwiden.grow(small, 2, spread=spread, seed=args.seed, optimizer=small.optimizer)
    if asymmetric:
        copies_zeroed(optimizer, big, weight_axes(small, 2))
    if not carry_state:
        optimizer = optimizers.Adam(schedule(args, args.scratch_steps))
        optimizer.build(big.trainable_variables)
        optimizer.iterations.assign(small_steps)
    big.compile(optimizer, LOSS)
    run.curve.append((run.flops, run.evaluate(big)))  # right after growth: the small model's loss
    big_step = flops_per_token(big, args.length) * args.batch * args.length
    run.train(big, max(0, int((data["budget"] - run.flops) // big_step)))
    return run


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", type=pathlib.Path, default=None, help="a UTF-8 text (default: the shipped one)")
    parser.add_argument("--hidden", type=int, default=64, help="width of the big model (the small one is half)")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--length", type=int, default=64)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--scratch-steps", type=int, default=1500)
    parser.add_argument("--share", type=float, default=0.5, help="share of the scratch tokens the small model gets")
    parser.add_argument("--lrs", default="5e-4,1e-3,2e-3", help="learning rates tried for the scratch run")
    parser.add_argument("--schedule", choices=["constant", "cosine"], default="constant")
    parser.add_argument("--eval-every", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--no-plot", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.scratch_steps, args.eval_every, args.lrs = 300, 50, "1e-3"
    text = args.corpus.read_text(encoding="utf-8") if args.corpus else corpus.load_text()
    ids = corpus.encode(text)
    split = int(0.9 * len(ids))
    valid = corpus.windows(ids[split:], args.length, 512, np.random.default_rng(1))
    data = dict(train=ids[:split], valid=valid)
    print(environment(keras, np, [f"corpus: {args.corpus or 'shipped Python tutorial'}, {len(ids):,} bytes"]))

    scratch_runs = []
    for lr in [float(v) for v in args.lrs.split(",")]:
        keras.utils.set_random_seed(args.seed)
        args.lr = lr
        run = Run(f"scratch, lr {lr:g}", dict(data, rng=np.random.default_rng(args.seed)), args)
        model = gpt(args.hidden, args.layers, args.length)
        model.compile(optimizers.Adam(schedule(args, args.scratch_steps)), LOSS)
        run.train(model, args.scratch_steps)
        scratch_runs.append((run.curve[-1][1], lr, run))
        print(f"{run.name}: final valid loss {run.curve[-1][1]:.4f} ({run.seconds:.0f} s)")
    _, args.lr, scratch = min(scratch_runs, key=lambda r: r[0])
    data["budget"] = scratch.flops
    target = scratch.curve[-1][1]

    keras.utils.set_random_seed(args.seed)
    small_template = gpt(args.hidden // 2, args.layers, args.length)
    recipes = [
        ("default", 0.0, True, False),
        ("spread 3", 3.0, True, False),
        ("spread 3, fresh Adam", 3.0, False, False),
        ("spread 3, source state", 3.0, True, True),
    ]
    runs = [scratch]
    for name, spread, carry, asymmetric in recipes:
        run = grown_run(name, small_template, data, args, spread, carry, asymmetric)
        runs.append(run)
        print(f"{name}: final valid loss {run.curve[-1][1]:.4f} ({run.seconds:.0f} s)")

    # Scratch's own cost of reaching its final loss: a noisy curve may touch it before the end.
    reference = scratch.flops_to_reach(target)
    rows = []
    for run in runs:
        reach = run.flops_to_reach(target)
        saving = "never" if reach is None else f"{100 * (1 - reach / reference):+.1f}%"
        rows.append(
            (run.name, f"{run.curve[-1][1]:.4f}", f"{run.flops:.3g}", "-" if reach is None else f"{reach:.3g}", saving)
        )
    title = (
        f"GPT {args.layers}x{args.hidden} (grown from {args.hidden // 2} at {args.share:.0%} of the tokens), "
        f"{args.schedule} lr {args.lr:g}, batch {args.batch}x{args.length}; target: scratch's final loss {target:.4f}"
    )
    print(f"\n{title}\n")
    print(table(rows, ("run", "final loss", "FLOPs", "FLOPs to target", "saving")))
    if not args.no_plot:
        plot(runs, target, title)


def plot(runs, target, title):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    for run in runs:
        ax.plot(*zip(*run.curve), label=run.name)
    ax.axhline(target, color="grey", linestyle=":", label="scratch's final loss")
    ax.set(xlabel="training FLOPs (small model charged)", ylabel="validation loss", title=title)
    ax.title.set_fontsize(8)
    ax.legend()
    RESULTS.mkdir(exist_ok=True)
    with replaced_atomically(RESULTS / "grow_vs_scratch.png") as temporary:
        fig.savefig(temporary, dpi=120)
    print(f"\nplot: {RESULTS / 'grow_vs_scratch.png'}")


if __name__ == "__main__":
    main()
