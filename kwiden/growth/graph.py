"""Functional graphs: walk one in order, know who makes and who reads each
tensor, and rebuild it with other layers.

Growth, depth growth, `kwiden.training.admin.fold` and `kwiden.verify` all follow a
model's graph node by node; they share this module.
"""

import collections

import keras
import numpy as np
from keras import tree

from kwiden import keras_internals
from kwiden.models.family_model import functional_like


def is_keras_hub(model):
    """Whether `model` is a KerasHub model (its layers hold nested blocks)."""
    return type(model).__module__.startswith("keras_hub")


def nodes_in_order(model):
    """The layer calls of a functional `model`, each after those it reads."""
    by_depth = keras_internals.nodes_by_depth(model)
    for depth in sorted(by_depth, reverse=True):
        for node in by_depth[depth]:
            if node.operation is not None and not node.is_input:
                yield node


def fresh_inputs(model):
    """`{id(input of model): a new keras.Input like it}`: where a rebuilt graph starts."""
    return {
        id(x): keras.Input(batch_shape=x.shape, dtype=x.dtype, name=keras_internals.producer(x).name)
        for x in model.inputs
    }


def call_like(layer, node, tensors):
    """Call `layer` as `node` called its layer, on the tensors `tensors` maps
    the node's inputs to; record the outputs in `tensors` the same way."""
    args, kwargs = node.arguments.fill_in(tensors)
    for x, y in zip(node.outputs, tree.flatten(layer(*args, **kwargs))):
        tensors[id(x)] = y


def model_like(model, tensors):
    """The functional model from the tensors `tensors` maps `model`'s inputs
    and outputs to, named as `model` and, for a `FamilyModel`, of its class
    and family."""
    return functional_like(
        model,
        tree.map_structure(lambda x: tensors[id(x)], model.input),
        tree.map_structure(lambda x: tensors[id(x)], model.output),
    )


class Rebuild:
    """A new functional graph laid along `model`'s: `call` makes (once per
    key) the layer that replaces a node's and calls it as the node did;
    `finish` returns the new model. The one loop behind growth, depth growth
    and `admin.fold`."""

    def __init__(self, model):
        self.source = model
        self.tensors = fresh_inputs(model)
        self.layers = {}  # key -> new layer

    def call(self, node, make_layer, tensors=None, key=None):
        """Call the layer made by `make_layer()` (once for `key`, by default
        the node's layer) as `node` did; return that layer."""
        key = id(node.operation) if key is None else key
        if key not in self.layers:
            self.layers[key] = make_layer()
        call_like(self.layers[key], node, self.tensors if tensors is None else tensors)
        return self.layers[key]

    def finish(self):
        return model_like(self.source, self.tensors)


class Graph:
    """Who produces and who reads each tensor of a functional model, and how
    often each layer is called."""

    def __init__(self, model):
        self.nodes = list(nodes_in_order(model))
        self.producer, self.readers = {}, collections.defaultdict(list)
        self.calls = collections.Counter(id(node.operation) for node in self.nodes)
        for node in self.nodes:
            for x in node.outputs:
                self.producer[id(x)] = node
            for x in node.input_tensors:
                self.readers[id(x)].append(node)
        self.outputs = {id(x) for x in model.outputs}

    def upstream(self, tensor, through=(keras.layers.Dropout,)):
        """Follow `tensor` back through single-input layers of the classes
        `through` (or for which `through(layer)` is true): the tensors passed
        (`tensor` first) and the node that starts the chain (None at a model
        input)."""
        passes = through if callable(through) and not isinstance(through, tuple) else lambda op: isinstance(op, through)
        chain, node = [tensor], self.producer.get(id(tensor))
        while node is not None and len(node.input_tensors) == 1 and passes(node.operation):
            chain.append(node.input_tensors[0])
            node = self.producer.get(id(chain[-1]))
        return chain, node

    def other_readers(self, chain, node):
        """Who reads the tensors of `chain`, besides `node` and the chain's
        own links; None if one of them is a model output."""
        if any(id(x) in self.outputs for x in chain):
            return None
        inside = {id(x) for x in chain}
        return [
            reader
            for x in chain
            for reader in self.readers.get(id(x), [])
            if reader is not node and not (reader.outputs and id(reader.outputs[0]) in inside)
        ]


def probe(model, tensors, inputs, training=False):
    """The values of `model`'s symbolic `tensors` on `inputs`, as float64 numpy arrays."""
    values = keras.Model(model.input, tensors)(inputs, training=training)
    return [np.asarray(keras.ops.convert_to_numpy(v), np.float64) for v in tree.flatten(values)]
