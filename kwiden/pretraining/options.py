"""`kwiden.pretrain`'s options, declared once (`kwiden.arguments`): the
shared ones (`PretrainOptions`), whose fields carry their default, their
kind and range, their flag's help, and whether a resume may change them;
each objective declares its own (`Objective.Options`), merged in here. From
them come the `kwiden pretrain` flags (`add_flags`), the checks of every
value (`PretrainOptions.checked`, `Objective.options`), what `run.json`
records, which options a resume may change (`free_on_resume`), and the
options table of docs/pretraining.md (a test holds it to these fields);
`pretrain`'s signature spells the shared names and defaults for readers and
IDEs, and a test fails when they part."""

import dataclasses

from kwiden import arguments
from kwiden.arguments import FREE, option
from kwiden.models import family
from kwiden.pretraining import objectives
from kwiden.training import recipe

PRECISIONS = ("auto", "float32", "mixed_bfloat16")
# The rate schedules after the warmup, each a `kwiden.optimizers.WarmupDecay`.
SCHEDULES = ("wsd", "cosine", "constant")
# The peak learning rates without --lr: from scratch, and from a pretrained --from model, which a rate made for
# random weights throws off (SimBERT from all-MiniLM-L6-v2, 150 updates, held-out top-1 by its pooler: 0.050 at
# 1e-3, 0.252 at 5e-5, the best of 1e-5 to 1e-3: benchmarks/results/simbert_en_lr.md).
LR_SCRATCH, LR_PRETRAINED = 1e-3, 5e-5


@dataclasses.dataclass(frozen=True)
class PretrainOptions:
    """What a pretraining run computes with (`kwiden.pretrain`'s arguments
    but the corpus, the folder and `verbose`), checked; `run.json` records them."""

    model: str = option(None, "the target's family, one of those registered: {families} (default: gpt, or the "
                        "--from checkpoint's)")  # fmt: skip
    objective: str = option(None, "what the model learns, one of those registered: {objectives} (default: the "
                            "family's)")  # fmt: skip
    config: object = option(None, "the target: a named size ({presets}; its family the default --model) or a "
                             "config.json (Hugging Face keys); vocab_size defaults to the tokenizer's, the rest to "
                             "the family's defaults")  # fmt: skip
    tokenizer: str = option(None, "bytes (default), a WordPiece vocab.txt or a tokenizer.json", kind="path")
    build_vocab: int = option(None, "train a WordPiece vocabulary of SIZE on the corpus", "count", 1, metavar="SIZE")
    from_checkpoint: str = option(None, "go on pretraining (and growing) this folder", "checkpoint", flag="--from",
                                  metavar="CHECKPOINT")  # fmt: skip
    budget: int = option(1000, "updates of the target from scratch: the run's compute", "count", 1)
    seq_len: int = option(128, "tokens a window", "count", 4)
    batch_size: int = option(32, "windows a micro-batch", "count", 1)
    accum_steps: int = option(1, "micro-batches an update", "count", 1)
    lr: float = option(None, f"peak learning rate (default: {LR_SCRATCH:g}; {LR_PRETRAINED:g} with --from, a "
                       "pretrained model's)", "positive")  # fmt: skip
    warmup: int = option(None, "updates of linear warmup (default: 5% of --budget)", "count", 0)
    schedule: str = option("wsd", "after the warmup", "choice", choices=SCHEDULES)
    decay_fraction: float = option(0.2, "wsd: the share of updates that decay to 0", "share")
    grow: str = option("auto", 'auto, none, or growths such as "0.33:k=2 0.67:depth=2"')
    valid_fraction: float = option(0.01, "the end of the corpus held out", "fraction")
    eval_every: int = option(None, "updates between evaluations (default: 20 a run)", "count", 1, resume=FREE)
    save_every: int = option(None, "updates between backups (default: at growths and the end)", "count", 1,
                             resume=FREE)  # fmt: skip
    seed: int = option(0, "the seed of the batches, masks, splits and Dropout", "count", 0, 2**32 - 1)
    precision: str = option("auto", "auto: mixed bfloat16 where a GPU trains", "choice", choices=PRECISIONS,
                            resume=FREE)  # fmt: skip

    @classmethod
    def checked(cls, **values):
        """The options of `values`, each refused naming its flag where it is of the wrong kind or range (NumPy
        scalars become Python numbers, as run.json keeps them), and where options contradict each other."""
        values = arguments.checked(cls, values)
        if values["tokenizer"] is not None and values["build_vocab"] is not None:
            raise ValueError("Give --tokenizer or --build-vocab, not both.")
        if values["config"] is None and values["from_checkpoint"] is None:
            raise ValueError("Give the target model: --config config.json (with --model), or --from CHECKPOINT.")
        recipe.parse(values["grow"])
        known = family.FAMILIES.names()
        if values["model"] is not None and values["model"] not in known:
            raise ValueError(f"--model {values['model']}: the families kwiden knows are {', '.join(known)} "
                             "(kwiden.models.register_family adds one).")  # fmt: skip
        options = cls(**values)
        if options.objective is not None:  # refused naming those registered; a family's own: pretrain checks it
            objectives.get_objective(options.objective).check_run(options)
        return options


