"""Named entities: the span heads' losses (`losses`), entity-level metrics
(`metrics`) and the refusal of targets a loss cannot read (`targets`). The heads
themselves are Keras layers in `kwiden.layers`.
"""
