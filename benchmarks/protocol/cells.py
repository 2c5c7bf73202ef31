"""One cell of the protocol table (a model size on a corpus): the target's budget, the scratch baseline tuned,
then every other run started at once where it waits on no other's result, and all collected in the report's
order."""

import dataclasses

import kwiden
from kwiden.models import get_family
from kwiden.pretraining.run import default_warmup
from kwiden.text import corpus
from kwiden.text.vocabulary import byte_tokenizer
from kwiden.training import recipe
from kwiden.training.compute import flops_per_token

from .arms import bert_spec, pretrain_options
from .corpora import text_bytes
from .runs import Run, finished, mean_final, train
from .tables import join, report, report_controls, summary, sweep_table
from .tuning import best_pair, first_fractions, fractions_to_try, rates_beyond_the_edges

VOCAB = byte_tokenizer().vocab_size


@dataclasses.dataclass
class Cell:
    """What a cell's runs share; the baseline's schedule, rate and cost once chosen."""

    paths: list
    corpus_name: str
    hidden: int
    layers: int
    config: dict  # the target's, but its vocabulary (the tokenizer's: bytes)
    parameters: int
    budget: int  # updates of the target from scratch
    valid_fraction: float
    tokens: int  # the budget's
    epochs: float  # passes over the training text
    small_config: dict  # the model `--grow auto` starts from
    schedule: str = None
    lr: float = None
    edge: bool = False  # the baseline's rate at an edge of those tried
    target_cost: float = None  # FLOPs of one update of the target

    @property
    def scratch_label(self):
        return f"scratch, {self.schedule} lr {self.lr:g}"


@dataclasses.dataclass
class Pending:
    """The futures of a cell's runs that wait on no other run's result, started together."""

    rest: list  # scratch on the seeds that did not tune it
    grown: dict  # {spec: futures}
    fractions: dict  # {(spec, fraction): futures}
    starts: list  # [(label, futures)]: each recipe's own start alone
    small: tuple  # (label, futures): auto's start alone


