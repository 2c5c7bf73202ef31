"""Compare a grown model with its source, output by output and layer by layer."""

import collections
import dataclasses
import fractions

import keras
import numpy as np
from keras import tree

from kwiden.arguments import is_count
from kwiden.growth.depth import copies_per_block, new_indices, renamed
from kwiden.growth.expansion import Growth, GrowthError, as_factor
from kwiden.growth.graph import is_keras_hub, nodes_in_order, probe
from kwiden.growth.walk import walk
from kwiden.keras_internals import all_layers, producer
from kwiden.layers import ExpandableEmbedding, ExpandableMultiHeadAttention
from kwiden.models import naming


@dataclasses.dataclass
class OutputComparison:
    """One output: the big model's against the small one carried into its space.

    `max_relative_error` is `max|big − carried| / max|carried|`: relative to the
    output's scale, so zeros in it do not blow the figure up.
    `argmax_agreement` (logits only) is the fraction of positions where both
    models pick the same class.
    """

    name: str
    max_absolute_error: float
    max_relative_error: float
    argmax_agreement: float | None = None


@dataclasses.dataclass
class VerifyReport:
    """What `kwiden.verify` found. `ok` is True when every output is within `rtol`."""

    factor: int | fractions.Fraction
    rtol: float
    outputs: list
    first_departure: tuple | None  # (layer name, relative error) or None
    layers_compared: bool = True  # False where only outputs were compared (KerasHub)

    @property
    def ok(self):
        """Every output within `rtol`, and no compared layer beyond it."""
        return self.first_departure is None and all(o.max_relative_error <= self.rtol for o in self.outputs)

    def __str__(self):
        lines = [f"kwiden.verify (×{self.factor}, rtol={self.rtol:g}): {'OK' if self.ok else 'NOT EXACT'}"]
        lines.append(f"  {'output':<34}{'max abs err':>14}{'max rel err':>14}{'argmax agree':>14}")
        for o in self.outputs:
            agree = "" if o.argmax_agreement is None else f"{o.argmax_agreement:.2%}"
            lines.append(f"  {o.name:<34}{o.max_absolute_error:>14.3e}{o.max_relative_error:>14.3e}{agree:>14}")
        if not self.layers_compared:
            lines.append("  outputs only: layers not compared one by one")
        elif self.first_departure is None:
            lines.append("  every layer within rtol")
        else:
            name, error = self.first_departure
            lines.append(f"  first layer beyond rtol: '{name}' (relative error {error:.3e})")
        return "\n".join(lines)


def verify(small, big, inputs, rtol=1e-5, k=None, plan=None):
    """Measure whether `big` (grown from `small`) computes the same function, and where it departs.

    Each output of `small` is carried into the big model's space (logits as
    they are; hidden states copied and scaled, docs/widening.md) and compared with
    `big`'s; then every layer's output, in graph order, to find the first
    layer where the models part.

    Args:
        small: the source model.
        big: the grown model (layer names as `kwiden.grow` keeps them).
        inputs: model inputs, as `small(inputs)` takes them.
        rtol: the relative error accepted.
        k: the width factor; by default the one `big` was grown by.
        plan: how `big` was grown: a `GrowthRecord` (`big.growth_record`,
            the default when `big` was grown from `small` in this process).
            Without one (a model loaded from disk, or a `k` other than the
            record's), the factor, head mode and block renaming are inferred
            from the weight shapes and layer names.

    Returns:
        A `VerifyReport`; `report.ok` is a bool and `str(report)` a table.
    """
    if is_keras_hub(small):
        raise ValueError(
            f"kwiden.verify walks kwiden's functional models, not KerasHub's {type(small).__name__}: grow it "
            "with kwiden.grow(..., check=inputs), which measures its outputs and keeps the report as "
            "big.growth_report."
        )
    if plan is None:
        plan = getattr(big, "growth_record", None)
        plan = plan if plan is not None and plan.source is small else None
    elif plan.source is not small:
        raise ValueError("`plan` describes a growth of another model than `small`; pass the model it was grown from.")
    if plan is not None and (k is None or as_factor(k) == plan.growth.k):
        k, spaces, rename = plan.growth.k, plan.spaces, plan.renamed
    else:
        k = infer_factor(small, big) if k is None else as_factor(k)
        spaces, rename = walk(small, _carrying(k, small, big)).spaces, _block_renaming(small, big)
    _check_outputs_match(small, big, spaces, rename, k)
    check_inputs(small, inputs)
    small_tensors, big_tensors, names = _matching_tensors(small, big, rename)
    small_values = probe(small, small_tensors + small.outputs, inputs)
    big_values = probe(big, big_tensors + big.outputs, inputs)
    count = len(small_tensors)
    first_departure = None
    for tensor, name, a, b in zip(small_tensors, names, small_values, big_values):
        error = relative_error(spaces[id(tensor)].carry(a), b)
        if error > rtol:
            first_departure = (name, error)
            break
    outputs = [
        compare_output(producer(tensor).name, spaces[id(tensor)], a, b)
        for tensor, a, b in zip(small.outputs, small_values[count:], big_values[count:])
    ]
    return VerifyReport(k, rtol, outputs, first_departure)


