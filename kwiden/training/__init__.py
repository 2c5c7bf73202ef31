"""Training that grows: the one training loop (`loop`: position, schedule
and next stop, growths, backups, Ctrl-C, stops on a loss that is not finite,
seeds) with its schedule (`schedule.GrowthSchedule`), backups (`backups`) and
stretches (`stretch`), and its Keras front end `fit.fit_growing`
(`kwiden pretrain`'s is `kwiden.pretraining.trainer`); the recipe that places
growths at equal compute (`recipe`), FLOPs (`compute`), Admin initialisation
for deep Post-LN stacks (`admin`) and tensor-parallel layouts
(`distribution`).
"""

from kwiden.exports import lazy as _lazy

__getattr__, __dir__ = _lazy(__name__, {})  # its modules, as attributes once asked for
