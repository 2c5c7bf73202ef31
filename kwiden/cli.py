"""The `kwiden` command: `kwiden grow SRC DST --factor K [--check]`, `kwiden demo`."""

import argparse
import sys


def _grow(args):
    import keras

    import kwiden
    from kwiden.verify import sample_inputs

    small = keras.saving.load_model(args.src)
    check = sample_inputs(small, seed=args.seed) if args.check else None
    try:
        big = kwiden.grow(small, args.factor)
    except ValueError as error:
        print(f"kwiden grow: {error}", file=sys.stderr)
        return 1
    print(f"parameters: {small.count_params():,} -> {big.count_params():,} (×{args.factor} width)")
    status = 0
    if check is not None:
        report = kwiden.verify(small, big, check, rtol=args.rtol, k=args.factor)
        print(report)
        status = 0 if report.ok else 1
    big.save(args.dst)
    print(f"saved {args.dst}")
    return status


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
    grow.add_argument("--factor", type=int, required=True, help="width factor k (2 doubles)")
    grow.add_argument("--check", action="store_true", help="verify on random inputs and print the report")
    grow.add_argument("--rtol", type=float, default=1e-5, help="relative error --check accepts")
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
