"""Optimizers with gradient accumulation folded into momentum (docs/accumulation.md), and schedules."""

from kwiden.optimizers.accumulating import AccumulatingOptimizer
from kwiden.optimizers.adam import Adam, AdamW
from kwiden.optimizers.radam import RAdam
from kwiden.optimizers.schedules import PiecewiseLinear, WarmupDecay
from kwiden.optimizers.sgdm import SGDM

__all__ = ["AccumulatingOptimizer", "Adam", "AdamW", "PiecewiseLinear", "RAdam", "SGDM", "WarmupDecay"]
