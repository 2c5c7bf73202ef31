"""Does growth save compute? A byte-level Transformer trained from scratch
against the same model grown from a smaller one, at equal compute, on real text.

Two model styles: `--model gpt` (Pre-LN causal LM, next byte) and `--model bert`
(Post-LN masked LM: 15% of the bytes masked, loss on those).

The small model is charged. Compute is counted in training FLOPs, Kaplan et
al.'s estimate (`kwiden.compute.flops_per_token`): per token, 6·N + 6·L·T·d,
where N counts the kernels and the tied logits (not the embedding lookups),
L the blocks, T the context and d the width. Every run logs its validation loss
against cumulative FLOPs and wall time; the table gives, per recipe, the FLOPs
it needed to reach the scratch run's final validation loss and the saving in
percent against what the scratch run needed to first reach it ("never" if it
did not within the same compute). The scratch run is the best of `--lrs`;
every grown run uses that learning rate and the same schedule family
(`--schedule constant`, or `cosine`: 5% warmup, cosine to 10% over the run's
own updates), counted in updates across the growths.

A `Recipe` says how the small model is made (width and depth factors, its
share of the scratch run's updates), how it grows (`kwiden.grow`'s arguments;
`staged`: width first, depth later; `stack`: G_stack-style whole-model
stacking, whose new blocks are full copies, not identities) and what the
optimizer carries across (`optimizer_state`: `source`, `grown` or `zero`;
`multipliers`: `scale_learning_rates`; `rewarm`: updates over which the new
copies' rate climbs back from 0; `rewarm_all`: the same for every weight).
Its defaults are `grow`'s. `--recipes main` (default) runs grow's recipe at
several growth points and shapes and the recipe grow had before;
`--recipes ablations` changes one setting at a time; `--recipe "depth=2
share=0.8"` adds one of your own.

    python benchmarks/grow_vs_scratch.py                   # about 5 minutes on 2 cores
    python benchmarks/grow_vs_scratch.py --model bert --corpus zh.txt --schedule cosine
    python benchmarks/grow_vs_scratch.py --recipes ablations --lrs 2e-3
    python benchmarks/grow_vs_scratch.py --quick
"""

import argparse
import dataclasses
import pathlib
import time

import keras
import numpy as np
from common import environment, table

import kwiden
from kwiden import corpus, naming, optimizers
from kwiden.compute import flops_per_token
from kwiden.files import replaced_atomically

RESULTS = pathlib.Path(__file__).parent / "results"
MASK = corpus.VOCAB_SIZE  # the masked LM's [MASK]: one id past the bytes
MASKED = 0.15


@dataclasses.dataclass(frozen=True)
class Recipe:
    """A grown run. The defaults are `kwiden.grow`'s: width ×2 at half the updates."""

    name: str
    share: float = 0.5  # of the scratch run's updates, spent before the (last) growth
    width: int = 2  # the small model is `width` times narrower
    depth: int = 1  # and `depth` times shallower
    staged: bool = False  # one growth per factor of 2, width first, evenly spaced up to share
    stack: bool = False  # deepen by stacking whole copies (G_stack), not identity blocks
    spread: float = 3.0  # grow's arguments from here on
    state: str = "source"  # optimizer_state: grown | source | zero
    multipliers: bool = False  # scale_learning_rates
    rewarm: int = 0  # updates over which the new copies re-warm
    rewarm_all: int = 0  # updates over which every weight re-warms (not a grow argument)
    noise: float = 0.0  # Gaussian noise added to the grown weights, relative to each tensor's std (not exact)

    def stages(self):
        """`(share, width, depth)` of each growth."""
        if not self.staged:
            return [(self.share, self.width, self.depth)]
        factors = [(2, 1)] * (self.width.bit_length() - 1) + [(1, 2)] * (self.depth.bit_length() - 1)
        return [(self.share * (i + 1) / len(factors), w, d) for i, (w, d) in enumerate(factors)]


