"""The `kwiden` command: `kwiden pretrain CORPUS … --config config.json
--output-dir DIR` (pretraining, grown on the way), `kwiden grow SRC DST
--factor K [--check]` (a .keras file, or a Hugging Face checkpoint folder
grown tensor by tensor), `kwiden demo`."""

import argparse
import contextlib
import dataclasses
import importlib
import importlib.util
import pathlib
import sys
import warnings
import zipfile

from kwiden import arguments
from kwiden.checkpoints.formats import folder_config
from kwiden.exports import register_keras_objects
from kwiden.files import replaced_atomically
from kwiden.generation.arguments import (
    GENERATE_FLAGS,
    SIMILAR_FLAGS,
    ArgumentError,
    ArgumentWarning,
    GenerateOptions,
    SimilarOptions,
)
from kwiden.growth import arguments as growth_arguments
from kwiden.models import family, presets
from kwiden.pretraining import objectives
from kwiden.pretraining import options as pretrain_options
from kwiden.quiet import start_quietly, the_command_runs
from kwiden.similarity.sts import StsOptions
from kwiden.text import tokens


def _grow(args):
    if pathlib.Path(args.src).is_dir():
        return _grow_folder(args)
    src, dst = _source_path(args.src), _destination_path(args.dst, args.src)
    options = _growth_options(args, growth_arguments.GROW)
    _start_backend()
    import keras

    import kwiden
    from kwiden.growth.verify import sample_inputs

    small = keras.saving.load_model(src)
    options["check"] = sample_inputs(small, seed=args.seed) if args.check else None  # --check is a switch
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="kwiden.grow")  # the report is printed below
        try:
            big = kwiden.grow(small, **options)
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
    folder = growth_arguments.names(growth_arguments.CHECKPOINT)
    in_memory = [
        arguments.flag_of(field)
        for field in dataclasses.fields(growth_arguments.GrowthArguments)
        if field.name in _growth_flags(args) and field.name not in folder
        and getattr(args, field.name) != arguments.command_default(field)
    ]  # fmt: skip
    if in_memory:
        raise CommandError(
            f"{' and '.join(in_memory)} need{'s' * (len(in_memory) == 1)} both models in memory, which growing a "
            "folder avoids; load SRC and DST with kwiden.build_transformer_model(checkpoint_path=...) and compare "
            "them with kwiden.verify."
        )
    options = _growth_options(args, growth_arguments.CHECKPOINT)
    _start_backend()
    try:
        grown = kwiden.grow_checkpoint(args.src, args.dst, **options)
    except kwiden.GrowthError as error:
        raise CommandError(str(error)) from None
    print(f"parameters: {grown.source_parameters:,} -> {grown.parameters:,}")
    print(f"saved {grown.path} ({len(grown.files)} weight file{'s' * (len(grown.files) > 1)})")
    copied = ", ".join(grown.copied) or "none found"
    print(f"copied beside them: {copied} (the tokenizer's, generation's and sentence-transformers' files; no others)")
    return 0


def _growth_flags(args):
    """The growth options the `kwiden grow` command line holds (those it offers)."""
    return arguments.given(args, growth_arguments.GrowthArguments)


def _growth_options(args, entry):
    """The options `entry` (GROW or CHECKPOINT) takes, as the command line
    gives them: a flag's value, else `entry`'s default; and what the command
    passes without a flag, where it has a default of its own (`progress`)."""
    options, given = {}, _growth_flags(args)
    for field in growth_arguments.taken_by(entry):
        if field.name in given:
            value = given[field.name]
            options[field.name] = arguments.default_in(field, entry) if value is None else value
        elif arguments.command_default(field) != field.default:
            options[field.name] = arguments.command_default(field)
    flagged = [
        f
        for f in growth_arguments.taken_by(entry)
        if f.name in given and f.name not in growth_arguments.CHECKED_ELSEWHERE
    ]
    arguments.checked(flagged, {field.name: options[field.name] for field in flagged})  # refused naming the flag
    return options


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
    _announce()
    from kwiden import demo

    demo.run(budget=args.budget, seed=args.seed, output_dir=args.output_dir)
    return 0


