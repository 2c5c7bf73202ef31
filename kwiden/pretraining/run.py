"""`kwiden.pretrain`: pretrain on your own corpus, small first and grown on
the way, at the compute of the target trained from scratch."""

import contextlib
import dataclasses
import json
import pathlib
import types

import keras

from kwiden.files import file_digest
from kwiden.memory import accelerated
from kwiden.models import naming
from kwiden.models.builder import build_transformer_model, checkpoint_family
from kwiden.models.config import read_config_file
from kwiden.models.family import get_family
from kwiden.models.presets import PRESETS, preset
from kwiden.optimizers import WarmupDecay
from kwiden.pretraining import checks, objectives
from kwiden.pretraining.options import PretrainOptions, default_lr, free_on_resume, refuse_untaken
from kwiden.pretraining.outputs import TOKENS, VOCABULARY, RunFolder, trained_length, untrained_positions
from kwiden.pretraining.trainer import Phase, Trainer
from kwiden.text import tokens, vocabulary
from kwiden.training import recipe
from kwiden.training.distribution import layout_map

# Why a grown run makes more updates than its budget names, said where it does.
MORE_UPDATES = " (more than the budget: the stages before a growth cost less an update)"


def default_warmup(budget):
    """The warmup `pretrain` gives a budget without `warmup=`: 5% of its updates."""
    return round(0.05 * budget)


# Arguments an earlier kwiden recorded, for options measured not to pay and taken out, with the value at which
# they changed nothing: a run recorded so resumes; one that used them cannot (`RunFolder.claim`).
REMOVED = dict(after_growth="continue", learned_growth=0, learned_growth_lr=0.01)


@dataclasses.dataclass
class PretrainResult:
    """What `pretrain` made: the final `model` (compiled, trained), its
    `final` folder, the `metrics` rows (as in metrics.jsonl), the growths
    made, the updates and FLOPs spent and the seconds of training they took,
    what `--grow auto` chose and why (`recipe`), and what the budget means for
    the target (`advice`)."""

    model: object
    output_dir: pathlib.Path
    final: pathlib.Path
    metrics: list
    growths: list
    updates: int
    flops: float
    seconds: float
    recipe: str
    advice: str


