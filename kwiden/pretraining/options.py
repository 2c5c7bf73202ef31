"""`kwiden.pretrain`'s options, declared once: `PretrainOptions`, whose
fields carry their default, their kind and range, their flag's help, and
whether a resume may change them. From it come the `kwiden pretrain` flags
(`add_flags`), the checks of every value (`PretrainOptions.checked`), what
`run.json` records, which options a resume may change (`FREE_ON_RESUME`),
and the README's table (a test holds it to these fields); `pretrain`'s
signature spells the same names and defaults for readers and IDEs, and a
test fails when they part."""

import dataclasses
import math
import numbers
import pathlib

from kwiden.models.config import is_count
from kwiden.optimizers.schedules import SCHEDULES
from kwiden.pretraining.objectives import OBJECTIVES
from kwiden.similarity.losses import DISTILL_WEIGHT, SCALE
from kwiden.training import recipe

PRECISIONS = ("auto", "float32", "mixed_bfloat16")
# Whether a resume may give another value: "same" (it would compute another run), "free" (how often it
# evaluates or backs up, where its folder is, the precision as named: "auto" and "float32" on a CPU are one,
# and the precision it resolves to is compared apart).
SAME, FREE = "same", "free"
# The peak learning rates without --lr: from scratch, and from a pretrained --from model, which a rate made for
# random weights throws off (SimBERT from all-MiniLM-L6-v2, 150 updates, held-out top-1 by its pooler: 0.050 at
# 1e-3, 0.252 at 5e-5, the best of 1e-5 to 1e-3: benchmarks/results/simbert_en_lr.md).
LR_SCRATCH, LR_PRETRAINED = 1e-3, 5e-5


def option(default, help, kind="text", least=None, most=None, choices=None, resume=SAME, flag=None, metavar=None):
    """A field of `PretrainOptions`: `kind` is "count" (a whole number from `least` to `most`), "positive" (a
    finite number above 0), "fraction" (in (0, 1)), "share" (in (0, 1]), "portion" (in [0, 1]), "weight" (a
    finite number of at least 0), "choice" (one of `choices`), "switch", "text" or "path"."""
    rules = dict(
        help=help, kind=kind, least=least, most=most, choices=choices, resume=resume, flag=flag, metavar=metavar
    )
    return dataclasses.field(default=default, metadata=rules)