def default_lr(options):
    """The peak learning rate without `--lr`: a pretrained `--from` model's, else one for random weights."""
    return LR_SCRATCH if options.from_checkpoint is None else LR_PRETRAINED


def objective_fields():
    """The options the registered objectives declare (`Objective.Options`), each once; refused where one is
    named as a shared option (`PretrainOptions`)."""
    shared = {field.name for field in dataclasses.fields(PretrainOptions)}
    fields = objectives.option_fields()
    clash = [field.name for field in fields if field.name in shared]
    if clash:
        takers = ", ".join(objectives.takers(clash[0]))
        raise ValueError(f"--objective {takers} declares the option {clash[0]!r}, which every run takes already.")
    return fields


def free_on_resume(objective):
    """The options a resume may give other values (they change no update): the shared ones' and `objective`'s."""
    fields = (*dataclasses.fields(PretrainOptions), *dataclasses.fields(objective.Options))
    return tuple(f.name for f in fields if f.metadata["resume"] == FREE)


def add_flags(parser, known):
    """The `kwiden pretrain` flags of every option, the shared ones and the registered objectives', with their
    defaults and help; `known`: what their help lists (`{families}`, `{objectives}`, `{presets}`)."""
    flags = arguments.add_flags(parser, PretrainOptions, known=known)
    group = parser.add_argument_group("the objectives' own options")
    takers = lambda field: ", ".join(objectives.takers(field.name)) + ": "  # noqa: E731
    return {**flags, **arguments.add_flags(group, objective_fields(), known=known, prefix=takers)}


def given(args):
    """The shared options an `argparse` namespace holds, and the objectives' own (`{name: value}` of each)."""
    own = {field.name: getattr(args, field.name) for field in objective_fields()}
    return arguments.given(args, PretrainOptions), own


def refuse_untaken(own, objective):
    """Refuse an option of another objective (`{name: value}`, of those some registered objective declares) given
    to a run of `objective`, which does not read it; one no objective declares is no option at all. Returns
    `objective`'s own options, checked."""
    taken = {field.name for field in dataclasses.fields(objective.Options)}
    declared = {field.name: field for field in objectives.option_fields()}
    for name, value in own.items():
        if name in taken:
            continue
        if name not in declared:
            raise TypeError(f"pretrain() got {name!r}, an option of no registered objective (nor of every run).")
        if value != declared[name].default:
            raise ValueError(f"{arguments.flag_of(declared[name])} is not an option of --objective {objective.name}; "
                             f"it is for {', '.join(objectives.takers(name))}: {declared[name].metadata['help']}.")  # fmt: skip
    return objective.options({name: value for name, value in own.items() if name in taken})


__all__ = ["PretrainOptions", "add_flags", "free_on_resume", "given", "refuse_untaken"]
