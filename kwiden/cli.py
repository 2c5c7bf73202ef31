"""The `kwiden` command: `kwiden grow SRC DST --factor K [--check]` (a .keras
file, or a Hugging Face checkpoint folder grown tensor by tensor), `kwiden demo`."""

import argparse
import pathlib
import sys
import warnings
import zipfile
from fractions import Fraction

from kwiden.files import replaced_atomically


def _grow(args):
    if pathlib.Path(args.src).is_dir():
        return _grow_folder(args)
    import keras

    import kwiden
    from kwiden.verify import sample_inputs

    src, dst = _source_path(args.src), _destination_path(args.dst, args.src)
    small = keras.saving.load_model(src)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="kwiden.grow")  # the report is printed below
        try:
            big = kwiden.grow(
                small,
                args.factor,
                check=sample_inputs(small, seed=args.seed) if args.check else None,
                rtol=args.rtol,
                ffn_factor=args.ffn_factor,
                heads=args.heads or "size",
                rope=args.rope,
                spread=args.spread,
                seed=args.seed,
                depth=args.depth,
                num_layers=args.num_layers,
                allow_approximate=args.allow_approximate,
                hidden_size=args.hidden_size,
                intermediate_size=args.intermediate_size,
            )
        except kwiden.GrowthError as error:
            raise CommandError(str(error) + ("\nnot saved" if args.check else "")) from None
    print(f"parameters: {small.count_params():,} -> {big.count_params():,}")
    report = getattr(big, "growth_report", None)
    if report is not None:
        print(report)
        if not report.ok:
            print("kwiden grow: not exact; saved anyway (--allow-approximate)", file=sys.stderr)
    with replaced_atomically(dst) as temporary:  # a failed save leaves DST as it was
        big.save(temporary)
    print(f"saved {dst}")
    return 0


def _grow_folder(args):
    """A Hugging Face checkpoint folder, grown tensor by tensor into a new folder."""
    import kwiden

    if pathlib.Path(args.dst).suffix == ".keras":
        raise CommandError(
            f"{args.src} is a folder, grown (as a Hugging Face checkpoint) into a new folder, not a .keras file: "
            "give DST as a folder name. To grow a .keras model, give its .keras file as SRC."
        )
    if args.check or args.rtol is not None:
        raise CommandError(
            "--check and --rtol need both models in memory, which growing a folder avoids; load SRC and DST with "
            "kwiden.build_transformer_model(checkpoint_path=...) and compare them with kwiden.verify."
        )
    try:
        grown = kwiden.grow_checkpoint(
            args.src, args.dst, args.factor, ffn_factor=args.ffn_factor, heads=args.heads or "count", rope=args.rope,
            spread=args.spread, seed=args.seed, depth=args.depth, num_layers=args.num_layers,
            allow_approximate=args.allow_approximate, hidden_size=args.hidden_size,
            intermediate_size=args.intermediate_size, dtype=args.dtype, max_shard_size=args.max_shard_size,
            progress=True,
        )  # fmt: skip
    except kwiden.GrowthError as error:
        raise CommandError(str(error)) from None
    print(f"parameters: {grown.source_parameters:,} -> {grown.parameters:,}")
    print(f"saved {grown.path} ({len(grown.files)} weight file{'s' * (len(grown.files) > 1)})")
    copied = ", ".join(grown.copied) or "none found"
    print(f"copied beside them: {copied} (the tokenizer's and generation's files; no others)")
    return 0


class CommandError(Exception):
    """What the command prints, on one line, before it exits with status 1."""


def _source_path(path):
    path = pathlib.Path(path)
    if not path.exists():
        raise CommandError(f"{path} does not exist.")
    if path.suffix in (".h5", ".hdf5"):
        raise CommandError(
            f"{path} is a legacy HDF5 file; load it in Keras and save it as .keras (model.save('x.keras'))."
        )
    if path.suffix != ".keras" or not zipfile.is_zipfile(path):
        raise CommandError(f"{path} is not a .keras model file (a zip archive written by model.save).")
    return path


