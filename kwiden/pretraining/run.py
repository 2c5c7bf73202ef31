"""`kwiden.pretrain`: pretrain on your own corpus, small first and grown on
the way, at the compute of the target trained from scratch."""

import contextlib
import dataclasses
import json
import math
import numbers
import pathlib

import keras

from kwiden import recipe
from kwiden.builder import build_transformer_model
from kwiden.compute import parameters_of, training_memory
from kwiden.distribution import layout_map
from kwiden.files import file_digest
from kwiden.growth.learned import LEARNING_RATE as LEARNED_GROWTH_LR
from kwiden.growth.plan import available_memory
from kwiden.models.config import read_config_file
from kwiden.models.family import family_of, get_family
from kwiden.optimizers import AfterGrowth, WarmupDecay
from kwiden.optimizers.schedules import AFTER_GROWTH, SCHEDULES
from kwiden.pretraining import objectives, tokens, vocabulary
from kwiden.pretraining.outputs import TOKENS, VOCABULARY, RunFolder
from kwiden.pretraining.trainer import Stage, Trainer

CAUSAL_FAMILIES = ("gpt", "llama", "qwen2", "mistral")
MASKED_FAMILIES = ("bert", "roformer")
# Arguments that do not change what a run computes: a run resumed with others is the same run.
NOT_RECORDED = ("verbose",)
# Recorded, but how often a run evaluates and backs up changes none of its updates: a resume may change them.
HOW_OFTEN = ("eval_every", "save_every")


# Arguments added after run.json was first written, with what a run recorded without them did: it resumes so.
def default_warmup(budget):
    """The warmup `pretrain` gives a budget without `warmup=`: 5% of its updates."""
    return round(0.05 * budget)


ADDED_LATER = dict(after_growth="continue", learned_growth=0, learned_growth_lr=LEARNED_GROWTH_LR)


@dataclasses.dataclass
class PretrainResult:
    """What `pretrain` made: the final `model` (compiled, trained), its
    `final` folder, the `metrics` rows (as in metrics.jsonl), the growths
    made, the updates and FLOPs spent, what `--grow auto` chose and why
    (`recipe`), and what the budget means for the target (`advice`)."""

    model: object
    output_dir: pathlib.Path
    final: pathlib.Path
    metrics: list
    growths: list
    updates: int
    flops: float
    recipe: str
    advice: str