class Bench:
    """Every cell's runs, at most `--jobs` at once (`pool`), reported through `say`; the protocol table's rows
    in `summaries`."""

    def __init__(self, args, say, pool):
        self.args, self.say, self.pool = args, say, pool
        self.summaries = []

    def cost(self, config):
        """FLOPs of one update of the model of `config`, counted here apart from pretrain."""
        model = self.build(config)
        return flops_per_token(model, self.args.seq_len) * self.args.batch_size * self.args.seq_len

    def build(self, config):
        mlm = {"with_mlm": True} if self.args.model == "bert" else {}
        return kwiden.build_transformer_model(dict(config, vocab_size=VOCAB), model=self.args.model, **mlm)

    def start(self, calls):
        """Start each of `calls` (`train`'s arguments but `args`), at most `--jobs` at once; their futures."""
        return [self.pool.submit(train, self.args, *call) for call in calls]

    def collect(self, futures):
        """The runs of `futures`, in order, each reported as it is collected."""
        runs = []
        for future in futures:
            fields, lines = future.result()
            for line in lines:
                self.say(line)
            runs.append(Run(**fields))
        return runs

    def call(self, cell, label, recipe, schedule, lr, seed, run_config=None, run_budget=None, **more):
        """`train`'s arguments (but `args`) for a run of `cell`: the target on the cell's budget unless said."""
        grow, options = pretrain_options(recipe)
        grow = bert_spec(grow) if self.args.model == "bert" else grow
        run_config = cell.config if run_config is None else run_config
        run_budget = cell.budget if run_budget is None else run_budget
        return (cell.paths, cell.corpus_name, label, run_config, grow, run_budget, schedule, lr, seed,
                cell.valid_fraction, {**options, **more})  # fmt: skip

    def section(self, paths, corpus_name, description, hidden, layers):
        """Every run of one cell, its tables, and its row of the protocol table."""
        cell = self.plan(paths, corpus_name, description, hidden, layers)
        baseline = self.baseline(cell)
        if baseline is None:
            return
        sweep, tuned = baseline
        pending = self.start_cell(cell, tuned)
        scratch = sweep.get((cell.schedule, cell.lr), []) + self.collect(pending.rest)
        if not finished(scratch):
            self.say("a scratch run failed: nothing to compare")
            return
        self.report_sweep(cell, sweep, scratch)
        groups, controls, fractions = self.collect_cell(cell, pending, scratch)
        report(self.args, self.say, cell, groups, fractions, scratch)
        if controls:
            report_controls(self.say, groups, controls)
        self.summaries.append(summary(self.args, cell, groups, fractions, scratch))

    def plan(self, paths, corpus_name, description, hidden, layers):
        """The cell of `hidden`x`layers` on the corpus at `paths`: its budget and held-out text, said."""
        args = self.args
        config = corpus.gpt_config(hidden, layers, args.seq_len)
        config.pop("vocab_size")  # the tokenizer's: bytes
        parameters = self.build(config).count_params()
        tokens_per_update = args.batch_size * args.seq_len
        if args.tokens_per_parameter:
            budget = max(args.evaluations, round(args.tokens_per_parameter * parameters / tokens_per_update))
        else:
            budget = args.budget
        _, why = recipe.auto(get_family(args.model).config(dict(config, vocab_size=VOCAB)))
        small_config = self.start_of(config, "auto")
        corpus_tokens = text_bytes(paths)
        valid_fraction = min(args.valid_fraction, args.valid_tokens / corpus_tokens)
        tokens = budget * tokens_per_update
        epochs = tokens / (corpus_tokens * (1 - valid_fraction))
        self.say(f"\n=== {args.model} {hidden}x{layers} on {description}\n")
        self.say(
            f"target {parameters:,} parameters; budget {budget} updates of {tokens_per_update} tokens = {tokens:,} "
            f"tokens = {tokens / parameters:.1f} tokens per parameter, {epochs:.1f} passes over the training text; "
            f"{valid_fraction:.3g} of the corpus held out; auto: {why}"
        )
        return Cell(paths, corpus_name, hidden, layers, config, parameters, budget, valid_fraction, tokens, epochs,
                    small_config)  # fmt: skip

    def baseline(self, cell):
        """`(the scratch sweep, the seeds it tuned on)`, the best pair set on `cell` (`--scratch`'s without a
        sweep); None where no scratch run finished."""
        tune_seeds = self.args.seeds[: self.args.tune_seeds]
        self.say("scratch runs (the rates tuned on seed" + "s" * (len(tune_seeds) > 1) + f" {join(tune_seeds)}):")
        if self.args.scratch:  # tuned before: its seeds start with every other run
            (cell.schedule, cell.lr), sweep, tuned = self.args.scratch, {}, []
            return sweep, tuned
        sweep = self.tune(cell, tune_seeds)
        best = best_pair(sweep)
        if best is None:
            self.say("no scratch run finished: nothing to compare")
            return None
        cell.schedule, cell.lr = best
        return sweep, tune_seeds

    def tune(self, cell, seeds):
        """`{(schedule, lr): [runs]}` over `--schedules` × `--lrs` on `seeds`,
        each schedule's range widened (×2 or ÷2, at most `--widen` times) while
        its best rate sits at an edge of the rates tried. Each round's runs start at once."""
        sweep = {}

        def try_rates(pairs):
            futures = {pair: self.start([self.call(cell, f"scratch, {pair[0]} lr {pair[1]:g}", "none", *pair, s)
                                         for s in seeds]) for pair in pairs}  # fmt: skip
            sweep.update({pair: self.collect(runs) for pair, runs in futures.items()})

        try_rates([(schedule, lr) for schedule in self.args.schedules for lr in sorted(self.args.lrs)])
        widening = list(self.args.schedules)
        for _ in range(self.args.widen):
            more = rates_beyond_the_edges(sweep, widening)
            for schedule, best, lr in more:
                self.say(f"  ({schedule}: the best rate {best:g} is at the edge of those tried; trying {lr:g})")
            if not more:
                break
            widening = [schedule for schedule, _, _ in more]
            try_rates([(schedule, lr) for schedule, _, lr in more])
        return sweep

    def start_cell(self, cell, tuned):
        """Start every run of `cell` that waits on no other run's result (`tuned`: the seeds scratch has run on);
        they are collected in the report's order."""
        args, at = self.args, (cell.schedule, cell.lr)
        cell.target_cost = self.cost(cell.config)
        small_budget = int(cell.budget * cell.target_cost // self.cost(cell.small_config))
        small_label = f"small {cell.small_config['hidden_size']}x{cell.small_config['num_hidden_layers']} alone"
        rest = self.start([self.call(cell, cell.scratch_label, "none", *at, s) for s in args.seeds[len(tuned) :]])
        grown = {spec: self.start([self.call(cell, f"grow {spec}", spec, *at, s) for s in args.seeds])
                 for spec in args.recipe_specs}  # fmt: skip
        fractions = {(spec, f): self.start_fraction(cell, spec, f)
                     for spec in args.fraction_recipes for f in first_fractions(args.fractions, args.jobs)}  # fmt: skip
        starts = self.start_starts(cell) if args.starts_alone else []  # before the small model alone, the last group
        small = self.start([self.call(cell, small_label, "none", *at, s, cell.small_config, small_budget)
                            for s in args.seeds])  # fmt: skip
        return Pending(rest, grown, fractions, starts, (small_label, small))

    def start_fraction(self, cell, spec, fraction):
        label = f"grow {spec} on {fraction:g} of the budget"
        part = max(1, round(fraction * cell.budget))
        return self.start([self.call(cell, label, spec, cell.schedule, cell.lr, s, run_budget=part)
                           for s in self.args.seeds])  # fmt: skip

    def start_starts(self, cell):
        """`[(label, futures)]`: the start of each `--grow` recipe (where it is not auto's) alone on the budget's
        FLOPs."""
        started = []
        for start in self.starts(cell.config, cell.small_config):
            label = f"start {start['hidden_size']}x{start['num_hidden_layers']} alone"
            start_budget = int(cell.budget * cell.target_cost // self.cost(start))
            calls = [self.call(cell, label, "none", cell.schedule, cell.lr, s, start, start_budget)
                     for s in self.args.seeds]  # fmt: skip
            started.append((label, self.start(calls)))
        return started

    def report_sweep(self, cell, sweep, scratch):
        """The scratch sweep's table, with a warning where the best rate is at an edge of those tried."""
        tune_seeds = self.args.seeds[: self.args.tune_seeds]
        sweep.setdefault((cell.schedule, cell.lr), scratch[: len(tune_seeds)])
        self.say("\n" + sweep_table(sweep, (cell.schedule, cell.lr), tune_seeds) + "\n")
        tried = sorted(r for s, r in sweep if s == cell.schedule)  # a rate that diverged was tried, and lost
        cell.edge = not tried[0] < cell.lr < tried[-1]
        if cell.edge and not self.args.scratch:
            self.say(
                f"WARNING: the baseline's best rate {cell.lr:g} is at the edge of those tried ({join(tried)}): widen --lrs"
            )

    def collect_cell(self, cell, pending, scratch):
        """`(groups, controls, fractions)`: `[(label, runs)]` in the report's order (scratch first, auto's start
        alone last), each grown group's controls (with `--controls`), `{(spec, fraction): runs}`."""
        self.say(f"grown runs at {cell.schedule} lr {cell.lr:g}:")
        groups = [(cell.scratch_label, scratch)]
        groups += [(f"grow {spec}", self.collect(futures)) for spec, futures in pending.grown.items()]
        controls = self.controls(cell, groups) if self.args.controls else {}
        fractions = self.budget_fractions(cell, pending.fractions, mean_final(scratch))
        groups += [(label, self.collect(futures)) for label, futures in pending.starts]
        small_label, small = pending.small
        groups.append((small_label, self.collect(small)))
        return groups, controls, fractions

    def controls(self, cell, groups):
        """`{label: runs}`: each grown run's control."""
        self.say("controls: each grown run's start trained on without growing, on the same updates and schedule:")
        started = {
            label: self.start([self.control(cell, label.removeprefix("grow "), run) for run in runs
                               if run.error is None])
            for label, runs in groups[1:]
        }  # fmt: skip
        return {label: self.collect(futures) for label, futures in started.items()}

    def control(self, cell, spec, run):
        """`run`'s control: the model `spec` starts from, without growing, for `run`'s updates, with its warmup
        and evaluations (which pretrain sets from the budget), so the two are identical up to the first growth."""
        budget = cell.budget
        return self.call(cell, f"control of grow {spec}", "none", cell.schedule, cell.lr, run.seed,
                         self.start_of(cell.config, spec), run.updates, warmup=default_warmup(budget),
                         eval_every=max(1, budget // self.args.evaluations))  # fmt: skip

    def budget_fractions(self, cell, pending, scratch_mean):
        """`{(spec, fraction): runs}`: each of `--fraction-recipes` at the budget fractions `fractions_to_try`
        picks, those `pending` started already collected, the others started as picked."""
        fractions = {}
        for spec in self.args.fraction_recipes:

            def reaches(fraction, spec=spec):
                runs = fractions[spec, fraction]
                return finished(runs) and mean_final(runs) <= scratch_mean

            for fraction in fractions_to_try(self.args.fractions, self.args.jobs, reaches):
                futures = pending.pop((spec, fraction), None) or self.start_fraction(cell, spec, fraction)
                fractions[spec, fraction] = self.collect(futures)
        return fractions

    def start_of(self, config, spec):
        """The config (`config`'s keys) of the model the `--grow` spec `spec` starts from."""
        family_config = get_family(self.args.model).config(dict(config, vocab_size=VOCAB))
        growths = recipe.parse(pretrain_options(spec)[0])
        growths = recipe.auto(family_config)[0] if growths == "auto" else growths
        start = recipe.undone(family_config, growths)
        return {key: start[key] for key in config}

    def starts(self, config, small_config):
        """The starts of `--grow`'s recipes other than `auto`'s (`small_config`, run anyway), each once."""
        found = []
        for start in (self.start_of(config, spec) for spec in self.args.recipe_specs):
            if start != small_config and start != config and start not in found:
                found.append(start)
        return found
