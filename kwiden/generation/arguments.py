"""What `kwiden.generate` and `kwiden.similar` take, declared once
(`GenerateOptions`, `SimilarOptions`: `kwiden.arguments.option` fields, from
which `kwiden generate` and `kwiden similar` make their flags, `--help` and
defaults, equal to the functions'), and refusals that name the caller's
arguments, spelled as the entry point that refused takes them:
`max_new_tokens=64` to `kwiden.generate`, `--max-new-tokens=64` to `kwiden
generate`, and `candidates=100` where `kwiden.similar` passed its
`candidates` on as `num_samples`. A refusal that named another entry
point's argument would advise what the user cannot give."""

import dataclasses
import re

from kwiden import arguments
from kwiden.arguments import flag_of, option

# Below this, logits / temperature overflow float64 and sampling would give NaN.
LEAST_TEMPERATURE = 1e-6
# A repetition penalty's range: beyond it a penalised logit, or a beam's sum of penalised log-probabilities,
# could overflow float32 to an infinity (a row of them gives NaN); 1e6 already makes a repeat all but impossible.
PENALTY_RANGE = (1e-6, 1e6)
# How Python callers name the switches (the rest: as written).
PYTHON = {"greedy": "greedy=True"}
# A backslash escape in a token's text, and the character it stands for.
ESCAPE = re.compile(r"\\(x[0-9a-fA-F]{2}|[ntr\\])")
ESCAPED = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\"}


def escaped(text):
    """A token's text as a shell gives it, escapes read: `\\n` a newline, `\\x0a` too."""
    return ESCAPE.sub(lambda m: chr(int(m[1][1:], 16)) if m[1][0] == "x" else ESCAPED[m[1]], text)


@dataclasses.dataclass(frozen=True)
class GenerateOptions:
    """`kwiden.generate`'s options but the model, the tokenizer and the prompts."""

    max_new_tokens: int = option(32, "tokens a continuation at most (refused past the positions the model holds or "
                                 "was trained on, or the memory available)", "count", 1)  # fmt: skip
    greedy: bool = option(False, "the likeliest token each step (not with --beam)", "switch")
    beam: int = option(None, "beam search of K continuations", "count", 1, metavar="K")
    top_k: int = option(None, "sample from the K likeliest tokens", "count", 1, metavar="K")
    top_p: float = option(1.0, "sample from the likeliest tokens holding P", "share", metavar="P")
    temperature: float = option(1.0, "divide the logits by T before sampling", "positive", LEAST_TEMPERATURE,
                                metavar="T")  # fmt: skip
    repetition_penalty: float = option(1.0, "make each token already in the prompt or the continuation less "
                                       "likely: its logit divided by R where positive, multiplied where negative "
                                       "(a beam search's log-probability multiplied), as transformers does; end "
                                       "tokens are not penalised; 1: no penalty", "positive", *PENALTY_RANGE,
                                       metavar="R")  # fmt: skip
    num_samples: int = option(1, "continuations a prompt", "count", 1)
    seed: int = option(None, "makes sampling repeat", "count", 0)
    end_tokens: list = option(None, "a token that ends a continuation: its text (or a text the tokenizer reads as "
                              "one token), with \\n, \\t, \\r, \\\\ and \\xHH read as escapes ('\\n': a newline); "
                              "repeat for several (default: the checkpoint's eos_token_id, else the tokenizer's "
                              "separator)", flag="--end-token", parse=escaped, many=True, metavar="TOKEN")  # fmt: skip


@dataclasses.dataclass(frozen=True)
class SimilarOptions:
    """`kwiden.similar`'s options but the checkpoint and the texts."""

    n: int = option(5, "sentences to print", "count", 1, flag="-n")
    candidates: int = option(100, "sentences sampled before ranking", "count", 1)
    top_k: int = option(5, "each token from the k likeliest", "count", 1)
    max_new_tokens: int = option(None, "tokens a sentence at most (default: twice the text's and 2 more, or as many "
                                 "as the positions the model holds and was trained on allow)", "count", 1)  # fmt: skip
    seed: int = option(None, "makes sampling repeat", "count", 0)


def checked(options, values):
    """`values`, options of `options` (`GenerateOptions`, `SimilarOptions`) by name, each checked by its field;
    refused naming it as the caller spells it (`ArgumentError`)."""
    fields = [field for field in dataclasses.fields(options) if field.name in values]
    return arguments.checked(fields, values, _refused)


def _refused(field, value, span):
    return ArgumentError("{" + field.name + "}={value!r}: must be " + span + ".", value=value)


def flags(options):
    """`{argument: flag}` of an options dataclass: how its command spells each argument."""
    return {field.name: flag_of(field) for field in dataclasses.fields(options)}


# The flags of `kwiden generate` and `kwiden similar`, by the argument each gives.
GENERATE_FLAGS = flags(GenerateOptions)
SIMILAR_FLAGS = flags(SimilarOptions)


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
