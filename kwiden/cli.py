"""The `kwiden` command: `kwiden grow SRC DST --factor K [--check]`, `kwiden demo`."""

import argparse
import sys
import warnings
from fractions import Fraction


def _grow(args):
    import keras

    import kwiden
    from kwiden.verify import sample_inputs

    small = keras.saving.load_model(args.src)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="kwiden.grow")  # the report is printed below
            big = kwiden.grow(
                small,
                args.factor,
                check=sample_inputs(small, seed=args.seed) if args.check else None,
                rtol=args.rtol,
                ffn_factor=args.ffn_factor,
                heads=args.heads,
                rope=args.rope,
                spread=args.spread,
                seed=args.seed,
                depth=args.depth,
                num_layers=args.num_layers,
                allow_approximate=args.allow_approximate,
                hidden_size=args.hidden_size,
                intermediate_size=args.intermediate_size,
            )
    except ValueError as error:
        print(f"kwiden grow: {error}", file=sys.stderr)
        if isinstance(error, kwiden.GrowthError) and args.check:
            print("kwiden grow: not saved", file=sys.stderr)
        return 1
    print(f"parameters: {small.count_params():,} -> {big.count_params():,}")
    report = getattr(big, "growth_report", None)
    if report is not None:
        print(report)
        if not report.ok:
            print("kwiden grow: not exact; saved anyway (--allow-approximate)", file=sys.stderr)
    big.save(args.dst)
    print(f"saved {args.dst}")
    return 0


def _demo(args):
    from kwiden import demo

    demo.run(steps=args.steps, grow_steps=args.grow_steps, factor=args.factor, seed=args.seed)
    return 0


def parser():
    root = argparse.ArgumentParser(prog="kwiden", description=__doc__)
    commands = root.add_subparsers(dest="command", required=True)
    grow = commands.add_parser("grow", help="grow a saved .keras model to a wider one")
    grow.add_argument("src", help="the .keras model to grow")
    grow.add_argument("dst", help="where to save the grown .keras model")
    grow.add_argument("--factor", type=Fraction, default=None, help="width factor k (2 doubles; 4/3 is 384 -> 512)")
    grow.add_argument("--hidden-size", type=int, default=None, help="target hidden size instead of --factor")
    grow.add_argument(
        "--ffn-factor", type=Fraction, default=None, help="the FFN width's own factor (default: --factor)"
    )
    grow.add_argument("--intermediate-size", type=int, default=None, help="target FFN width instead of --ffn-factor")
    grow.add_argument("--heads", choices=["size", "count"], default="size", help="grow head size or head count")
    grow.add_argument(
        "--rope", choices=["exact", "standard"], default="exact", help="rotary frequencies when heads grow"
    )
    grow.add_argument("--spread", type=float, default=0.0, help="exact symmetry breaking (0: plain copies)")
    grow.add_argument("--depth", type=int, default=None, help="multiply the number of Transformer blocks")
    grow.add_argument("--num-layers", type=int, default=None, help="make the number of Transformer blocks this")
    grow.add_argument("--allow-approximate", action="store_true", help="accept growth that is not exact (reported)")
    grow.add_argument("--check", action="store_true", help="verify on random inputs; do not save if not exact")
    grow.add_argument(
        "--rtol", type=float, default=None, help="relative error --check accepts (default: 1e-5 in float32)"
    )
    grow.add_argument("--seed", type=int, default=0)
    grow.set_defaults(run=_grow)
    demo = commands.add_parser("demo", help="train a small GPT on shipped text, grow it ×2, train on")
    demo.add_argument("--steps", type=int, default=300, help="training steps of the small model")
    demo.add_argument("--grow-steps", type=int, default=150, help="training steps after growth")
    demo.add_argument("--factor", type=int, default=2)
    demo.add_argument("--seed", type=int, default=0)
    demo.set_defaults(run=_demo)
    return root


def main(argv=None):
    args = parser().parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