def pretrain(
    corpus,
    output_dir,
    model=None,
    config=None,
    tokenizer=None,
    build_vocab=None,
    from_checkpoint=None,
    budget=1000,
    seq_len=128,
    batch_size=32,
    accum_steps=1,
    lr=1e-3,
    warmup=None,
    schedule="wsd",
    decay_fraction=0.2,
    after_growth="continue",
    grow="auto",
    learned_growth=0,
    learned_growth_lr=LEARNED_GROWTH_LR,
    whole_word_mask=False,
    valid_fraction=0.01,
    eval_every=None,
    save_every=None,
    seed=0,
    precision="auto",
    verbose=1,
):
    """Pretrain a Transformer on `corpus`, growing it on the way.

    The target model (`config`, Hugging Face keys, and `model`, a family
    name; or `from_checkpoint`) gets the compute of `budget` updates from
    scratch, whatever `grow` says: a grown run trains its smaller models
    for more updates, charged at their own FLOPs (`kwiden.compute`), so that
    two runs of one budget end at equal compute. Decoders (gpt, llama, qwen2,
    mistral) learn the next token; encoders (bert, roformer) masked tokens.

    Args:
        corpus: text files (.txt, or .gz) or folders of them, tokenized once
            into `output_dir/tokens/`.
        output_dir: the run's folder: `run.json`, `log.txt`, `metrics.jsonl`,
            `loss.png`, `backup/` and `final/` (a Hugging Face folder with the
            tokenizer). Run the same call again to resume from its last backup.
        model: the family of `config` ("gpt" by default; with
            `from_checkpoint`, the checkpoint's).
        config: a dict or a `config.json` path; without `vocab_size` it takes
            the tokenizer's, and one that differs from the tokenizer's is refused.
        tokenizer: "bytes" (the default without a checkpoint), a WordPiece
            `vocab.txt`, or a `tokenizer.json`.
        build_vocab: instead, train a WordPiece vocabulary of this size on the
            corpus (CJK characters split), written as `output_dir/vocab.txt`.
        from_checkpoint: a Hugging Face or Google folder to go on pretraining
            (and growing): the target is what `grow` makes of it (`config`,
            if given, must agree); its tokenizer is the folder's.
        budget: updates of the target trained from scratch.
        seq_len, batch_size, accum_steps: tokens a window, windows a
            micro-batch, micro-batches an update (kwiden's accumulating Adam).
        lr, warmup, schedule, decay_fraction: the peak rate, its linear
            warmup (updates; default 5% of `budget`), and what follows:
            "wsd" holds it, then decays linearly to 0 over the last
            `decay_fraction` of the updates; "cosine" decays to a tenth of it;
            "constant" holds it. Counted in updates across growths.
        after_growth: the rate after each growth: "continue" (the
            schedule as if nothing grew), "rewind" (its course after warmup
            played again from the peak over the updates left) or "rewarm"
            (times a ramp from 0 over `warmup` updates);
            `kwiden.optimizers.AfterGrowth`.
        grow: "auto" (`kwiden.recipe.auto`: depth ×2 at 80% of the updates
            for Pre-LN targets of an even number of blocks, else width ×2 at
            80%), "none" (the target from scratch), or growths as
            "0.33:k=2 0.67:depth=2": fractions of the run's updates, each
            with `kwiden.grow`'s arguments. The small model's config is the
            target's with the growths undone.
        learned_growth: after each growth (depth only), this many updates
            train a learned mix of the small model's blocks into the grown
            model's, as LiGO does (arXiv 2303.00980;
            `kwiden.growth.learned`), each charged as an update of the grown
            model; 0 (default): none.
        learned_growth_lr: the learned operator's Adam rate (its mixing
            weights are of order one).
        whole_word_mask: mask whole words (Chinese words found by jieba).
        valid_fraction: the end of the corpus held out for validation.
        eval_every: updates between evaluations (default: 20 a run).
        save_every: updates between backups (default: none but those at
            growths, at Ctrl-C and at the end).
        precision: "auto" (mixed bfloat16 where a GPU is present), "float32"
            or "mixed_bfloat16".

    Returns:
        A `PretrainResult`.

    Example (seconds on a CPU):

    >>> import tempfile, kwiden
    >>> from kwiden import corpus
    >>> text = tempfile.mktemp(suffix=".txt")
    >>> _ = open(text, "w").write(corpus.load_text()[:20000])
    >>> result = kwiden.pretrain(text, tempfile.mkdtemp(), model="gpt", config=corpus.gpt_config(16, 1, 32),
    ...     budget=20, seq_len=32, batch_size=4, verbose=0)  # doctest: +SKIP
    """
    arguments = {name: value for name, value in locals().items() if name not in NOT_RECORDED}
    folder = RunFolder(output_dir, verbose=bool(verbose))
    _check_numbers(arguments)
    arguments = _recorded(arguments)
    # A resume must compute as the run began: another backend or precision ends on other weights.
    computed_on = dict(backend=keras.backend.backend(), precision=_precision(precision))
    folder.claim(arguments, ADDED_LATER, free=HOW_OFTEN, computed_on=computed_on)
    policy = keras.config.dtype_policy()
    try:
        keras.config.set_dtype_policy(computed_on["precision"])
        with _devices(folder, arguments["batch_size"]):
            return _pretrain(folder, arguments, verbose)
    except BaseException:
        folder.release()  # a call that never trained leaves the folder to the corrected one; a run that trained keeps it
        raise
    finally:
        folder.unlock()
        keras.config.set_dtype_policy(policy)