def pretrain(
    corpus,
    output_dir,
    model=None,
    objective=None,
    config=None,
    tokenizer=None,
    build_vocab=None,
    from_checkpoint=None,
    budget=1000,
    seq_len=128,
    batch_size=32,
    accum_steps=1,
    lr=None,
    warmup=None,
    schedule="wsd",
    decay_fraction=0.2,
    grow="auto",
    valid_fraction=0.01,
    eval_every=None,
    save_every=None,
    seed=0,
    precision="auto",
    verbose=1,
    **objective_options,
):
    """Pretrain a Transformer on `corpus`, growing it on the way.

    The target model (`config`, Hugging Face keys, and `model`, a family
    name; or `from_checkpoint`) gets the compute of `budget` updates from
    scratch, whatever `grow` says: a grown run trains its smaller models
    for more updates, charged at their own FLOPs (`kwiden.training.compute`), so that
    two runs of one budget end at equal compute. Decoders (gpt, llama, qwen2,
    mistral) learn the next token; encoders (bert, roformer) masked tokens.

    Args:
        corpus: text files (.txt, or .gz) or folders of them, tokenized once
            into `output_dir/tokens/`.
        output_dir: the run's folder: `run.json`, `log.txt`, `metrics.jsonl`,
            `loss.png`, `backup/` and `final/` (a Hugging Face folder with the
            tokenizer). Run the same call again to resume from its last backup.
        model: the family of `config` ("gpt" by default; with
            `from_checkpoint`, the checkpoint's): a registered family's name.
        objective: what the model learns: the name of a registered objective
            (`kwiden.pretraining.register_objective`; docs/pretraining.md lists
            kwiden's own); by default the family's (`Family.pretrains_with`).
        config: a dict, a `config.json` path, or a preset's name
            (`kwiden.models.presets.PRESETS`, such as "gpt-demo", the demo's
            GPT, or "bert-base"; its family is `model`'s default then); without
            `vocab_size` it takes the tokenizer's (one that differs from the
            tokenizer's is refused), and what it leaves out the family's defaults.
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
        lr, warmup, schedule, decay_fraction: the peak rate (by default
            1e-3, and 5e-5 with `from_checkpoint`: a pretrained model's), its linear
            warmup (updates; default 5% of `budget`), and what follows:
            "wsd" holds it, then decays linearly to 0 over the last
            `decay_fraction` of the updates; "cosine" decays to a tenth of it;
            "constant" holds it. Counted in updates across growths.
        grow: "auto" (`kwiden.training.recipe.auto`: depth ×2 at 80% of the updates
            for Pre-LN targets of an even number of blocks, else width ×2 at
            80%), "none" (the target from scratch), or growths as
            "0.33:k=2 0.67:depth=2": fractions of the run's updates, each
            with `kwiden.grow`'s arguments. The small model's config is the
            target's with the growths undone.
        valid_fraction: the end of the corpus held out for validation.
        eval_every: updates between evaluations (default: 20 a run).
        save_every: updates between backups (default: none but those at
            growths, at Ctrl-C and at the end).
        precision: "auto" (mixed bfloat16 where a GPU is present), "float32"
            or "mixed_bfloat16".
        **objective_options: the objective's own options (its `Options`;
            `kwiden pretrain --help` and docs/pretraining.md list each
            objective's); another objective's are refused.

    Returns:
        A `PretrainResult`.

    Example (seconds on a CPU):

    >>> import tempfile, kwiden
    >>> from kwiden.text import corpus
    >>> text = tempfile.mktemp(suffix=".txt")
    >>> _ = open(text, "w").write(corpus.load_text()[:20000])
    >>> result = kwiden.pretrain(text, tempfile.mkdtemp(), model="gpt", config=corpus.gpt_config(16, 1, 32),
    ...     budget=20, seq_len=32, batch_size=4, verbose=0)  # doctest: +SKIP
    """
    folder = RunFolder(output_dir, verbose=bool(verbose))
    shared = _recorded(PretrainOptions.checked(
        model=model, objective=objective, config=config, tokenizer=tokenizer, build_vocab=build_vocab,
        from_checkpoint=from_checkpoint, budget=budget, seq_len=seq_len, batch_size=batch_size,
        accum_steps=accum_steps, lr=lr, warmup=warmup, schedule=schedule, decay_fraction=decay_fraction, grow=grow,
        valid_fraction=valid_fraction, eval_every=eval_every, save_every=save_every, seed=seed, precision=precision,
    ))  # fmt: skip
    family, kind = _objective_class(shared)
    kind.check_run(shared)
    own = _absolute_paths(refuse_untaken(objective_options, kind))
    defaulted = ("lr",) if shared.lr is None else ()  # a resume keeps the run's: the default may have changed since
    shared = dataclasses.replace(shared, lr=default_lr(shared) if shared.lr is None else shared.lr)
    corpus = _absolute(corpus)
    # A resume must compute as the run began: another backend or precision ends on other weights.
    computed_on = dict(backend=keras.backend.backend(), precision=_precision(precision))
    record = dict(corpus=corpus, output_dir=str(pathlib.Path(output_dir).resolve()), **dataclasses.asdict(shared),
                  **dataclasses.asdict(own))  # fmt: skip
    kept = folder.claim(json.loads(json.dumps(record)), REMOVED, free=(*free_on_resume(kind), "output_dir"),
                        computed_on=computed_on, defaulted=defaulted, untaken=_untaken(own))  # fmt: skip
    shared = dataclasses.replace(shared, **{name: kept[name] for name in defaulted})
    options = types.SimpleNamespace(**_values(shared), **_values(own))  # every option, as one
    policy = keras.config.dtype_policy()
    try:
        keras.config.set_dtype_policy(computed_on["precision"])
        with _devices(folder, options.batch_size):
            return _pretrain(folder, corpus, options, family, kind, verbose)
    except BaseException:
        folder.release()  # a call that never trained leaves the folder to the corrected one; a run that trained keeps it
        raise
    finally:
        folder.unlock()
        keras.config.set_dtype_policy(policy)


def _values(options):
    """`{name: value}` of an options dataclass, its values as they are (not copied)."""
    return {field.name: getattr(options, field.name) for field in dataclasses.fields(options)}


def _untaken(own):
    """The other objectives' options at their defaults: a run.json an earlier kwiden wrote holds every
    objective's options, those its objective did not take at their defaults (anything else was refused)."""
    taken = {field.name for field in dataclasses.fields(own)}
    return {field.name: field.default for field in objectives.option_fields() if field.name not in taken}


