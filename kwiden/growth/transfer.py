"""Stage 4 of `grow`: the grown weights into the grown layers."""

from kwiden.depth import zero_output_weights
from kwiden.growth.rebuild import restore_initializers


def transfer(placed, spread=0.0, rng=None):
    """Give every placed layer its source's weights, grown (`spread` splits
    inputs unequally; docs/symmetry.md); a copied block's branch ends start with
    their output weights at zero."""
    for entry in placed:
        restore_initializers(entry.layer, entry.plan.config)
        if entry.plan.weights:
            weights = entry.plan.grown_weights(spread, rng)
            entry.layer.set_weights(zero_output_weights(entry.layer, weights) if entry.zeroed else weights)


def variable_sources(placed):
    """`{big variable path: (small variable path, fresh)}`: where each grown
    variable comes from; the zeroed output weights of new blocks start fresh."""
    sources = {}
    for entry in placed:
        fresh = set(entry.layer.residual_output_weights) if entry.zeroed else set()
        for variable in getattr(entry.layer, "trainable_weights", []):
            small_path = entry.source_name + variable.path[len(entry.layer.name) :]
            sources[variable.path] = (small_path, variable.name in fresh)
    return sources