def _pretrain(folder, a, verbose):
    checkpoint = a["from_checkpoint"]
    corpus_tokenizer = _tokenizer(a, folder)
    start_model, family = _start(a, checkpoint)
    objective = _objective(family, a, corpus_tokenizer)
    folder.will_write(TOKENS)
    token_file = tokens.tokenized(a["corpus"], corpus_tokenizer, folder.folder, a["whole_word_mask"], verbose)
    folder.check_tokens(token_file)
    train, valid = objectives.split(token_file, objective, a["valid_fraction"])
    folder.log(
        f"corpus: {len(token_file):,} tokens ({corpus_tokenizer.source}, vocabulary {corpus_tokenizer.vocab_size:,}), "
        f"{len(valid):,} held out; objective: {objective.kind} LM"
    )
    stages, growths, why = _stages(a, family, start_model, corpus_tokenizer, objective)
    tokens_per_update = a["batch_size"] * a["accum_steps"] * a["seq_len"]
    per_update = [tokens_per_update * s.flops_per_token for s in stages]
    warmup = a["warmup"] if a["warmup"] is not None else default_warmup(a["budget"])
    total = recipe.place(growths, a["budget"], per_update, warmup)
    _check_learned_growth(a, growths, total)
    advice = recipe.advice(stages[-1].parameters, a["budget"] * tokens_per_update, a["budget"] * per_update[-1])
    folder.log(f"compute: {advice}")
    folder.log(f"growth: {why}")
    for stage, growth in zip(stages, [None, *growths]):
        at = "from the start" if growth is None else f"from update {growth.update}"
        folder.log(f"  {stage.describe()}, {at}")
    folder.log(
        f"budget: {a['budget']} updates of the target = {a['budget'] * per_update[-1]:.3g} FLOPs; this run: {total} "
        f"updates, {a['schedule']} schedule, peak lr {a['lr']:g}, warmup {warmup}"
    )
    trainer = Trainer(
        folder, a, objective, train, valid, stages, growths, per_update, total,
        _learning_rate(a, warmup, total, [g.update for g in growths]),
        corpus_tokenizer, verbose,
    )  # fmt: skip
    return PretrainResult(**trainer.run(), recipe=why, advice=advice)


def _check_learned_growth(a, growths, total):
    """The learned depth operator mixes blocks of one width, after a depth growth, before the next growth, and
    spends updates a re-warm would spend on the grown model."""
    steps = a["learned_growth"]
    if not steps:
        return
    if not growths:
        raise ValueError(
            f"--learned-growth {steps} learns a mix of blocks after a depth growth, but this run does not grow "
            f"(--grow {a['grow']}): give a depth growth (such as --grow 0.8:depth=2), or --learned-growth 0."
        )
    if a["after_growth"] == "rewarm" or any(g.arguments.get("rewarm") for g in growths):
        raise ValueError(
            f"--learned-growth {steps} spends the first updates after each growth on the learned operator, which "
            "a re-warm (--after-growth rewarm, or rewarm= in --grow) would spend too: give one or the other."
        )
    bounds = [g.update for g in growths[1:]] + [total]
    for growth, bound in zip(growths, bounds):
        widens = [name for name in ("k", "ffn_factor") if growth.arguments.get(name, 1) != 1]
        if widens:  # a growth that neither widens nor deepens is refused by recipe.parse
            chosen = " (what --grow auto chose for this target)" if a["grow"] == "auto" else ""
            raise ValueError(
                f"--learned-growth learns a mix of blocks after a depth growth; the growth at {growth.fraction:g}"
                f"{chosen} ({recipe.arguments_text(growth.arguments)}) widens ({', '.join(widens)}): give "
                "depth-only growths (such as --grow 0.8:depth=2), or --learned-growth 0."
            )
        if growth.update + steps >= bound:
            raise ValueError(
                f"--learned-growth {steps}: the growth at update {growth.update} has {bound - growth.update} "
                f"updates before {'the next growth' if bound < total else 'the end'}; give fewer, so that one is left."
            )


