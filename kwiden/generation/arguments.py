"""Refusals that name the caller's arguments, spelled as the entry point
that refused takes them: `max_new_tokens=64` to `kwiden.generate`,
`--max-new-tokens=64` to `kwiden generate`, and `candidates=100` where
`kwiden.similar` passed its `candidates` on as `num_samples`. A refusal
that named another entry point's argument would advise what the user
cannot give."""

# How Python callers name the switches (the rest: as written).
PYTHON = {"greedy": "greedy=True"}
# The flags of `kwiden generate` and `kwiden similar`, by the argument each gives.
GENERATE_FLAGS = {
    "max_new_tokens": "--max-new-tokens",
    "greedy": "--greedy",
    "beam": "--beam",
    "top_k": "--top-k",
    "top_p": "--top-p",
    "temperature": "--temperature",
    "num_samples": "--num-samples",
    "seed": "--seed",
    "end_tokens": "--end-token",
}
SIMILAR_FLAGS = {
    "n": "-n",
    "candidates": "--candidates",
    "top_k": "--top-k",
    "max_new_tokens": "--max-new-tokens",
    "seed": "--seed",
}


class _Named:
    """A message whose `template` writes each argument it names as `{name}`
    (generate's name: `{max_new_tokens}={value}`), its values given as
    keywords. `str()` spells the names as Python callers do; `respelled`
    gives the message as an entry point that takes them under other names."""

    def __init__(self, template, names=None, **values):
        self.template, self.values = template, values
        self.names = {**PYTHON, **(names or {})}
        super().__init__(self.template.format_map(_Spelling(self.names, values)))

    def respelled(self, names):
        """The same message, each argument named as `names` says (a dict from
        the names this one prints to the entry point's); others as they were."""
        spelled = {key: names.get(value, names.get(key, value)) for key, value in self.names.items()}
        return type(self)(self.template, {**names, **spelled}, **self.values)


class ArgumentError(_Named, ValueError):
    """A refusal that names the caller's arguments (`_Named`)."""


class ArgumentWarning(_Named, UserWarning):
    """A warning that names the caller's arguments (`_Named`)."""


class _Spelling(dict):
    """A template's fields: its values, and each argument's name as spelled."""

    def __init__(self, names, values):
        super().__init__(values)
        self.names = names

    def __missing__(self, key):
        return self.names.get(key, key)
