"""What a cell prints: the scratch sweep, the runs against scratch, the budget fractions, the runs against their
controls, the FLOPs check; and its row of the protocol table that closes the output."""

import pathlib
import statistics

from common import table

from .plots import plot
from .runs import finished, mean_final, slug

RESULTS = pathlib.Path(__file__).parent.parent / "results"
RUNS = ("run", "final loss", "FLOPs", "FLOPs to target", "first crossing", "in seconds", "reached", "jump", "peak",
        "train s")  # fmt: skip
RUNS_NOTE = (
    "(mean ± standard deviation over seeds; first crossing: the FLOPs at which the validation curve first",
    " reaches that seed's scratch final loss, against scratch's own first arrival, over the seeds that do;",
    " in seconds: the same in training seconds, which vary with the machine's load as FLOPs do not;",
    " jump: the validation loss 100 updates after a growth minus at the growth, the largest of the run's;",
    " peak: the highest evaluation within those 100 updates minus at the growth)",
)
CONTROLS = ("run", "after 100", "control's change", "beyond control", "beyond, by seed", "gap before")
CONTROLS_NOTE = (
    "(after 100: the loss 100 updates after the growth minus at it; the control's change over the",
    " same updates, from the grown run's loss at the growth; beyond: the first minus the second, the",
    " rise the growth caused; gap before: the two runs' largest difference at the last evaluation",
    " before the growth, 0 where they were one run up to it)",
)
SUMMARY = ("cell", "target (params)", "tokens/param (passes)", "scratch, tuned (schedule, lr)", "small alone",
           "grown, equal FLOPs", "saving in FLOPs: smallest fraction reaching scratch", "its saving in seconds",
           "grown − small", "train s/run")  # fmt: skip


def sweep_table(sweep, best, tune_seeds):
    """The scratch runs' final losses by `(schedule, lr)`, `best` marked."""
    rows = [
        (f"{s} lr {r:g}" + (" (best)" if (s, r) == best else ""), final_losses(runs))
        for (s, r), runs in sorted(sweep.items())
    ]
    return table(rows, ("scratch: schedule, peak lr", f"final loss, seed {join(tune_seeds)}"))


def report(args, say, cell, groups, fractions, scratch):
    """The cell's tables: every group against scratch at the full budget, then the budget fractions; its plot."""
    by_seed = {run.seed: run for run in scratch}
    targets = {seed: run.final for seed, run in by_seed.items()}
    check_flops(say, groups, by_seed, cell.target_cost)
    rows = run_rows(groups, by_seed, targets)
    title = (
        f"{args.model.upper()} {cell.hidden}x{cell.layers} on {cell.corpus_name}, {cell.schedule} lr {cell.lr:g}, "
        f"batch {args.batch_size}x{args.seq_len}, budget {cell.budget} updates of the target "
        f"({scratch[0].flops:.3g} FLOPs), seeds {join(args.seeds)}; target: each seed's scratch final loss "
        f"(mean {statistics.mean(targets.values()):.4f})"
    )
    say(f"\n{title}\n")
    say(table(rows, RUNS))
    for line in RUNS_NOTE:
        say(line)
    if fractions:
        mean_target = statistics.mean(targets.values())
        say(
            f"\nbudget fractions: does the grown run's final loss reach scratch's at the full budget ({mean_target:.4f})?\n"
        )
        header = ("run", "fraction", "final loss", "mean reaches", "seeds reaching", "train s")
        say(table(fraction_rows(fractions, targets, mean_target), header))
    if args.plot:
        name = f"{args.results.stem}_{args.model}_{slug(cell.corpus_name)}_{cell.hidden}x{cell.layers}.png"
        path = args.results.with_name(name)
        plot(groups, targets[args.seeds[0]], args.seeds[0], title, path)
        say(f"\nplot: {shown(path)}")


