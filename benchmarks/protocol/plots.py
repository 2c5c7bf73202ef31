"""A cell's validation curves against training FLOPs, one seed's, with scratch's final loss marked."""

from kwiden.files import replaced_atomically


def plot(groups, target, seed, title, path):
    """Plot each group's run of `seed`: validation loss against FLOPs, `target` marked; saved to `path`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    for label, runs in groups:
        run = next((r for r in runs if r.seed == seed and r.error is None), None)
        if run is not None:
            ax.plot([m["flops"] for m in run.metrics], [m["valid_loss"] for m in run.metrics], label=label)
    ax.axhline(target, color="grey", linestyle=":", label="scratch's final loss")
    ax.set(
        xlabel="training FLOPs (small models charged)",
        ylabel="validation loss",
        title=f"{title}; curves: seed {seed}".replace("; ", "\n"),
    )
    low = min(m["valid_loss"] for _, runs in groups for r in runs if r.error is None for m in r.metrics)
    ax.set_ylim(low - 0.05, target + 0.6)
    ax.title.set_fontsize(8)
    ax.legend(fontsize=6)
    path.parent.mkdir(exist_ok=True, parents=True)
    with replaced_atomically(path) as temporary:
        fig.savefig(temporary, dpi=120)
    plt.close(fig)