def _check_numbers(a):
    """Refuse numbers of the wrong kind or range, naming the flag; NumPy scalars become Python numbers
    (run.json keeps them)."""

    def flag(name):
        return "--" + name.replace("_", "-")

    def whole(name, smallest, largest=None):
        value = a[name]
        if (
            isinstance(value, bool)
            or not isinstance(value, numbers.Integral)
            or value < smallest
            or (largest is not None and value > largest)
        ):
            span = f"from {smallest} to {largest}" if largest is not None else f"of at least {smallest}"
            raise ValueError(f"{flag(name)} must be a whole number {span}, got {value!r}.")
        a[name] = int(value)

    def real(name, low, high, high_included):
        value = a[name]
        fits = isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)
        if not (fits and low < value and (value <= high if high_included else value < high)):
            span = "a positive number" if high == math.inf else f"in (0, {high}{']' if high_included else ')'}"
            raise ValueError(f"{flag(name)} must be {span}, got {value!r}.")
        a[name] = float(value)

    for name in ("budget", "seq_len", "batch_size", "accum_steps"):
        whole(name, 1 if name != "seq_len" else 4)
    whole("learned_growth", 0)
    whole("seed", 0, 2**32 - 1)
    for name in ("warmup", "eval_every", "save_every", "build_vocab"):
        if a[name] is not None:
            whole(name, 0 if name == "warmup" else 1)
    for name in ("lr", "learned_growth_lr"):
        real(name, 0, math.inf, False)
    real("decay_fraction", 0, 1, True)
    real("valid_fraction", 0, 1, False)
    if a["schedule"] not in SCHEDULES:
        raise ValueError(f"--schedule must be one of {', '.join(SCHEDULES)}, got {a['schedule']!r}.")
    if a["after_growth"] not in AFTER_GROWTH:
        raise ValueError(f"--after-growth must be one of {', '.join(AFTER_GROWTH)}, got {a['after_growth']!r}.")
    if a["after_growth"] == "rewarm" and a["warmup"] == 0:
        raise ValueError("--after-growth rewarm re-warms over --warmup updates: give --warmup of at least 1.")
    if a["tokenizer"] is not None and a["build_vocab"] is not None:
        raise ValueError("Give --tokenizer or --build-vocab, not both.")
    if a["config"] is None and a["from_checkpoint"] is None:
        raise ValueError("Give the target model: --config config.json (with --model), or --from CHECKPOINT.")
    if a["from_checkpoint"] is not None and not pathlib.Path(a["from_checkpoint"]).is_dir():
        state = "is not a folder" if pathlib.Path(a["from_checkpoint"]).exists() else "does not exist"
        raise ValueError(
            f"--from {a['from_checkpoint']} {state}: give a checkpoint folder (Hugging Face: config.json and "
            "model.safetensors; Google: bert_config.json and bert_model.ckpt.*)."
        )
    recipe.parse(a["grow"])


def _recorded(a):
    """The arguments as run.json keeps them (paths as text, a config file's content)."""
    recorded = dict(a)
    corpus = a["corpus"]
    paths = [corpus] if isinstance(corpus, (str, pathlib.Path)) else corpus
    # Paths as absolute paths: "run/" and "run", or a relative and an absolute path, are one run.
    recorded["corpus"] = [str(pathlib.Path(p).resolve()) for p in paths]
    for name in ("output_dir", "tokenizer", "from_checkpoint"):
        if recorded[name] is not None and not (name == "tokenizer" and recorded[name] == vocabulary.BYTES):
            recorded[name] = str(pathlib.Path(recorded[name]).resolve())
    if recorded["model"] is None and recorded["from_checkpoint"] is None:
        recorded["model"] = "gpt"
    if recorded["config"] is not None and not isinstance(recorded["config"], dict):
        recorded["config"] = read_config_file(recorded["config"])
    if not recorded["learned_growth"]:  # no operator learns: its rate changes nothing, so it does not refuse a resume
        recorded["learned_growth_lr"] = LEARNED_GROWTH_LR
    return json.loads(json.dumps(recorded))


def _precision(precision):
    if precision == "auto":
        gpus = [d for d in keras.distribution.list_devices() if "gpu" in d.lower() or "cuda" in d.lower()]
        return "mixed_bfloat16" if gpus else "float32"
    if precision not in ("float32", "mixed_bfloat16"):
        raise ValueError(f"--precision must be auto, float32 or mixed_bfloat16, got {precision!r}.")
    return precision


@contextlib.contextmanager
def _devices(folder, batch_size):
    """Several devices: the batch split over them, each holding the model
    (`keras.distribution`, with `kwiden.layout_map`'s layouts on a mesh whose
    model axis is 1), on the JAX backend, where Keras distributes."""
    devices = keras.distribution.list_devices()
    if len(devices) < 2:
        yield
        return
    if keras.backend.backend() != "jax":
        folder.log(f"{len(devices)} devices, but Keras distributes on the JAX backend only: training on one "
                   "(KERAS_BACKEND=jax to use them all)")  # fmt: skip
        yield
        return
    if batch_size % len(devices):
        raise ValueError(
            f"--batch-size {batch_size} does not split over the {len(devices)} devices: give a multiple of {len(devices)}."
        )
    mesh = keras.distribution.DeviceMesh((len(devices), 1), ["batch", "model"], devices)
    previous = keras.distribution.distribution()
    keras.distribution.set_distribution(
        keras.distribution.ModelParallel(layout_map=layout_map(mesh), batch_dim_name="batch")
    )
    folder.log(f"devices: {len(devices)}, each batch split over them (keras.distribution)")
    try:
        yield
    finally:
        keras.distribution.set_distribution(previous)