def _pretrain(folder, corpus, options, family, kind, verbose):
    checkpoint = options.from_checkpoint
    corpus_tokenizer = _tokenizer(options, folder, corpus)
    keras.utils.set_random_seed(options.seed)  # before the heads a checkpoint lacks start fresh: a seed repeats a run
    start_model = _start(options, checkpoint, kind)
    objective = _objective(folder, options, kind, family, start_model, corpus_tokenizer)
    target = None if options.config is None else _target_config(options, family, corpus_tokenizer)
    if start_model is None:  # before the corpus is read
        checks.memory(target, options)
    folder.will_write(TOKENS)
    token_file = objective.read(corpus, corpus_tokenizer, folder.folder, verbose)
    folder.check_tokens(token_file)
    for note in objective.notes(token_file):
        folder.log(note)
    train, valid = objective.split(token_file, options.valid_fraction)
    folder.log(
        f"corpus: {len(token_file):,} tokens ({corpus_tokenizer.source}, vocabulary {corpus_tokenizer.vocab_size:,}), "
        f"{len(valid):,} held out; objective: {objective.name}"
    )
    phases, growths, why = _stages(options, family, start_model, corpus_tokenizer, target, objective)
    for note in untrained_positions(phases[0].model, options.seq_len, trained_length(options.seq_len, checkpoint)):
        folder.log(note)
    tokens_per_update = options.batch_size * options.accum_steps * options.seq_len
    per_update = [tokens_per_update * s.flops_per_token for s in phases]
    warmup = options.warmup if options.warmup is not None else default_warmup(options.budget)
    total, growths = recipe.place(growths, options.budget, per_update, warmup)
    advice = recipe.advice(phases[-1].parameters, options.budget * tokens_per_update, options.budget * per_update[-1],
                           continued=checkpoint is not None, tokenizer=corpus_tokenizer.kind,
                           tokens_per_update=tokens_per_update)  # fmt: skip
    folder.log(f"compute: {advice}")
    folder.log(f"growth: {why}")
    for phase, growth in zip(phases, [None, *growths]):
        at = "from the start" if growth is None else f"from update {growth.update}"
        folder.log(f"  {phase.describe()}, {at}")
    folder.log(
        f"budget: {options.budget} updates of the target = {options.budget * per_update[-1]:.3g} FLOPs; this run: {total} "
        f"updates{MORE_UPDATES * (total > options.budget)}, {options.schedule} schedule, peak lr {options.lr:g}, "
        f"warmup {warmup}"
    )
    trainer = Trainer(
        folder, options, objective, train, valid, phases, growths, per_update, total,
        _schedule(options, warmup, total),
        corpus_tokenizer, verbose,
    )  # fmt: skip
    return PretrainResult(**trainer.run(), recipe=why, advice=advice)


def _objective(folder, options, kind, family, start_model, corpus_tokenizer):
    """The run's objective (of class `kind`), made for its tokenizer, family and options, once a resume finds
    what else it began with (its `fingerprint`) unchanged; the heads a `--from` checkpoint lacks, which start
    fresh, logged."""
    for key, now in kind.fingerprint(options).items():
        began = folder.record_value(key)
        if began is None:
            folder.record_value(key, now)
        elif began != now:
            raise ValueError(kind.differs(options, key, began, now))
    objective = kind.made_for(corpus_tokenizer, family, options)
    if getattr(start_model, "fresh_weights", ()):
        folder.log(f"--from {options.from_checkpoint}: it has no weights for the heads {objective.name} trains; they "
                   f"start freshly initialised: {', '.join(start_model.fresh_weights)}")  # fmt: skip
    return objective


def _absolute_paths(options):
    """`options` (a dataclass of `kwiden.arguments.option` fields) with its paths absolute ("run/" and "run", or a
    relative and an absolute path, are one run); "bytes", the byte tokenizer, is no path."""
    changes = {}
    for field in dataclasses.fields(options):
        value = getattr(options, field.name)
        if field.metadata["kind"] in ("path", "checkpoint") and value is not None and value != vocabulary.BYTES:
            changes[field.name] = str(pathlib.Path(value).resolve())
    return dataclasses.replace(options, **changes)


def _recorded(options):
    """`options` as run.json keeps them: paths absolute, a config file's or a preset's content, the model's family
    named."""
    options, changes = _absolute_paths(options), {}
    if isinstance(options.config, str) and options.config in PRESETS and not pathlib.Path(options.config).exists():
        model, config = preset(options.config, options.model)
        options = dataclasses.replace(options, model=model, config=config)
    if options.model is None and options.from_checkpoint is None:
        changes["model"] = "gpt"
    if options.config is not None and not isinstance(options.config, dict):
        changes["config"] = read_config_file(options.config)
    elif options.config is not None:
        changes["config"] = json.loads(json.dumps(options.config))  # NumPy numbers as Python's
    return dataclasses.replace(options, **changes)


def _absolute(corpus):
    paths = [corpus] if isinstance(corpus, (str, pathlib.Path)) else corpus
    return [str(pathlib.Path(p).resolve()) for p in paths]


def _precision(precision):
    if precision == "auto":
        return "mixed_bfloat16" if accelerated() else "float32"
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


def _tokenizer(options, folder, corpus):
    if options.build_vocab is not None:
        return _built_vocabulary(options, folder, corpus)
    if options.tokenizer is not None:
        return vocabulary.load_tokenizer(options.tokenizer)
    if options.from_checkpoint is not None:
        return vocabulary.load_tokenizer(options.from_checkpoint, flag="--from (its tokenizer)")
    return vocabulary.byte_tokenizer()