BEFORE = dict(spread=0.0, state="grown", multipliers=True)  # grow's defaults before this benchmark
MAIN = [
    Recipe("before: plain copies, grown state, multipliers", **BEFORE),
    Recipe("default, width x2 at 50%"),
    Recipe("default, width x2 at 67%", share=0.67),
    Recipe("default, depth x2 at 67%", width=1, depth=2, share=0.67),
    Recipe("default, width x2 at 33% then depth x2 at 67%", depth=2, share=0.67, staged=True),
]
# Each of grow's settings changed alone, and the other arms of the sweep (width x2 at 50% unless said).
ABLATIONS = [
    Recipe("spread 0", spread=0.0),
    Recipe("spread 1", spread=1.0),
    Recipe("spread 10", spread=10.0),
    Recipe("grown state", state="grown"),
    Recipe("zero state", state="zero"),
    Recipe("multipliers", multipliers=True),
    Recipe("grown state, multipliers", state="grown", multipliers=True),
    Recipe("rewarm copies 100", rewarm=100),
    Recipe("grown state, rewarm copies 100", state="grown", rewarm=100),
    Recipe("rewarm all 100", rewarm_all=100),
    Recipe("share 25%", share=0.25),
    Recipe("share 80%", share=0.8),
    Recipe("depth x2 at 50%", width=1, depth=2),
    Recipe("depth x2 at 67%, zero state", width=1, depth=2, share=0.67, state="zero"),
    Recipe("depth x2 at 67%, rewarm copies 100", width=1, depth=2, share=0.67, rewarm=100),
    Recipe("depth x2 at 67% stacked (G_stack), zero state", width=1, depth=2, share=0.67, stack=True, state="zero"),
    Recipe("width x2 + depth x2 at 67%", depth=2, share=0.67),
    Recipe("width x2 + depth x2 at 67%, grown state", depth=2, share=0.67, state="grown"),
    Recipe("width x2 at 40% then depth x2 at 80%", depth=2, share=0.8, staged=True),
    Recipe("plain copies + 1% noise (not exact)", spread=0.0, noise=0.01),
    Recipe("width x2 at 33% then x2 again at 67% (x4)", width=4, share=0.67, staged=True),
]
RECIPES = MAIN + ABLATIONS


def build(args, hidden, layers):
    if args.model == "gpt":
        return kwiden.build_transformer_model(corpus.gpt_config(hidden, layers, args.length), model="gpt")
    config = corpus.gpt_config(hidden, layers, args.length, vocab_size=corpus.VOCAB_SIZE + 1)
    bert = kwiden.build_transformer_model(config, model="bert", with_mlm=True)
    return keras.Model(bert.inputs, bert.outputs[1], name="bert_mlm")


def compile_model(model, optimizer):
    # Masked LM: targets are 0 (padding, ignored) except at the masked bytes.
    model.compile(optimizer, keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=0))


def batches(args, ids, count, rng):
    x, y = corpus.windows(ids, args.length, count, rng)
    if args.model == "gpt":
        return x, y
    masked = rng.random(x.shape) < MASKED
    return [np.where(masked, MASK, x), np.zeros_like(x)], np.where(masked, x, 0)


class Run:
    """One training run: its validation curve against cumulative FLOPs and seconds."""

    def __init__(self, name, data, args):
        self.name, self.data, self.args = name, data, args
        self.rng = np.random.default_rng(args.seed)
        self.flops, self.curve, self.seconds, self.steps = 0.0, [], 0.0, 0

    def train(self, model, steps):
        args, per_step = self.args, flops_per_token(model, self.args.length) * self.args.batch * self.args.length
        for done in range(0, steps, args.eval_every):
            chunk = min(args.eval_every, steps - done)
            x, y = batches(args, self.data["train"], chunk * args.batch, self.rng)
            start = time.perf_counter()
            model.fit(x, y, batch_size=args.batch, epochs=1, verbose=0, shuffle=False)
            self.seconds += time.perf_counter() - start
            self.flops += chunk * per_step
            self.steps += chunk
            self.log(model)

    def log(self, model):
        loss = float(model.evaluate(*self.data["valid"], batch_size=128, verbose=0))
        self.curve.append((self.flops, loss, self.seconds))

    @property
    def final(self):
        return self.curve[-1][1]

    def flops_to_reach(self, loss):
        """FLOPs at which the curve first reaches `loss` (linear between points), or None."""
        previous = (0.0, float("inf"))
        for flops, value, _ in self.curve:
            if value <= loss:
                if previous[1] == float("inf"):
                    return flops
                fraction = (previous[1] - loss) / (previous[1] - value)
                return previous[0] + fraction * (flops - previous[0])
            previous = (flops, value)
        return None