def _eval_sts(args):
    import kwiden
    from kwiden.similarity import sts

    pairs = sts.read_pairs(args.file)  # before the model loads: a bad file is named at once
    _start_backend()
    encoder = kwiden.SentenceEncoder(args.checkpoint, **arguments.given(args, StsOptions))
    if pairs.scores is not None:
        print(f"Spearman {sts.spearman(encoder, pairs.pairs, pairs.scores):.4f} over {len(pairs.pairs)} scored pairs "
              f"({encoder.pooling} pooling)")  # fmt: skip
    else:
        top1, mrr = sts.retrieval(encoder, pairs.pairs)
        print(f"top-1 {top1:.4f}, MRR {mrr:.4f}: each of {2 * len(pairs.pairs)} texts' partner among all the others "
              f"({encoder.pooling} pooling)")  # fmt: skip
    return 0


def _generate(args):
    folder_config(args.checkpoint)
    _start_backend()
    from kwiden.generation.prompts import generate, load_generator
    from kwiden.models import naming

    model, tokenizer = load_generator(args.checkpoint)
    with _flag_warnings(args):
        found = generate(model, tokenizer, args.prompt, **arguments.given(args, GenerateOptions))
    unilm = naming.INPUT_SEGMENT in {layer.name for layer in model.layers}  # writes a second segment
    for prompt, texts in zip(args.prompt, found):
        for text in texts:
            print(text if unilm else prompt + text)
            if len(args.prompt) * len(texts) > 1:
                print("---")
    return 0


def _similar(args):
    folder_config(args.checkpoint)
    _start_backend()
    import kwiden

    with _flag_warnings(args):
        found = kwiden.similar(args.checkpoint, args.text, **arguments.given(args, SimilarOptions))
    for sentence, cosine in found:
        print(f"{cosine:.4f}\t{sentence}")
    if len(found) < args.n:
        print(f"({len(found)} distinct sentences among {args.candidates} candidates)", file=sys.stderr)
    return 0


@contextlib.contextmanager
def _flag_warnings(args):
    """A warning that names arguments printed on one line, each named by the command's flag."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ArgumentWarning)
        yield
    for warning in caught:
        if isinstance(warning.message, ArgumentWarning):
            print(f"kwiden {args.command}: {warning.message.respelled(args.flags)}", file=sys.stderr)
        else:
            warnings.showwarning(warning.message, warning.category, warning.filename, warning.lineno)


def _pretrain(args):
    shared, own = pretrain_options.given(args)
    pretrain_options.PretrainOptions.checked(**shared)  # kwiden.pretrain checks them too, after importing Keras
    tokens.corpus_files(args.corpus, args.output_dir)
    _announce()
    import kwiden

    try:
        kwiden.pretrain(args.corpus, args.output_dir, verbose=0 if args.quiet else 1, **shared, **own)
    except KeyboardInterrupt:
        print("kwiden pretrain: stopped; run the same command to resume from the last backup", file=sys.stderr)
        return 130
    return 0


def _start_backend():
    """Called by each command once its arguments are checked, before it imports Keras: the `kwiden` command
    starts its backend quietly (kwiden.quiet); a call of `main` from Python leaves TensorFlow's notices as they are."""
    if the_command_runs():
        start_quietly()
    register_keras_objects()  # a .keras model or a run's backup read holds them