def _built_vocabulary(options, folder, corpus):
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
    folder.log(f"building a WordPiece vocabulary of {options.build_vocab} tokens on the corpus")
    lines = (line for path in tokens.corpus_files(corpus, folder.folder) for line in tokens.lines_of(path))
    trained = vocabulary.build_vocabulary(lines, options.build_vocab, folder.folder)
    folder.record_value("vocabulary", file_digest(built))
    if trained.vocab_size != options.build_vocab:
        folder.log(f"the vocabulary has {trained.vocab_size:,} tokens, not {options.build_vocab:,}: the corpus' "
                   "characters and words gave no more (or its alphabet, more)")  # fmt: skip
    return trained


def _family_of(options):
    """The target's family: `--model`'s (by default gpt), or the `--from` checkpoint's."""
    if options.from_checkpoint is not None:
        return checkpoint_family(options.from_checkpoint, options.model)
    return get_family(options.model or "gpt")  # a name `PretrainOptions.checked` found registered


def _objective_class(options):
    """`(the target's family, the objective class --objective names, else the family's)`."""
    family = _family_of(options)
    name = options.objective or family.pretrains_with
    if name is None:
        raise ValueError(
            f"--model {family.name}: the family names no pretraining objective; give --objective "
            f"({', '.join(sorted(objectives.registered()))})."
        )
    return family, objectives.get_objective(name)


def _start(options, checkpoint, kind):
    """The loaded model (None without `from_checkpoint`): the checkpoint with the heads its objective trains."""
    if checkpoint is None:
        return None
    if kind.model_arguments:  # the objective's heads: from the checkpoint where it has them, else fresh (a BertModel)
        return build_transformer_model(checkpoint_path=checkpoint, model=options.model, fresh_heads=True,
                                       **kind.model_arguments)  # fmt: skip
    return build_transformer_model(checkpoint_path=checkpoint, model=options.model)


def _target_config(options, family, corpus_tokenizer):
    config = dict(options.config)
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
    if complete.get("rotary_base") is None and complete["max_position_embeddings"] < options.seq_len:
        raise ValueError(
            f"--seq-len {options.seq_len} is longer than the config's max_position_embeddings "
            f"{complete['max_position_embeddings']}; give a shorter --seq-len or more positions."
        )
    return complete


def _stages(options, family, start_model, corpus_tokenizer, target, objective):
    """The models of the run, smallest first (each to be grown into the next),
    the growths between them, and why `auto` chose them; `target`: the
    complete config `--config` gives, or None."""
    parsed = recipe.parse(options.grow)
    if start_model is not None:
        if start_model.get_layer(naming.EMBEDDING_TOKEN).input_dim < corpus_tokenizer.vocab_size:
            raise ValueError(f"--from {options.from_checkpoint}: its vocabulary is smaller than its tokenizer's.")
        if parsed == "auto" and options.config is None:
            parsed, why = [], "none: --grow auto with --from needs --config, the target to grow to"
        elif parsed == "auto":
            raise ValueError("--grow auto picks a small model for a target; with --from give the growths explicitly.")
        else:
            why = "none" if parsed == "none" else f"as given: {options.grow}"
            parsed = [] if parsed == "none" else parsed
        phases = Phase.grown_from(start_model, parsed, family, objective)
        if target is not None:
            wanted = Phase.planned(target, family, objective)
            if wanted.weight_shapes != phases[-1].weight_shapes:
                raise ValueError(
                    f"--grow {options.grow!r} grows {options.from_checkpoint} to {phases[-1].describe()}, not the "
                    f"--config target {wanted.describe()}: give growths that reach it."
                )
        return phases, parsed, why
    if parsed == "auto":
        parsed, why = recipe.auto(target)
    elif parsed == "none":
        parsed, why = [], "none: the target from scratch"
    else:
        why = f"as given: {options.grow}"
    keras.utils.set_random_seed(options.seed)
    first = Phase.built(recipe.undone(target, parsed), family, objective)
    phases = Phase.grown_from(first.model, parsed, family, objective)
    if parsed:  # undoing, then growing, must land on the target (without growths the first model is it)
        wanted = Phase.planned(target, family, objective)
        if wanted.weight_shapes != phases[-1].weight_shapes:
            raise ValueError(f"--grow {options.grow!r} does not reach the target {wanted.describe()}.")
    return phases, parsed, why


def _schedule(options, warmup, total):
    lr = options.lr
    if options.schedule == "wsd":
        decay = max(1, round(options.decay_fraction * total))
        return WarmupDecay(lr, warmup, total, hold_steps=max(0, total - warmup - decay))
    if options.schedule == "cosine":
        return WarmupDecay(lr, warmup, total, decay="cosine", end=0.1 * lr)
    return WarmupDecay(lr, warmup, total, end=lr, hold_steps=total - warmup)


__all__ = ["PretrainResult", "pretrain"]