def _tokenizer(a, folder):
    if a["build_vocab"] is not None:
        return _built_vocabulary(a, folder)
    if a["tokenizer"] is not None:
        return vocabulary.load_tokenizer(a["tokenizer"])
    if a["from_checkpoint"] is not None:
        return vocabulary.load_tokenizer(a["from_checkpoint"], flag="--from (its tokenizer)")
    return vocabulary.byte_tokenizer()


def _built_vocabulary(a, folder):
    """--build-vocab's vocabulary: the one this run built before it was stopped (its SHA-256 in run.json),
    else built now."""
    built, recorded = folder.folder / VOCABULARY, folder.record_value("vocabulary")
    if recorded is not None:
        if built.is_file() and not built.is_symlink() and file_digest(built) == recorded:
            return vocabulary.load_tokenizer(built)
        if folder.trained:
            raise ValueError(
                f"{built} is not the vocabulary this run built and trained on ({'changed' if built.exists() else 'gone'}"
                " since): restore it, or give another --output-dir for a new run."
            )
    folder.will_write(VOCABULARY)
    folder.log(f"building a WordPiece vocabulary of {a['build_vocab']} tokens on the corpus")
    lines = (line for path in tokens.corpus_files(a["corpus"], folder.folder) for line in tokens.lines_of(path))
    trained = vocabulary.build_vocabulary(lines, a["build_vocab"], folder.folder)
    folder.record_value("vocabulary", file_digest(built))
    if trained.vocab_size != a["build_vocab"]:
        folder.log(f"the vocabulary has {trained.vocab_size:,} tokens, not {a['build_vocab']:,}: the corpus' "
                   "characters and words gave no more (or its alphabet, more)")  # fmt: skip
    return trained


def _start(a, checkpoint):
    """The loaded model (with `from_checkpoint`) or None, and the family."""
    if checkpoint is None:
        name = a["model"] or "gpt"
        if name not in CAUSAL_FAMILIES + MASKED_FAMILIES:
            raise ValueError(f"--model {name}: pretraining knows {', '.join(CAUSAL_FAMILIES + MASKED_FAMILIES)}.")
        return None, get_family(name)
    probe = build_transformer_model(checkpoint_path=checkpoint, model=a["model"])
    family = family_of(probe)
    if family.name in MASKED_FAMILIES:
        probe = build_transformer_model(checkpoint_path=checkpoint, model=a["model"], with_mlm=True)
    return probe, family


def _objective(family, a, corpus_tokenizer):
    if family.name in CAUSAL_FAMILIES:
        if a["whole_word_mask"]:
            raise ValueError(
                f"--whole-word-mask is for masked LMs (bert, roformer); {family.name} learns the next token."
            )
        return objectives.Objective(objectives.CAUSAL, a["seq_len"], corpus_tokenizer.vocab_size)
    if corpus_tokenizer.mask is None:
        raise ValueError(
            f"The tokenizer {corpus_tokenizer.source} has no [MASK] token, which the masked LM of {family.name} needs."
        )
    return objectives.Objective(
        objectives.MASKED_LM, a["seq_len"], corpus_tokenizer.vocab_size, corpus_tokenizer.mask,
        corpus_tokenizer.cls, corpus_tokenizer.separator, a["whole_word_mask"],
    )  # fmt: skip


def _target_config(a, family, corpus_tokenizer):
    config = dict(a["config"])
    given = config.get("vocab_size")
    if given is None:
        config["vocab_size"] = corpus_tokenizer.vocab_size
    elif given != corpus_tokenizer.vocab_size:
        raise ValueError(
            f"--config says vocab_size {given}, but the tokenizer ({corpus_tokenizer.source}) has "
            f"{corpus_tokenizer.vocab_size:,} tokens: leave vocab_size out of the config to take the tokenizer's, "
            "or give the tokenizer the model was made for."
        )
    if corpus_tokenizer.pad != 0:  # id 0 is a real token: kwiden's models must not take it for padding
        config.setdefault("mask_padding", False)
    complete = family.config(config)
    if complete.get("rotary_base") is None and complete["max_position_embeddings"] < a["seq_len"]:
        raise ValueError(
            f"--seq-len {a['seq_len']} is longer than the config's max_position_embeddings "
            f"{complete['max_position_embeddings']}; give a shorter --seq-len or more positions."
        )
    return complete