@dataclasses.dataclass(frozen=True)
class PretrainOptions:
    """What a pretraining run computes with (`kwiden.pretrain`'s arguments
    but the corpus, the folder and `verbose`), checked; `run.json` records them."""

    model: str = option(None, "the target's family: gpt, llama, qwen2, mistral (next token); bert, roformer (masked)")
    objective: str = option(
        None, "causal_lm, masked_lm, seq2seq or simbert (default: the family's), or one registered in Python"
    )
    config: object = option(
        None, "the target's config.json (Hugging Face keys); vocab_size defaults to the tokenizer's"
    )
    tokenizer: str = option(None, "bytes (default), a WordPiece vocab.txt or a tokenizer.json", kind="path")
    build_vocab: int = option(None, "train a WordPiece vocabulary of SIZE on the corpus", "count", 1, metavar="SIZE")
    from_checkpoint: str = option(None, "go on pretraining (and growing) this folder", "path", flag="--from",
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
    whole_word_mask: bool = option(False, "mask whole words (Chinese words by jieba)", "switch")
    scale: float = option(SCALE, "simbert: the cosines' scale in the in-batch softmax", "positive", metavar="S")
    corrupt: float = option(0.0, "seq2seq, simbert: the share of sources whole-word masked (RoFormer-Sim's)",
                            "portion", metavar="F")  # fmt: skip
    teacher: str = option(None, "simbert: distil the cosines of this checkpoint's sentence vectors (RoFormer-Sim)",
                          "path", metavar="CHECKPOINT")  # fmt: skip
    distill_weight: float = option(None, f"with --teacher: the weight of the squared cosine differences (default: "
                                   f"{DISTILL_WEIGHT:g})", "weight", metavar="W")  # fmt: skip
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
        for field in dataclasses.fields(cls):
            values[field.name] = _checked(field, values[field.name])
        if values["tokenizer"] is not None and values["build_vocab"] is not None:
            raise ValueError("Give --tokenizer or --build-vocab, not both.")
        if values["config"] is None and values["from_checkpoint"] is None:
            raise ValueError("Give the target model: --config config.json (with --model), or --from CHECKPOINT.")
        for flag, checkpoint in (("--from", values["from_checkpoint"]), ("--teacher", values["teacher"])):
            if checkpoint is not None and not pathlib.Path(checkpoint).is_dir():
                state = "is not a folder" if pathlib.Path(checkpoint).exists() else "does not exist"
                raise ValueError(
                    f"{flag} {checkpoint} {state}: give a checkpoint folder (Hugging Face: config.json and "
                    "model.safetensors; Google: bert_config.json and bert_model.ckpt.*)."
                )
        if values["distill_weight"] is not None and values["teacher"] is None:
            raise ValueError("--distill-weight weighs the distillation from a --teacher: give --teacher CHECKPOINT.")
        if values["teacher"] is not None and values["distill_weight"] is None:
            values["distill_weight"] = DISTILL_WEIGHT
        recipe.parse(values["grow"])
        return cls(**values)


def default_lr(options):
    """The peak learning rate without `--lr`: a pretrained `--from` model's, else one for random weights."""
    return LR_SCRATCH if options.from_checkpoint is None else LR_PRETRAINED


def flag_of(field):
    return field.metadata["flag"] or "--" + field.name.replace("_", "-")


# The options a resume may give other values: they change no update.
FREE_ON_RESUME = tuple(f.name for f in dataclasses.fields(PretrainOptions) if f.metadata["resume"] == FREE)


# The real numbers' kinds: (whether 0 is included, their bound above, whether it is included), and how an error
# spells their range.
RANGES = {
    "positive": (False, math.inf, False, "a positive number"),
    "fraction": (False, 1, False, "in (0, 1)"),
    "share": (False, 1, True, "in (0, 1]"),
    "portion": (True, 1, True, "in [0, 1]"),
    "weight": (True, math.inf, False, "a finite number of at least 0"),
}


def _checked(field, value):
    rules, flag = field.metadata, flag_of(field)
    if value is None and field.default is None:
        return None
    if rules["kind"] == "count":
        if not is_count(value, rules["least"]) or (rules["most"] is not None and value > rules["most"]):
            most = rules["most"]
            span = f"from {rules['least']} to {most}" if most is not None else f"of at least {rules['least']}"
            raise ValueError(f"{flag} must be a whole number {span}, got {value!r}.")
        return int(value)
    if rules["kind"] in RANGES:
        zero, most, included, span = RANGES[rules["kind"]]
        fits = isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)
        if not (fits and (0 <= value if zero else 0 < value) and (value <= most if included else value < most)):
            raise ValueError(f"{flag} must be {span}, got {value!r}.")
        return float(value)
    if rules["kind"] == "choice" and value not in rules["choices"]:
        raise ValueError(f"{flag} must be one of {', '.join(rules['choices'])}, got {value!r}.")
    if rules["kind"] == "switch":
        return bool(value)
    return value


def add_flags(parser):
    """The `kwiden pretrain` flags of every option, with their defaults and help."""
    for field in dataclasses.fields(PretrainOptions):
        rules = field.metadata
        shown = "" if field.default is None or field.default is False else f" (default: {field.default})"
        given = dict(dest=field.name, help=(rules["help"] + shown).replace("%", "%%"))
        if rules["kind"] == "switch":
            parser.add_argument(flag_of(field), action="store_true", **given)
            continue
        parse = int if rules["kind"] == "count" else float if rules["kind"] in RANGES else str
        parser.add_argument(flag_of(field), type=parse, default=field.default, metavar=rules["metavar"],
                            choices=rules["choices"], **given)  # fmt: skip


def given(args):
    """The options an `argparse` namespace holds."""
    return {field.name: getattr(args, field.name) for field in dataclasses.fields(PretrainOptions)}


def refuse_untaken(options, objective):
    """Refuse an option of one objective (`scale`, `corrupt`, …: those some registered objective `takes`) given to a
    run of an objective that does not read it."""
    for field in dataclasses.fields(PretrainOptions):
        value = getattr(options, field.name)
        own = any(field.name in other.takes for other in OBJECTIVES.values())
        if own and field.name not in objective.takes and value != field.default:
            raise ValueError(f"{flag_of(field)} is not an option of --objective {objective.name}; it is for "
                             f"{field.metadata['help']}.")  # fmt: skip


__all__ = ["FREE_ON_RESUME", "PretrainOptions", "add_flags", "given", "refuse_untaken"]