def run_rows(groups, by_seed, targets):
    """A row a group: its final loss, FLOPs, and where it first reached each seed's scratch final loss
    (`targets`), against scratch's own first arrival (`by_seed`: scratch's run of each seed)."""
    references = {seed: run.flops_to_reach(targets[seed]) for seed, run in by_seed.items()}
    clock = {seed: run.flops_to_reach(targets[seed], "seconds") for seed, run in by_seed.items()}
    rows = []
    for label, runs in groups:
        done = [r for r in runs if r.error is None]
        if not done:
            rows.append((label, "failed", "-", "-", "-", "-", "-", "-", "-", "-"))
            continue
        reached = [(r, r.flops_to_reach(targets[r.seed])) for r in done]
        reached = [(r, cost) for r, cost in reached if cost is not None]
        savings = [100 * (1 - cost / references[r.seed]) for r, cost in reached]
        timed = [(r, r.flops_to_reach(targets[r.seed], "seconds")) for r, _ in reached]
        seconds_saved = [100 * (1 - spent / clock[r.seed]) for r, spent in timed if clock[r.seed]]
        rows.append(
            (
                label,
                spread([r.final for r in done], 4),
                f"{statistics.mean(r.flops for r in done):.3g}",
                "-" if not reached else f"{statistics.mean(c for _, c in reached):.3g}",
                "never" if not reached else spread(savings, 1, "%+.1f") + "%",
                "never" if not seconds_saved else spread(seconds_saved, 1, "%+.1f") + "%",
                f"{len(reached)}/{len(runs)}",
                "-" if done[0].jump is None else spread([r.jump for r in done], 3, "%+.3f"),
                "-" if done[0].peak is None else spread([r.peak for r in done], 3, "%+.3f"),
                f"{statistics.mean(r.seconds for r in done):.0f}",
            )
        )
    return rows


def fraction_rows(fractions, targets, mean_target):
    """A row a `(spec, fraction)`: whether its runs reach scratch's final loss at the full budget."""
    rows = []
    for (spec, fraction), runs in fractions.items():
        done = [r for r in runs if r.error is None]
        finals = [r.final for r in done]
        rows.append(
            (
                f"grow {spec}",
                f"{fraction:g}",
                spread(finals, 4) if finals else "failed",
                "yes" if finals and statistics.mean(finals) <= mean_target else "no",
                f"{sum(r.final <= targets[r.seed] for r in done)}/{len(runs)}",
                f"{statistics.mean(r.seconds for r in done):.0f}" if done else "-",
            )
        )
    return rows


def report_controls(say, groups, controls):
    """Each grown group's rise after its first growth against its controls' change over the same updates."""
    rows = []
    for label, runs in groups[1:]:
        done = [run for run in runs if run.error is None]  # the runs that have a control
        pairs = [run.against(control) for run, control in zip(done, controls.get(label, []))
                 if control.error is None]  # fmt: skip
        pairs = [pair for pair in pairs if pair is not None]
        if pairs:
            rows.append((
                label,
                spread([rise for rise, _, _ in pairs], 3, "%+.3f"),
                spread([change for _, change, _ in pairs], 3, "%+.3f"),
                spread([rise - change for rise, change, _ in pairs], 3, "%+.3f"),
                ", ".join(f"{rise - change:+.3f}" for rise, change, _ in pairs),
                f"{max(abs(gap) for _, _, gap in pairs):.1e}",
            ))  # fmt: skip
    if rows:
        say("\nafter the first growth, against its control (the start trained on without growing):\n")
        say(table(rows, CONTROLS))
        for line in CONTROLS_NOTE:
            say(line)


