"""Stage 4 of `grow`: the grown weights into the grown layers."""

from kwiden.depth import zero_output_weights


def transfer(placed, spread=0.0, rng=None):
    """Give every placed layer its source's weights, grown (`spread` splits
    inputs unequally; docs/symmetry.md); a copied block's branch ends start with
    their output weights at zero."""
    for entry in placed:
        if entry.plan.weights:
            weights = entry.plan.grown_weights(spread, rng)
            entry.layer.set_weights(zero_output_weights(entry.layer, weights) if entry.zeroed else weights)
