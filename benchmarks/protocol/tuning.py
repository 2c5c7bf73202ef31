"""The protocol's choices between rounds of runs: the scratch rates to try next, while a schedule's best sits at
an edge of those tried, and the budget fractions to run, bisected for the smallest that reaches scratch."""

from .runs import finished, mean_final


def best_pair(sweep):
    """The `(schedule, lr)` of `sweep` (`{(schedule, lr): [runs]}`) whose runs all finished with the lowest mean
    final loss; None where none finished."""
    done = {key: runs for key, runs in sweep.items() if finished(runs)}
    return min(done, key=lambda key: mean_final(done[key])) if done else None


def rates_beyond_the_edges(sweep, schedules):
    """`[(schedule, its best rate, the rate to try next)]`: for each of `schedules` whose best rate in `sweep` is
    at an edge of those tried, the next rate beyond that edge (×2 or ÷2)."""
    more = []
    for schedule in schedules:
        tried = sorted(lr for s, lr in sweep if s == schedule)
        done = {lr: runs for (s, lr), runs in sweep.items() if s == schedule and finished(runs)}
        if not done:
            continue
        best = min(done, key=lambda lr: mean_final(done[lr]))
        if tried[0] < best < tried[-1]:
            continue
        more.append((schedule, best, best * 2 if best == tried[-1] else best / 2))
    return more


def first_fractions(fractions, jobs):
    """The fractions `fractions_to_try` runs whatever the results: the middle one, or all with `--jobs`."""
    ordered = sorted(fractions)
    middle = (len(ordered) - 1) // 2  # the bisection's first; none of none
    return ordered if jobs > 1 else ordered[middle : middle + 1]


def fractions_to_try(fractions, jobs, reaches):
    """The budget fractions to run, one at a time: bisecting `fractions`
    (sorted) for the smallest whose runs reach scratch (`reaches(fraction)`, asked once the runs of the fraction
    just yielded are in); with `--jobs`, all of them (started at once, bisecting would only wait)."""
    if jobs > 1:
        yield from first_fractions(fractions, jobs)
        return
    low, high = 0, len(fractions) - 1
    while low <= high:
        middle = (low + high) // 2
        fraction = sorted(fractions)[middle]
        yield fraction
        if reaches(fraction):
            high = middle - 1
        else:
            low = middle + 1