def check_flops(say, groups, scratch_by_seed, target):
    """Every run spent the scratch run's FLOPs, to within one update of the
    target (`target`: the FLOPs of one, counted here); the scratch run's FLOPs are that cost's."""
    problems = []
    for run in scratch_by_seed.values():
        if run.flops != target * run.updates:
            problems.append(
                f"scratch seed {run.seed}: pretrain counts {run.flops:.6g} FLOPs for {run.updates} updates; "
                f"flops_per_token gives {target * run.updates:.6g}"
            )
    worst = 0.0
    for label, runs in groups:
        for run in runs:
            if run.error is not None:
                continue
            gap = (scratch_by_seed[run.seed].flops - run.flops) / target  # in updates of the target
            worst = max(worst, abs(gap))
            if not 0 <= gap < 1:
                problems.append(f"{label}, seed {run.seed}: {run.flops:.6g} FLOPs, {gap:+.3f} target updates off")
    for problem in problems:
        say(f"FLOPS CHECK FAILED: {problem}")
    if not problems:
        say(
            f"\nFLOPs check: every run spent the scratch run's FLOPs to within {worst:.2f} of one target update "
            f"({target:.4g} FLOPs); the scratch runs' FLOPs are flops_per_token's"
        )


def summary(args, cell, groups, fractions, scratch):
    """One row of the protocol table: the first recipe of `--fraction-recipes` against both baselines."""
    finals = {label: [r.final for r in runs if r.error is None] for label, runs in groups}
    scratch_mean = statistics.mean(r.final for r in scratch)
    spec = (args.fraction_recipes or args.recipe_specs or ["none"])[0]
    grown = finals.get(f"grow {spec}", [])
    small = finals[groups[-1][0]]
    reached = [f for (s, f), runs in sorted(fractions.items()) if s == spec and finished(runs)
               and mean_final(runs) <= scratch_mean]  # fmt: skip
    seconds = statistics.mean(r.seconds for runs in (g[1] for g in groups) for r in runs if r.error is None)
    in_seconds = "-"
    if reached:  # the fraction's runs' training seconds against scratch's at the full budget
        runs = [r for r in fractions[spec, min(reached)] if r.error is None]
        spent = statistics.mean(r.seconds for r in runs) / statistics.mean(r.seconds for r in scratch)
        in_seconds = f"{100 * (1 - spent):.0f}%"
    edge = ", edge" if cell.edge and not args.scratch else ""
    return (
        f"{args.model} {cell.corpus_name}",
        f"{cell.hidden}x{cell.layers} ({cell.parameters / 1e3:.0f}k)",
        f"{cell.tokens / cell.parameters:.1f} ({cell.epochs:.1f})",
        f"{spread([r.final for r in scratch], 4)} ({cell.schedule} {cell.lr:g}{edge})",
        spread(small, 4) if small else "failed",
        spread(grown, 4) if grown else "-",
        saving(reached, [f for s, f in fractions if s == spec]),
        in_seconds,
        f"{statistics.mean(grown) - statistics.mean(small):+.4f}" if grown and small else "-",
        f"{seconds:.0f}",
    )


def saving(reached, tried):
    """The protocol's saving: 1 − the smallest fraction reached; "<" 1 − the largest tried where none was; "-" untried."""
    if reached:
        return f"{100 * (1 - min(reached)):.0f}% (at {min(reached):g})"
    return f"<{100 * (1 - max(tried)):.0f}%" if tried else "-"


def final_losses(runs):
    """A tuning row's cell: the final losses' spread, or why a run has none."""
    failed = [r.error for r in runs if r.error is not None]
    if failed:
        return "diverged" if all("diverged" in error for error in failed) else "failed"
    return spread([r.final for r in runs], 4)


def join(values):
    return ",".join(f"{v:g}" if isinstance(v, float) else str(v) for v in values)


def shown(path):
    """`path` relative to the checkout where it is inside it."""
    root = RESULTS.parent.parent
    return path.resolve().relative_to(root) if path.resolve().is_relative_to(root) else path


def spread(values, digits, form=None):
    """`values`' mean ± standard deviation (the value alone where there is one), in `form` (`digits` decimals)."""
    form = form or f"%.{digits}f"
    if len(values) == 1:
        return form % values[0]
    return f"{form % statistics.mean(values)} ± {statistics.stdev(values):.{digits}f}"
