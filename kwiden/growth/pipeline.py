"""`kwiden.grow`: a functional model `k` times wider (and deeper), same function.

`grow` is a pipeline of named stages, each in its own module:

1. `options.resolve`: the arguments, checked, as one `GrowthOptions`;
2. `plan.plan_growth`: the `GrowthPlan` (every call's grown config, output
   space and weight axes; the blocks to copy), computed once;
3. `rebuild.rebuild`: the grown functional model, laid along the small one;
4. `transfer.transfer`: the grown weights into it;
5. `optimizer.grow_optimizer`: the optimizer's state grown with the weights;
6. `check.check`: the grown model measured against the small one.
"""

import typing

import keras

from kwiden.growth import hub
from kwiden.growth.arguments import DEFAULT_RELAX
from kwiden.growth.check import check as check_growth
from kwiden.growth.check import needs_check
from kwiden.growth.expansion import Growth, GrowthError, growth_scale
from kwiden.growth.graph import is_keras_hub
from kwiden.growth.optimizer import grow_optimizer, variable_sources
from kwiden.growth.options import GrowthOptions, resolve
from kwiden.growth.plan import GrowthPlan, GrowthRecord, keep_record, plan_growth
from kwiden.growth.rebuild import rebuild
from kwiden.growth.transfer import transfer
from kwiden.growth.walk import walk
from kwiden.keras_internals import is_functional


class GrowthResult(typing.NamedTuple):
    """What `grow(..., optimizer=...)` returns: unpacks as `(model, optimizer)`."""

    model: object
    optimizer: object

    @property
    def report(self):
        """The `VerifyReport`, when the grown model was measured."""
        return getattr(self.model, "growth_report", None)

    @property
    def record(self):
        """The `GrowthRecord`: how the model was grown."""
        return getattr(self.model, "growth_record", None)


