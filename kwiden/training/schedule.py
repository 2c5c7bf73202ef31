"""The one schedule type of growth during training: `GrowthSchedule`, the
growths of a run in parameter updates, each a `recipe.ScheduledGrowth`
(`kwiden.grow`'s arguments, with the fraction of the run it was placed at
where `--grow` or `auto` placed it). `fit_growing` and `kwiden pretrain` both
run one (`kwiden.training.loop`)."""

import dataclasses

from kwiden.arguments import is_count
from kwiden.growth.arguments import GROW, names
from kwiden.models import get_family
from kwiden.models.builder import build_transformer_model
from kwiden.training import recipe
from kwiden.training.compute import flops_per_token

# The growth options a schedule may set: `kwiden.grow`'s (`growth.arguments.GrowthArguments`) but its optimizer, which
# the loop passes with the model.
GROW_ARGUMENTS = tuple(name for name in names(GROW) if name != "optimizer")


class GrowthSchedule:
    """When to grow, counted in parameter updates, and how: `{update: grow's
    keyword arguments}`, updates strictly increasing in the order given.

    At update `u` (after `u` updates, before update `u + 1`) the loop calls
    `kwiden.grow(model, optimizer=model.optimizer, **arguments)`.

    >>> schedule = GrowthSchedule({2000: dict(k=2), 6000: dict(depth=2)})
    >>> schedule.updates
    [2000, 6000]
    >>> GrowthSchedule({6000: dict(depth=2), 2000: dict(k=2)})
    Traceback (most recent call last):
    ...
    ValueError: GrowthSchedule updates must be strictly increasing, got 6000 then 2000.
    """

    def __init__(self, growths):
        if not isinstance(growths, dict):
            raise ValueError(
                f"GrowthSchedule takes a dict {{update: dict(k=2, …)}}, got {type(growths).__name__}: {growths!r}."
            )
        self.growths = []
        for update, arguments in growths.items():
            update = _update(update)
            if self.growths and update <= self.growths[-1].update:
                raise ValueError(
                    f"GrowthSchedule updates must be strictly increasing, got {self.growths[-1].update} then {update}."
                )
            self.growths.append(recipe.ScheduledGrowth(None, _grow_arguments(update, arguments), update))

    @classmethod
    def placed(cls, growths):
        """The schedule of growths `recipe.place` placed (each keeps the fraction of the run it was asked at)."""
        schedule = cls({growth.update: growth.arguments for growth in growths})
        schedule.growths = [dataclasses.replace(g, arguments=s.arguments) for g, s in zip(growths, schedule.growths)]
        return schedule

    @classmethod
    def auto(cls, config, budget, model="gpt", seq_len=None, warmup=0, **build_arguments):
        """The growths `kwiden pretrain --grow auto` makes for a target, in
        updates: training to `schedule.steps` spends the FLOPs of `budget`
        updates of the target from scratch, each model charged its own cost
        (`kwiden.training.compute.flops_per_token` at `seq_len`, by default the
        config's `max_position_embeddings`).

        `config` is the target's (a dict, or a config.json path) for the
        family `model`; `build_arguments` go to `build_transformer_model`
        when the sizes are counted (`with_mlm=True` for a masked LM's head).
        The schedule also says where to start and why:
        `schedule.start_config` is the complete config of the small model to
        build and train first, `schedule.steps` the updates to give
        `fit_growing`, `schedule.why` what was chosen and why
        (docs/growth-that-pays.md).

        >>> config = dict(vocab_size=100, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
        ...               intermediate_size=256, max_position_embeddings=64)
        >>> schedule = GrowthSchedule.auto(config, budget=1000)
        >>> schedule.start_config["num_hidden_layers"], schedule, schedule.steps
        (1, GrowthSchedule({1285: {'depth': 2}}), 1606)
        >>> schedule.why[:44]
        'depth ×2 at 80% of the updates, from 1 block'
        """
        family = get_family(model)
        target = family.config(config) if isinstance(config, dict) else family.config(config_path=config)
        seq_len = seq_len or target["max_position_embeddings"]
        growths, why = recipe.auto(target)
        configs = [recipe.undone(target, growths[i:]) for i in range(len(growths) + 1)]
        costs = [
            flops_per_token(build_transformer_model(c, model=family.name, **build_arguments), seq_len) for c in configs
        ]
        steps, growths = recipe.place(growths, budget, costs, warmup)
        schedule = cls.placed(growths)
        schedule.start_config, schedule.steps, schedule.why = configs[0], steps, why
        return schedule

    @property
    def updates(self):
        return [growth.update for growth in self.growths]

    def due(self, update, growths_done, end):
        """The growth a run that has had `growths_done` growths makes at `update`, if it is due there and before
        the run's `end`; else None."""
        upcoming = self.growths[growths_done:]
        if upcoming and upcoming[0].update == update < end:
            return upcoming[0]
        return None

    def next_after(self, update):
        """The first growth update after `update`, or None."""
        return next((u for u in self.updates if u > update), None)

    def get_config(self):
        return {"growths": {str(growth.update): growth.arguments for growth in self.growths}}

    @classmethod
    def from_config(cls, config):
        return cls({int(update): arguments for update, arguments in config["growths"].items()})

    def __repr__(self):
        growths = {growth.update: growth.arguments for growth in self.growths}
        return f"GrowthSchedule({growths!r})"


def _update(value):
    if isinstance(value, str) and value.isdigit():
        value = int(value)
    if not is_count(value, 1):
        raise ValueError(f"GrowthSchedule updates must be integers >= 1, got {value!r}.")
    return int(value)


def _grow_arguments(update, arguments):
    if not isinstance(arguments, dict):
        raise ValueError(f"GrowthSchedule[{update}] must be a dict of kwiden.grow's arguments, got {arguments!r}.")
    unknown = sorted(set(arguments) - set(GROW_ARGUMENTS))
    if unknown:
        raise ValueError(
            f"GrowthSchedule[{update}] has {unknown[0]!r}, which kwiden.grow does not take (the trainer passes "
            f"the model and its optimizer); it takes {', '.join(GROW_ARGUMENTS)}."
        )
    return dict(arguments)


__all__ = ["GROW_ARGUMENTS", "GrowthSchedule"]
