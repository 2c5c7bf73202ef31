"""The recipes the protocol compares (`--recipes`' groups), and how a recipe becomes `kwiden.pretrain`'s
options."""

BEFORE = "0.5:k=2,spread=0,optimizer_state=grown,scale_learning_rates=True,relax_learning_rates=0"  # grow's defaults before this benchmark
MAIN = [
    "auto",
    "0.5:k=2",
    "0.67:k=2",
    "0.67:depth=2",
    "0.33:k=2 0.67:depth=2",
    BEFORE,
]
# Each of grow's settings changed alone, and the other arms of the sweep (width x2 at 50% unless said). These
# and SWEEP were measured under grow's former defaults, one rate and spread 3 (`scale_learning_rates=False,
# spread=3`); an arm that names neither now runs the current ones (docs/growth-that-pays.md#the-sweep).
ABLATIONS = [
    "0.5:k=2,spread=0",
    "0.5:k=2,spread=1",
    "0.5:k=2,spread=10",
    "0.5:k=2,optimizer_state=grown",
    "0.5:k=2,optimizer_state=zero",
    "0.5:k=2,scale_learning_rates=True,relax_learning_rates=0",
    "0.5:k=2,optimizer_state=grown,scale_learning_rates=True,relax_learning_rates=0",
    "0.5:k=2,rewarm=100",
    "0.5:k=2,optimizer_state=grown,rewarm=100",
    "0.25:k=2",
    "0.8:k=2",
    "0.5:depth=2",
    "0.67:depth=2,optimizer_state=zero",
    "0.67:depth=2,rewarm=100",
    "0.67:k=2,depth=2",
    "0.67:k=2,depth=2,optimizer_state=grown",
    "0.4:k=2 0.8:depth=2",
    "0.33:k=2 0.67:k=2",
]
# The sweep behind `auto` (docs/growth-that-pays.md): growth time, width vs depth vs both, optimizer state,
# per-slice re-warmup and width-aware rates, new blocks copied whole (G_stack) or newly initialised (Bu), the
# rate after growth rewound or re-warmed, at grow's defaults unless said.
SWEEP = [
    "0.25:k=2",
    "0.5:k=2",
    "0.7:k=2",
    "0.8:k=2",
    "0.9:k=2",
    "0.8:k=2,optimizer_state=grown",
    "0.8:k=2,optimizer_state=source",
    "0.8:k=2,rewarm=100",
    "0.8:k=2,scale_learning_rates=True,relax_learning_rates=0",
    "0.5:depth=2",
    "0.8:depth=2",
    "0.8:k=2,depth=2",
    "0.6:k=2 0.85:depth=2",
    "0.8:depth=2,new_blocks=copy,allow_approximate=True",
    "0.8:depth=2,new_blocks=fresh,allow_approximate=True",
]
GROUPS = {
    "main": MAIN,
    "sweep": SWEEP,
    "ablations": ABLATIONS,
    "all": MAIN + [r for r in ABLATIONS if r not in MAIN],
    "none": [],
}


def pretrain_options(recipe):
    """`(grow spec, pretrain's other options)` of a recipe. The `@rewind`, `@rewarm` and `@learned=N` suffixes of
    earlier results named `after_growth` and `learned_growth`, measured not to pay and taken out of kwiden."""
    if "@" in recipe:
        raise SystemExit(
            f"--grow {recipe!r}: the @ suffixes named --after-growth and --learned-growth, options measured not to "
            "pay and taken out of kwiden (docs/growth-that-pays.md keeps their results)."
        )
    return recipe, {}


def bert_spec(spec):
    """The spec with `allow_approximate=True` on each depth growth (Post-LN depth growth is not exact)."""
    if spec in ("auto", "none"):
        return spec
    items = [
        item + ",allow_approximate=True" if "depth=" in item and "allow_approximate" not in item else item
        for item in spec.split()
    ]
    return " ".join(items)