def grow(
    model,
    k=None,
    check=None,
    rtol=None,
    ffn_factor=None,
    heads="size",
    rope="exact",
    spread=2.0,
    seed=None,
    optimizer=None,
    scale_learning_rates=None,
    relax_learning_rates=DEFAULT_RELAX,
    optimizer_state="grown_v",
    rewarm=0,
    depth=None,
    new_blocks="identity",
    num_layers=None,
    allow_approximate=False,
    hidden_size=None,
    intermediate_size=None,
):
    """Return a new functional model `k` times wider computing the same function.

    Hidden size, FFN size, head size (or, with `heads="count"`, the number of
    heads) and embedding widths are multiplied by `k`; the number of layers,
    the vocabulary and the model inputs stay. The source model is not modified; `k=1` returns an equal copy.

    Args:
        model: a functional `keras.Model` built from kwiden layers and Keras
            glue (Input, Dropout, Add, Activation, Multiply, Concatenate, and a
            plain `Dense` head whose output width stays); or a KerasHub
            `BertBackbone`, `RobertaBackbone`, `GPT2Backbone`, `GPT2CausalLM`
            or `BertMaskedLM`, returned as the same class (`kwiden.growth.hub`).
        k: the width factor: an integer, or a `fractions.Fraction` (4/3
            grows hidden 384 to 512; docs/non-integer.md). Under unequal copy counts
            RMSNorm models stay exact; LayerNorm models need
            `allow_approximate=True`, and attention must grow its number of
            heads (`heads="count"`). Default with `depth` or `num_layers`
            given: 1 (deeper only).
        check: optional model inputs; if given, the grown model is compared
            with `model` on them (`kwiden.verify`) and a `GrowthError` carrying
            the report is raised if it departs by more than `rtol`.
        rtol: the relative error `check` accepts; by default float32
            rounding, 1e-5, or 1e-2 / 5e-2 for models computing in float16 /
            bfloat16 (the small and the big model round differently).
        ffn_factor: the feed-forward width's own factor (default `k`).
        heads: `"size"` grows each attention head's size by `k` (docs/widening.md#attention-wider-heads);
            `"count"` grows the number of heads instead (docs/widening.md#attention-more-heads).
        rope: rotary attention with `heads="size"`: `"exact"` keeps the small
            model's frequencies, copied pair-wise (exact); `"standard"` gives
            the grown heads the standard schedule of their size, as the seed
            article does (approximate: needs `allow_approximate=True`).
        spread: exact symmetry breaking (docs/symmetry.md): every linear map spreads
            each input over its copies with unequal weights `(1 + spread·u)/k`,
            so the copies of a neuron train apart from the first step while the
            grown model still computes the same function. Default 2: 3
            trained a little better after an early growth, but made the loss
            rise after a late one at a high rate (docs/growth-that-pays.md#no-spike);
            0 gives plain copies; at most 100 (beyond, the splits cancel in
            float32).
        seed: seed of the random splits (`spread > 0`); None draws them
            afresh each call.
        optimizer: the small model's optimizer. If given, `grow` returns
            `(big, big_optimizer)`: an optimizer of the same class, its step
            count (and so its learning-rate schedule) carried on and its slots
            (momenta, second moments) grown with the weights as
            `optimizer_state` says (docs/optimizer-state.md), ready for
            `big.compile(big_optimizer, loss)`.
        scale_learning_rates: with `optimizer` (kwiden's optimizers), give
            each tensor its growth scale as a learning-rate multiplier, as μP
            scales rates with width (docs/optimizer-state.md#learning-rate-multipliers):
            with plain copies, `optimizer_state="grown"` and
            `relax_learning_rates=0` training then follows the small model's
            trajectory exactly. Without it, every
            weight matrix whose input widened moves the function twice as far
            per step at ×2, and at a high rate the loss rises after the
            growth. None (default): on where each tensor has one multiplier,
            off under a non-integer factor (384 → 512), where no one
            multiplier fits a tensor; True refuses such a growth. Keras' own
            optimizers have one rate for every tensor: None gives them one
            rate, True is refused.
        relax_learning_rates: the updates over which those multipliers then
            move linearly to 1, one rate for every tensor, which trained
            better than holding them (docs/growth-that-pays.md#no-spike);
            default 1000, 1/(1 − β₂) for Adam's default β₂, the updates over
            which its second moments renew; 0 holds them for good, as
            `--grow auto` does after its late growth. With
            `scale_learning_rates=False` there is nothing to relax, and
            another length is refused.
        optimizer_state: what the grown slots hold: `"grown_v"` (default) the
            grown second moments everywhere (a new block's zeroed output
            weights take those of the weights they copy) and zero first
            moments, so that the first steps after growth start small and the
            loss does not jump (docs/growth-that-pays.md#no-spike); `"grown"`
            both moments grown; `"source"` the grown moments on each tensor's
            original slice and zeros on the new copies and copied blocks;
            `"zero"` zeros (docs/optimizer-state.md#asymmetric-state).
        rewarm: with kwiden's optimizers, the number of updates over which the
            new copies' learning rate climbs from 0 to the full rate while the
            original slice trains at full rate (per-slice multipliers,
            docs/optimizer-state.md#per-slice-multipliers); 0 (default): none.
        depth, num_layers: depth growth (docs/depth.md): `depth=2` doubles the
            number of Transformer blocks, `num_layers=N` makes it N. Each new
            block is a copy of the block before it whose residual branches end
            in zeros: exact for Pre-LN blocks (GPT); for Post-LN blocks (BERT)
            only approximate, allowed with `allow_approximate=True` (`check`
            then measures by how much). Blocks are found by the residual
            merges on the stream; block layers are renumbered (`kwiden.models.naming`).
        new_blocks: `"identity"` (default) new blocks whose residual branches
            end in zeros, as above; `"copy"` whole copies of the block, their
            weights and optimizer state all kept, as G_stack stacks them
            (arXiv 2405.15319); `"fresh"` newly initialised blocks, drawn
            from each layer's initializers seeded by `seed`, as Bu's
            progressive training adds them (arXiv 2511.04981). Either
            changes the function, so it needs `allow_approximate=True`
            (measured in docs/growth-that-pays.md).
        allow_approximate: accept a growth that is not exact (Post-LN depth,
            `rope="standard"`, LayerNorm under a non-integer factor). When
            such a growth happens, the grown model is compared with `model`
            (on `check`, or on random inputs) and the `VerifyReport` is kept
            as `big.growth_report`, with a warning if it departs beyond `rtol`.
        hidden_size, intermediate_size: target sizes instead of `k` and
            `ffn_factor`: the factor is the target over the model's size.

    Returns:
        The grown `keras.Model` (same layer names, dtype policies and trainable
        flags), or, when `optimizer` is given, a `GrowthResult`: a
        `(model, optimizer)` pair that also has `.report` and `.record`. The
        grown model keeps its `GrowthRecord` as `big.growth_record` (what
        `verify` reads) and, when it was compared with
        `model`, the `VerifyReport` as `big.growth_report`.

    Example:

    >>> import kwiden, numpy as np
    >>> small = kwiden.build_transformer_model(
    ...     dict(vocab_size=50, hidden_size=8, num_hidden_layers=1,
    ...          num_attention_heads=2), model="gpt")
    >>> big = kwiden.grow(small, 2, check=np.array([[5, 6, 7]]))
    >>> big.get_layer("Embedding-Token").output_dim
    16
    """
    options = resolve(
        model, k=k, check=check, rtol=rtol, ffn_factor=ffn_factor, heads=heads, rope=rope, spread=spread, seed=seed,
        optimizer=optimizer, scale_learning_rates=scale_learning_rates, relax_learning_rates=relax_learning_rates,
        optimizer_state=optimizer_state,
        rewarm=rewarm, depth=depth, new_blocks=new_blocks, num_layers=num_layers, allow_approximate=allow_approximate,
        hidden_size=hidden_size, intermediate_size=intermediate_size,
    )  # fmt: skip
    if is_keras_hub(model):
        return _grow_keras_hub(model, options)
    _require_functional(model)
    plan = plan_growth(model, options)
    big, placed = rebuild(plan)
    if options.new_blocks != "identity":  # G_stack's whole copies, or newly initialised blocks
        for entry in placed:
            entry.zeroed = False
            entry.fresh = entry.copy and options.new_blocks == "fresh"
    transfer(placed, options.spread, options.entropy)
    keep_record(big, plan.record())
    if needs_check(options, plan.approximations):
        check_growth(model, big, options, plan, plan.approximations)
    if options.optimizer is None:
        return big
    axes = plan.walk.weight_axes()
    grown = grow_optimizer(
        options.optimizer, model, big, axes, options.scale_learning_rates, variable_sources(placed),
        options.optimizer_state, options.rewarm, options.relax_learning_rates, options.spread,
    )  # fmt: skip
    return GrowthResult(big, grown)