def _destination_path(path, source):
    path = pathlib.Path(path)
    if path.suffix != ".keras":
        raise CommandError(f"{path}: the grown model is saved as a .keras file; give a name ending in .keras.")
    if not path.parent.is_dir():
        raise CommandError(f"{path}: the folder {path.parent} does not exist.")
    if path.exists() and path.resolve() == pathlib.Path(source).resolve():
        raise CommandError(f"{path} is the source model; write the grown model to another file.")
    return path


def _demo(args):
    from kwiden import demo

    demo.run(steps=args.steps, grow_steps=args.grow_steps, factor=args.factor, seed=args.seed)
    return 0


def _fraction(text):
    """A factor such as 2, 1.5 or 4/3."""
    try:
        return Fraction(text)
    except (ValueError, ZeroDivisionError):
        raise argparse.ArgumentTypeError(f"{text!r} is not a factor such as 2, 1.5 or 4/3") from None


def _positive(text):
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def parser():
    root = argparse.ArgumentParser(prog="kwiden", description=__doc__)
    commands = root.add_subparsers(dest="command", required=True)
    grow = commands.add_parser("grow", help="grow a saved .keras model or a Hugging Face folder to a wider one")
    grow.add_argument("src", help="the .keras model to grow, or a Hugging Face checkpoint folder")
    grow.add_argument("dst", help="where to save the grown .keras model (a new folder for a folder)")
    grow.add_argument("--factor", type=_fraction, default=None, help="width factor k (2 doubles; 4/3 is 384 -> 512)")
    grow.add_argument("--hidden-size", type=int, default=None, help="target hidden size instead of --factor")
    grow.add_argument(
        "--ffn-factor", type=_fraction, default=None, help="the FFN width's own factor (default: --factor)"
    )
    grow.add_argument("--intermediate-size", type=int, default=None, help="target FFN width instead of --ffn-factor")
    grow.add_argument(
        "--heads",
        choices=["size", "count"],
        default=None,
        help="grow head size or head count (default: size for .keras models; count for folders, which keeps a "
        "rotary model's config.json able to say what it computes)",
    )
    grow.add_argument(
        "--rope", choices=["exact", "standard"], default="exact", help="rotary frequencies when heads grow"
    )
    grow.add_argument("--spread", type=float, default=3.0, help="exact symmetry breaking (default 3; 0: plain copies)")
    grow.add_argument("--depth", type=int, default=None, help="multiply the number of Transformer blocks")
    grow.add_argument("--num-layers", type=int, default=None, help="make the number of Transformer blocks this")
    grow.add_argument("--allow-approximate", action="store_true", help="accept growth that is not exact (reported)")
    grow.add_argument("--check", action="store_true", help="verify on random inputs; do not save if not exact")
    grow.add_argument(
        "--rtol", type=float, default=None, help="relative error --check accepts (default: 1e-5 in float32)"
    )
    grow.add_argument("--seed", type=int, default=0)
    grow.add_argument(
        "--dtype", choices=["float32", "bfloat16", "float16"], default=None, help="folders: the grown tensors' dtype"
    )
    grow.add_argument("--max-shard-size", default="5GB", help="folders: the largest weight file (default 5GB)")
    grow.set_defaults(run=_grow)
    demo = commands.add_parser("demo", help="train a small GPT on shipped text, grow it ×2, train on")
    demo.add_argument("--steps", type=_positive, default=300, help="training steps of the small model")
    demo.add_argument("--grow-steps", type=_positive, default=150, help="training steps after growth")
    demo.add_argument("--factor", type=int, default=2)
    demo.add_argument("--seed", type=int, default=0)
    demo.set_defaults(run=_demo)
    return root


def main(argv=None):
    args = parser().parse_args(argv)
    try:
        return args.run(args)
    except (CommandError, ValueError, OSError) as error:
        # One line a user can act on, not a traceback; GrowthError is a ValueError.
        print(f"kwiden {args.command}: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
