"""The parts of `benchmarks/grow_vs_scratch.py`'s protocol, each a concern of its own:

- `arms`: the recipes it compares (`--recipes` groups) and how a recipe becomes `kwiden.pretrain`'s options;
- `corpora`: the `--corpus` entries and their bytes;
- `runs`: one `kwiden.pretrain` run (`train`, in a process of its own with `--jobs`) and its curve (`Run`);
- `tuning`: which scratch rates to try next, and which budget fractions (bisected);
- `cells`: one cell of the protocol table (a model size on a corpus): its runs started and collected in order;
- `tables`: the tables each cell prints, the FLOPs check and the protocol table's row;
- `plots`: a cell's validation curves against FLOPs.

Importing the package imports `common` first, so that kwiden is this checkout's.
"""

import common  # noqa: F401