def schedule(args, steps):
    """Constant, or a 5% warmup and a cosine to 10% over the run's `steps` updates."""
    if args.schedule == "constant":
        return args.lr
    return optimizers.WarmupDecay(args.lr, max(1, steps // 20), steps, decay="cosine", end=0.1 * args.lr)


def updates(recipe, args, budget):
    """The updates of a grown run that spend `budget` FLOPs (its cosine spans them)."""
    hidden, layers, done, spent = args.hidden // recipe.width, args.layers // recipe.depth, 0, 0.0
    for share, width, depth in recipe.stages():
        until = int(share * args.scratch_steps)
        spent += (until - done) * flops_per_token(build(args, hidden, layers), args.length)
        hidden, layers, done = hidden * width, layers * depth, until
    step = flops_per_token(build(args, hidden, layers), args.length)
    return done + int((budget / (args.batch * args.length) - spent) // step)


def rewarm_all(optimizer, variables, steps):
    """The same optimizer and state, every weight's rate climbing back from 0
    over `steps` updates (slice multipliers of 0 with a warmup)."""
    config = optimizer.get_config()
    config["slice_multipliers"] = {v.path: [[0.0] * v.shape[0]] + [None] * (len(v.shape) - 1) for v in variables}
    config["slice_warmup"] = (int(keras.ops.convert_to_numpy(optimizer.iterations)) // optimizer.accum_steps, steps)
    rewarmed = type(optimizer).from_config(config)
    rewarmed.build(variables)
    for target, source in zip(rewarmed.variables, optimizer.variables):
        target.assign(source)
    return rewarmed


def stacked(args, small, times):
    """G_stack: the small model's blocks repeated `times` over in order,
    every other weight copied (the function changes)."""
    layers = naming.count_blocks(layer.name for layer in small.layers)
    big = build(args, small.get_layer(naming.EMBEDDING_TOKEN).output_dim, layers * times)
    for layer in big.layers:
        index = naming.block_index(layer.name)
        source = layer.name if index is None else naming.renumbered(layer.name, index % layers)
        if layer.weights:
            layer.set_weights(small.get_layer(source).get_weights())
    return big


def grow(recipe, args, small, small_steps):
    """The big model and its optimizer, as the recipe says."""
    if recipe.stack:
        big = stacked(args, small, recipe.depth)
        optimizer = type(small.optimizer).from_config(small.optimizer.get_config())  # zero state
        optimizer.build(big.trainable_variables)
        optimizer.iterations.assign(small_steps)
        return big, optimizer
    big, optimizer = kwiden.grow(
        small,
        recipe.width,
        depth=recipe.depth if recipe.depth > 1 else None,
        spread=recipe.spread,
        seed=args.seed,
        optimizer=small.optimizer,
        scale_learning_rates=recipe.multipliers,
        optimizer_state=recipe.state,
        rewarm=recipe.rewarm,
        allow_approximate=recipe.depth > 1,  # Post-LN (BERT) depth growth is approximate
    )
    if recipe.rewarm_all:
        optimizer = rewarm_all(optimizer, big.trainable_variables, recipe.rewarm_all)
    if recipe.noise:
        rng = np.random.default_rng(args.seed)
        for weight in big.trainable_weights:
            value = keras.ops.convert_to_numpy(weight)
            weight.assign(value + recipe.noise * value.std() * rng.standard_normal(value.shape).astype(value.dtype))
    return big, optimizer


def grown_run(recipe, data, args):
    keras.utils.set_random_seed(args.seed)
    run = Run(recipe.name, data, args)
    model = build(args, args.hidden // recipe.width, args.layers // recipe.depth)
    compile_model(model, optimizers.Adam(schedule(args, updates(recipe, args, data["budget"]))))
    for share, width, depth in recipe.stages():
        run.train(model, int(share * args.scratch_steps) - run.steps)
        model, optimizer = grow(dataclasses.replace(recipe, width=width, depth=depth), args, model, run.steps)
        compile_model(model, optimizer)
        run.log(model)  # right after growth: the smaller model's loss, unless stacked
    big_step = flops_per_token(model, args.length) * args.batch * args.length
    run.train(model, max(0, int((data["budget"] - run.flops) // big_step)))
    return run


def scratch_run(lr, data, args):
    keras.utils.set_random_seed(args.seed)
    args.lr = lr
    run = Run(f"scratch, lr {lr:g}", data, args)
    model = build(args, args.hidden, args.layers)
    compile_model(model, optimizers.Adam(schedule(args, args.scratch_steps)))
    run.train(model, args.scratch_steps)
    return run


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", choices=["gpt", "bert"], default="gpt")
    parser.add_argument("--corpus", type=pathlib.Path, default=None, help="a UTF-8 text (default: the shipped one)")
    parser.add_argument("--hidden", type=int, default=64, help="width of the big model")
    parser.add_argument("--layers", type=int, default=2, help="blocks of the big model")
    parser.add_argument("--length", type=int, default=64)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--scratch-steps", type=int, default=1500)
    parser.add_argument("--scale", type=int, default=1, help="multiply width, batch and steps (for a GPU)")
    parser.add_argument("--lrs", default="1e-3,2e-3,4e-3", help="learning rates tried for the scratch run")
    parser.add_argument("--schedule", choices=["constant", "cosine"], default="constant")
    parser.add_argument("--recipes", default="main", help="comma-separated recipe names, or main, ablations, all, none")
    parser.add_argument(
        "--recipe",
        action="append",
        default=[],
        help='one more recipe as Recipe fields, "width=1 depth=2 share=0.67" (repeatable)',
    )
    parser.add_argument("--eval-every", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--plot", type=pathlib.Path, default=RESULTS / "grow_vs_scratch.png")
    parser.add_argument("--no-plot", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.scratch_steps, args.eval_every, args.lrs = 300, 50, "2e-3"
    args.hidden *= args.scale
    args.batch *= args.scale
    args.scratch_steps *= args.scale
    recipes = select(args.recipes) + [custom(spec) for spec in args.recipe]
    text = args.corpus.read_text(encoding="utf-8") if args.corpus else corpus.load_text()
    ids = corpus.encode(text)
    split = int(0.9 * len(ids))
    data = dict(train=ids[:split], valid=batches(args, ids[split:], 512, np.random.default_rng(1)))
    print(environment(keras, np, [f"corpus: {args.corpus or 'shipped Python tutorial'}, {len(ids):,} bytes"]))

    scratch_runs = []
    for lr in [float(v) for v in args.lrs.split(",")]:
        run = scratch_run(lr, data, args)
        scratch_runs.append((run.final, lr, run))
        print(f"{run.name}: final valid loss {run.final:.4f} ({run.seconds:.0f} s)", flush=True)
    _, args.lr, scratch = min(scratch_runs, key=lambda r: r[0])
    data["budget"] = scratch.flops
    target = scratch.final

    runs = [scratch]
    for recipe in recipes:
        run = grown_run(recipe, data, args)
        runs.append(run)
        print(f"{recipe.name}: final valid loss {run.final:.4f} ({run.seconds:.0f} s)", flush=True)

    # Scratch's own cost of reaching its final loss: a noisy curve may touch it before the end.
    reference = scratch.flops_to_reach(target)
    rows = []
    for run in runs:
        reach = run.flops_to_reach(target)
        saving = "never" if reach is None else f"{100 * (1 - reach / reference):+.1f}%"
        rows.append(
            (run.name, f"{run.final:.4f}", f"{run.flops:.3g}", "-" if reach is None else f"{reach:.3g}", saving)
        )
    title = (
        f"{args.model.upper()} {args.layers}x{args.hidden}, {args.schedule} lr {args.lr:g}, "
        f"batch {args.batch}x{args.length}; target: scratch's final loss {target:.4f}"
    )
    print(f"\n{title}\n")
    print(table(rows, ("run", "final loss", "FLOPs", "FLOPs to target", "saving")))
    if not args.no_plot:
        plot(runs, target, title, args.plot)


def custom(spec):
    """A recipe from "field=value …" (Recipe's fields), named by its fields."""
    fields = {field.name: field.type for field in dataclasses.fields(Recipe)}
    values = {}
    for item in spec.split():
        key, _, value = item.partition("=")
        if key not in fields or key == "name":
            raise SystemExit(f"unknown recipe field {key!r}; known: {', '.join(fields)}")
        values[key] = {float: float, int: int, bool: lambda v: v == "True"}.get(fields[key], str)(value)
    return Recipe(spec, **values)


def select(names):
    by_name = {recipe.name: recipe for recipe in RECIPES}
    groups = {"main": MAIN, "ablations": ABLATIONS, "all": RECIPES, "none": []}
    if names in groups:
        return groups[names]
    chosen, rest = [], names
    while rest:  # names contain commas: take the longest known name at the front
        name = max((n for n in by_name if rest == n or rest.startswith(n + ",")), key=len, default=None)
        if name is None:
            raise SystemExit(f"unknown recipe at {rest!r}; known: {', '.join(by_name)}")
        chosen.append(by_name[name])
        rest = rest[len(name) + 1 :]
    return chosen


def plot(runs, target, title, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    for run in runs:
        ax.plot([p[0] for p in run.curve], [p[1] for p in run.curve], label=run.name)
    ax.axhline(target, color="grey", linestyle=":", label="scratch's final loss")
    ax.set(xlabel="training FLOPs (small model charged)", ylabel="validation loss", title=title)
    ax.title.set_fontsize(8)
    ax.legend(fontsize=7)
    path.parent.mkdir(exist_ok=True, parents=True)
    with replaced_atomically(path) as temporary:
        fig.savefig(temporary, dpi=120)
    print(f"\nplot: {path}")


if __name__ == "__main__":
    main()
