"""Keras 3 layers that know how to grow themselves (docs/widening.md)."""

from kwiden.layers import activations as activations  # a module of functions, not a layer
from kwiden.layers.admin_residual import AdminResidual
from kwiden.layers.bias_add import BiasAdd
from kwiden.layers.conditional_random_field import ConditionalRandomField
from kwiden.layers.efficient_global_pointer import EfficientGlobalPointer
from kwiden.layers.expandable import Expandable
from kwiden.layers.expandable_dense import ExpandableDense
from kwiden.layers.expandable_embedding import ExpandableEmbedding
from kwiden.layers.expandable_layer_normalization import ExpandableLayerNormalization
from kwiden.layers.expandable_multi_head_attention import ExpandableMultiHeadAttention
from kwiden.layers.feed_forward import FeedForward
from kwiden.layers.global_pointer import GlobalPointer
from kwiden.layers.relative_position_bias import RelativePositionBias
from kwiden.layers.rotary_embedding import RotaryEmbedding
from kwiden.layers.select_token import SelectToken

__all__ = [
    "AdminResidual",
    "BiasAdd",
    "ConditionalRandomField",
    "EfficientGlobalPointer",
    "Expandable",
    "ExpandableDense",
    "ExpandableEmbedding",
    "ExpandableLayerNormalization",
    "ExpandableMultiHeadAttention",
    "FeedForward",
    "GlobalPointer",
    "RelativePositionBias",
    "RotaryEmbedding",
    "SelectToken",
]