def grown_skeleton(model, **arguments):
    """The model `grow(model, **arguments)` would return, its weights shaped
    but never allocated (`keras.StatelessScope`), after the same checks and
    refusals: what a schedule of growths is planned on before any memory is
    spent. A skeleton grows again into the next. Functional models only; the
    optimizer's arguments are `grow`'s to use, not a skeleton's.

    >>> import kwiden
    >>> small = kwiden.build_transformer_model(
    ...     dict(vocab_size=50, hidden_size=8, num_hidden_layers=1,
    ...          num_attention_heads=2), model="gpt")
    >>> grown_skeleton(grown_skeleton(small, k=2), depth=2).count_params()
    15584
    """
    _require_functional(model)
    with keras.StatelessScope(initialize_variables=False):
        plan = plan_growth(model, resolve(model, **arguments), check_memory=False)
        big, _ = rebuild(plan)
    return big


def _grow_keras_hub(model, options):
    """KerasHub models: the same class, wider (`kwiden.growth.hub`); width only."""
    hub.check_options(optimizer=options.optimizer, depth=options.depth, num_layers=options.num_layers)
    big = hub.grow_keras_hub(model, options.growth, options.spread, options.rng())
    if needs_check(options, options.growth.approximations):
        check_growth(model, big, options, approximations=options.growth.approximations)
    return big


def _require_functional(model):
    if not is_functional(model):
        raise GrowthError(
            f"kwiden.grow needs a functional model (keras.Model(inputs, outputs)); "
            f"'{getattr(model, 'name', model)}' is a {type(model).__name__}, whose graph "
            "cannot be walked. Rebuild it functionally (kwiden.build_transformer_model "
            "does) and copy its weights over."
        )


def weight_axes(model, k):
    """`{variable path: axes}`: how each weight of `model` grows by `k` (an
    integer or a `Growth`)."""
    return walk(model, k).weight_axes()


def growth_scales(model, k, ffn_factor=None, heads="size"):
    """`{variable path: c}`: each grown tensor is its source copied and
    multiplied by `c` (equal splits; docs/optimizer-state.md#learning-rate-multipliers)."""
    growth = Growth(k, ffn_factor, heads)
    return {path: growth_scale(axes) for path, axes in weight_axes(model, growth).items()}


__all__ = [
    "GrowthOptions",
    "GrowthPlan",
    "GrowthRecord",
    "GrowthResult",
    "grow",
    "grown_skeleton",
    "growth_scales",
    "weight_axes",
]