def _check_outputs_match(small, big, spaces, rename, k):
    """`big` has `small`'s outputs, in order, from the same layers, of the
    widths growth by `k` gives them: else no comparison is meaningful."""
    small_names = [rename(producer(x).name) for x in small.outputs]
    big_names = [producer(x).name for x in big.outputs]
    if len(small_names) != len(big_names) or not all(map(_same_layer, small_names, big_names)):
        raise ValueError(
            f"`big` does not have `small`'s outputs: small gives {small_names}, big gives {big_names}. "
            "Pass the grown model second (verify(small, big, inputs)), grown from this small model."
        )
    for x, y in zip(small.outputs, big.outputs):
        expected = spaces[id(x)].grown_size(x.shape[-1]) if x.shape[-1] is not None else None
        if expected != y.shape[-1]:
            raise ValueError(
                f"Output '{producer(y).name}' of `big` is {y.shape[-1]} wide; `small`'s ({x.shape[-1]}) grown by "
                f"k={k} would be {expected}. Pass the factor `big` was grown by (or leave `k` out), and the "
                "grown model second."
            )


def _same_layer(name, grown_name):
    """Whether `grown_name` is `name`'s layer, or its copy in a later block
    (depth growth hands the last block's output on from its last copy)."""
    if name == grown_name or grown_name.startswith(f"{name}-"):
        return True
    blocks = naming.block_index(name), naming.block_index(grown_name)
    return None not in blocks and naming.renumbered(name, 0) == naming.renumbered(grown_name, 0)


def check_inputs(model, inputs, name="inputs"):
    """Refuse empty model inputs, a number of arrays `model` does not take,
    and ids outside the tables they look up (which the backend would refuse
    with a kernel's message, or TensorFlow on a GPU silently read as zeros)."""
    flat = tree.flatten(inputs)
    if not flat or any(np.size(x) == 0 for x in flat):
        raise ValueError(f"`{name}` is empty: comparing models needs inputs with at least one example.")
    if len(flat) != len(model.inputs):
        raise ValueError(f"`{name}` holds {len(flat)} arrays; model '{model.name}' takes {len(model.inputs)}.")
    tables = _lookups(model)
    positions = [
        (op.input_dim, op.name) for ops in tables.values() for op in ops if getattr(op, "mode", "") == "position"
    ]
    for index, (x, value) in enumerate(zip(tree.flatten(model.input), flat)):
        if positions and np.ndim(value) > 1 and np.shape(value)[1] > min(positions)[0]:
            size, layer = min(positions)
            raise ValueError(
                f"`{name}`[{index}] ('{x.name}') is {np.shape(value)[1]} long; '{layer}' has {size} positions: "
                f"give sequences of at most {size}."
            )
        sizes = [(op.input_dim, op.name) for op in tables[id(x)] if getattr(op, "mode", "lookup") == "lookup"]
        if not sizes:
            continue
        (size, layer), value = min(sizes), np.asarray(value)
        if not np.issubdtype(value.dtype, np.integer):
            raise ValueError(
                f"`{name}`[{index}] ('{x.name}') feeds '{layer}' and must hold integer ids, not {value.dtype}."
            )
        if value.min() < 0 or value.max() >= size:
            bad = value.max() if value.max() >= size else value.min()
            raise ValueError(
                f"`{name}`[{index}] ('{x.name}') holds the id {bad}, outside '{layer}', which has {size} rows: "
                f"give ids in [0, {size})."
            )


def _lookups(model):
    """`{id(input tensor): [embedding layers it feeds]}`."""
    tables = collections.defaultdict(list)
    for node in nodes_in_order(model):
        op = node.operation
        if isinstance(op, (ExpandableEmbedding, keras.layers.Embedding)) and node.input_tensors:
            tables[id(node.input_tensors[0])].append(op)
    return tables


def compare_output(name, space, small_value, big_value):
    """One output of the big model against the small one's, carried into `space`."""
    carried = space.carry(small_value)
    agreement = None
    if not space.expanded and small_value.ndim > 1 and small_value.shape[-1] > 1:
        agreement = float(np.mean(np.argmax(small_value, -1) == np.argmax(big_value, -1)))
    return OutputComparison(
        name=name,
        max_absolute_error=float(np.max(np.abs(carried - big_value)))
        if carried.shape == big_value.shape
        else float("inf"),
        max_relative_error=relative_error(carried, big_value),
        argmax_agreement=agreement,
    )


def _carrying(k, small=None, big=None):
    """A `Growth` by `k` that plans every layer, exact or not, in the head mode
    `big` was grown in: only the spaces of layer outputs matter here."""
    return Growth(k, heads=_head_mode(k, small, big), allow_approximate=True)