def _announce():
    """One line: the backend and the devices the command computes on."""
    _start_backend()
    import keras

    devices = keras.distribution.list_devices()
    print(f"kwiden: Keras {keras.__version__}, {keras.backend.backend()} backend, devices: {', '.join(devices)}")


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
    arguments.add_flags(grow, growth_arguments.GrowthArguments, prefix=_where, where=growth_arguments.WHERE)
    grow.set_defaults(run=_grow)
    pretrain = commands.add_parser("pretrain", help="pretrain on your corpus, small first and grown on the way")
    pretrain.add_argument("corpus", nargs="+", help="text files (.txt, .gz) or folders of them")
    pretrain.add_argument("--output-dir", required=True, help="the run's folder (the same command resumes it)")
    pretrain.add_argument("--plugin", action="append", metavar="MODULE", help="import MODULE (a module name, or a .py "
                          "file) first: the objectives and families it registers join these flags; repeat for "
                          "several")  # fmt: skip
    pretrain_options.add_flags(pretrain, _registered())
    pretrain.add_argument("--quiet", action="store_true", help="no progress bar or log lines")
    pretrain.set_defaults(run=_pretrain)
    demo = commands.add_parser("demo", help="pretrain a small GPT on shipped text, grown and from scratch")
    demo.add_argument("--budget", type=_positive, default=300, help="updates of the 64-wide GPT from scratch")
    demo.add_argument("--seed", type=int, default=0)
    demo.add_argument("--output-dir", help="keep the two runs here (default: a temporary folder)")
    demo.set_defaults(run=_demo)
    sts = commands.add_parser("eval-sts", help="score sentence vectors: Spearman on an STS file, retrieval on pairs")
    sts.add_argument("checkpoint", help="a BERT or RoFormer folder with its vocab.txt")
    sts.add_argument("file", help="text1<TAB>text2<TAB>score lines (Spearman), or text1<TAB>text2 (retrieval)")
    arguments.add_flags(sts, StsOptions)
    sts.set_defaults(run=_eval_sts)
    _generate_parser(commands)
    similar = commands.add_parser("similar", help="sentences like a text, generated by a SimBERT and ranked")
    similar.add_argument("checkpoint", help="a BERT or RoFormer folder trained with --objective simbert")
    similar.add_argument("text")
    arguments.add_flags(similar, SimilarOptions)
    similar.set_defaults(run=_similar, flags=SIMILAR_FLAGS)
    return root


def _where(field):
    """What a `kwiden grow` option's help starts with: what it is for, where only one path takes it."""
    takers = field.metadata["takers"]
    return "" if takers is None else ", ".join(growth_arguments.WHERE[taker] for taker in takers) + ": "


def _generate_parser(commands):
    generate = commands.add_parser("generate", help="continue a prompt (decoders) or write its second segment (UniLM)")
    generate.add_argument("checkpoint", help="a folder with config.json, weights and a tokenizer (a run's final/)")
    generate.add_argument("prompt", nargs="+", help="one or more prompts, generated together")
    arguments.add_flags(generate, GenerateOptions)
    generate.set_defaults(run=_generate, flags=GENERATE_FLAGS)


def _registered():
    """What the help of `--model`, `--objective` and `--config` lists: the registries' names, now."""
    return dict(families=", ".join(family.FAMILIES.names()), objectives=", ".join(sorted(objectives.registered())),
                presets=presets.described())  # fmt: skip


def plugins(argv):
    """Import the modules each `--plugin MODULE` names (a module name, or a .py file), before the parser is made:
    the objectives and families they register become its flags and choices."""
    early = argparse.ArgumentParser(add_help=False)
    early.add_argument("--plugin", action="append", default=[])
    given = early.parse_known_args(argv)[0].plugin
    if given:
        _start_backend()  # a plugin may import Keras: quietly
    for name in given:
        path = pathlib.Path(name)
        if path.suffix == ".py" and path.stem not in sys.modules:  # imported once, as a module name is
            if not path.is_file():
                raise CommandError(f"--plugin {name} does not exist.")
            spec = importlib.util.spec_from_file_location(path.stem, path)
            module = importlib.util.module_from_spec(spec)
            sys.modules[path.stem] = module
            spec.loader.exec_module(module)
        elif path.suffix != ".py":
            try:
                importlib.import_module(name)
            except ModuleNotFoundError as error:
                raise CommandError(
                    f"--plugin {name}: {error} (give a module on the Python path, or a .py file)."
                ) from None


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        plugins(argv)
    except CommandError as error:
        print(f"kwiden: {error}", file=sys.stderr)
        return 1
    args = parser().parse_args(argv)
    try:
        return args.run(args)
    except KeyboardInterrupt:  # Ctrl-C: one line and the shell's status for it (pretrain says how to resume)
        print(f"kwiden {args.command}: interrupted", file=sys.stderr)
        return 130
    except ArgumentError as error:  # a refused argument, named by the flag that gives it
        print(f"kwiden {args.command}: {error.respelled(getattr(args, 'flags', {}))}", file=sys.stderr)
        return 1
    except (CommandError, ValueError, OSError) as error:
        # One line a user can act on, not a traceback; GrowthError is a ValueError.
        print(f"kwiden {args.command}: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