def _stages(a, family, start_model, corpus_tokenizer, objective):
    """The models of the run, smallest first (each to be grown into the next),
    the growths between them, and why `auto` chose them."""
    parsed = recipe.parse(a["grow"])
    if start_model is not None:
        if start_model.get_layer("Embedding-Token").input_dim < corpus_tokenizer.vocab_size:
            raise ValueError(f"--from {a['from_checkpoint']}: its vocabulary is smaller than its tokenizer's.")
        if parsed == "auto" and a["config"] is None:
            parsed, why = [], "none: --grow auto with --from needs --config, the target to grow to"
        elif parsed == "auto":
            raise ValueError("--grow auto picks a small model for a target; with --from give the growths explicitly.")
        else:
            why = "none" if parsed == "none" else f"as given: {a['grow']}"
            parsed = [] if parsed == "none" else parsed
        stages = Stage.grown_from(start_model, parsed, family, objective)
        if a["config"] is not None:
            wanted = Stage.built(_target_config(a, family, corpus_tokenizer), family, objective)
            if wanted.weight_shapes != stages[-1].weight_shapes:
                raise ValueError(
                    f"--grow {a['grow']!r} grows {a['from_checkpoint']} to {stages[-1].describe()}, not the "
                    f"--config target {wanted.describe()}: give growths that reach it."
                )
        return stages, parsed, why
    target = _target_config(a, family, corpus_tokenizer)
    _check_memory(target, a)
    if parsed == "auto":
        parsed, why = recipe.auto(target)
    elif parsed == "none":
        parsed, why = [], "none: the target from scratch"
    else:
        why = f"as given: {a['grow']}"
    keras.utils.set_random_seed(a["seed"])
    first = Stage.built(recipe.undone(target, parsed), family, objective)
    stages = Stage.grown_from(first.model, parsed, family, objective)
    if parsed:  # undoing, then growing, must land on the target (without growths the first model is it)
        wanted = Stage.built(target, family, objective)
        if wanted.weight_shapes != stages[-1].weight_shapes:
            raise ValueError(f"--grow {a['grow']!r} does not reach the target {wanted.describe()}.")
    return stages, parsed, why


def _check_memory(target, a):
    """Refuse, before building it, a target whose training would not fit in the memory available now."""
    available = available_memory()
    weights, activations = training_memory(parameters_of(target), target, a["batch_size"], a["seq_len"])
    if available is not None and weights + activations > available:
        raise ValueError(
            f"The target (hidden_size {target['hidden_size']} × {target['num_hidden_layers']} blocks, about "
            f"{parameters_of(target) / 1e9:.3g} billion parameters) needs about {_gb(weights + activations)} to train "
            f"({_gb(weights)} for the weights, their gradients and Adam's moments; {_gb(activations)} for a batch of "
            f"{a['batch_size']} × {a['seq_len']} tokens), and {_gb(available)} is available: give a smaller --config, "
            "or a smaller --batch-size with more --accum-steps (the same update, in smaller pieces)."
        )


def _gb(size):
    return f"{size / 1e9:.3g} GB" if size < 1e12 else f"{size / 1e12:.3g} TB"


def _learning_rate(a, warmup, total, growth_updates):
    schedule = _schedule(a, warmup, total)
    if a["after_growth"] == "continue" or not growth_updates:
        return schedule
    return AfterGrowth(schedule, growth_updates, a["after_growth"], warmup if a["after_growth"] == "rewarm" else 0)


def _schedule(a, warmup, total):
    lr = a["lr"]
    if a["schedule"] == "wsd":
        decay = max(1, round(a["decay_fraction"] * total))
        return WarmupDecay(lr, warmup, total, hold_steps=max(0, total - warmup - decay))
    if a["schedule"] == "cosine":
        return WarmupDecay(lr, warmup, total, decay="cosine", end=0.1 * lr)
    return WarmupDecay(lr, warmup, total, end=lr, hold_steps=total - warmup)


__all__ = ["PretrainResult", "pretrain"]