def _head_mode(k, small, big):
    if not isinstance(k, int):
        return "count"
    if small is not None and big is not None:
        big_layers = {layer.name: layer for layer in big.layers}
        for layer in small.layers:
            grown = big_layers.get(layer.name)
            if isinstance(layer, ExpandableMultiHeadAttention) and grown is not None:
                return "size" if grown.heads == layer.heads else "count"
    return "size"


def infer_factor(small, big):
    """The hidden-size factor: among the width ratios of same-named weights
    (vector weights first: most live in the hidden space), the first that
    accounts for the width of every output of `big`."""
    vector_ratios, other_ratios = collections.Counter(), collections.Counter()
    big_layers = {layer.name: layer for layer in big.layers}
    for layer in small.layers:
        other = big_layers.get(layer.name)
        for a, b in zip(layer.weights, other.weights if other is not None else []):
            counter = vector_ratios if len(a.shape) == 1 else other_ratios
            for n, m in zip(a.shape, b.shape):
                if n and m >= n:
                    counter[as_factor(fractions.Fraction(m, n))] += 1
    candidates = [r for r, _ in vector_ratios.most_common()] + [r for r, _ in other_ratios.most_common()]
    for k in dict.fromkeys(candidates + [1]):
        try:
            spaces = walk(small, _carrying(k, small, big)).spaces
            widths = [(spaces[id(x)].grown_size(x.shape[-1]), y.shape[-1]) for x, y in zip(small.outputs, big.outputs)]
        except GrowthError:
            continue  # some width of the model does not grow by k
        if all(a == b for a, b in widths):
            return k
    return 1


def _matching_tensors(small, big, rename):
    """Float outputs of the layers both models have, in the small model's order."""
    big_outputs = collections.defaultdict(list)
    for node in nodes_in_order(big):
        big_outputs[node.operation.name].append(node.outputs)
    seen = collections.Counter()
    small_tensors, big_tensors, names = [], [], []
    for node in nodes_in_order(small):
        name = rename(node.operation.name)
        calls = big_outputs.get(name, [])
        if not isinstance(node.operation, keras.layers.Layer) or seen[name] >= len(calls):
            continue
        for a, b in zip(node.outputs, calls[seen[name]]):
            if "float" in str(a.dtype):
                small_tensors.append(a)
                big_tensors.append(b)
                names.append(name)
        seen[name] += 1
    return small_tensors, big_tensors, names


def _block_renaming(small, big):
    """After depth growth, the name each of `small`'s block layers has in
    `big`, from the layer names alone (for models grown elsewhere)."""
    blocks = naming.count_blocks(layer.name for layer in small.layers)
    grown_blocks = naming.count_blocks(layer.name for layer in big.layers)
    if blocks == grown_blocks or not blocks or grown_blocks < blocks:
        return lambda name: name
    indices = new_indices(copies_per_block(blocks, num_layers=grown_blocks))

    def rename(name):
        index = naming.block_index(name)
        return name if index is None else renamed(name, index, indices[index][0])

    return rename


def relative_error(reference, value):
    """`max|reference − value| / max|reference|` (inf when the shapes differ)."""
    reference = np.asarray(reference, np.float64)
    value = np.asarray(value, np.float64)
    if reference.shape != value.shape:
        return float("inf")
    if not reference.size:
        return 0.0
    scale = max(np.max(np.abs(reference)), 1e-30)
    return float(np.max(np.abs(reference - value)) / scale)


def sample_inputs(model, batch_size=2, length=16, seed=0):
    """Random valid inputs for `model`, in the structure it takes (a list, a
    dict, one array): ids below the smallest table each input feeds, at most
    as long as its position table; random normals for floats."""
    rng = np.random.default_rng(seed)
    bounds = _lookups(model)
    for layer in all_layers(model):  # KerasHub's position embeddings, nested in its tasks too
        if is_count(getattr(layer, "sequence_length", None)):
            length = min(length, layer.sequence_length)
    for tables in bounds.values():
        for op in tables:
            if getattr(op, "mode", "lookup") == "position":
                length = min(length, op.input_dim)
    samples = []
    for x in tree.flatten(model.input):
        shape = [batch_size, *(length if d is None else d for d in x.shape[1:])]
        if "int" in str(x.dtype) or "bool" in str(x.dtype):
            sizes = [op.input_dim for op in bounds[id(x)] if getattr(op, "mode", "lookup") == "lookup"]
            # Token ids avoid 0 (padding); segment ids and other small tables use every row.
            low = 1 if sizes and min(sizes) > 2 else 0
            samples.append(rng.integers(low, max(min(sizes, default=2), low + 1), shape).astype(x.dtype))
        else:
            samples.append(rng.normal(size=shape).astype(x.dtype))
    return tree.pack_sequence_as(model.input, samples)
