"""`kwiden.arguments`: options declared once as dataclass fields, and what derives from them (the command's flags,
their help and defaults, the checks, what a command line gives); `is_count`, the one whole-number check."""

import argparse
import dataclasses
import fractions
import re

import numpy as np
import pytest

from kwiden import arguments
from kwiden.arguments import option


@dataclasses.dataclass(frozen=True)
class Options:
    size: int = option(3, "how many", "count", 1, 10)
    share: float = option(0.5, "how much", "share", metavar="S")
    mode: str = option("a", "which", "choice", choices=("a", "b"))
    quiet: bool = option(False, "say nothing", "switch")
    folder: str = option(None, "where", "checkpoint", flag="--from")
    words: list = option(None, "one a flag", parse=str.upper, many=True, flag="--word")
    rows: int = option(None, "how many rows", "count", 1, command=8, why="the command prints a screenful")


def test_is_count_takes_whole_numbers_numpy_ones_too_not_bools():
    assert arguments.is_count(3) and arguments.is_count(np.int64(3), 3) and arguments.is_count(0)
    assert not any(arguments.is_count(v) for v in (True, 3.0, "3", None, -1))
    assert not arguments.is_count(2, 3)


def test_values_are_checked_as_declared_and_refused_naming_the_flag(tmp_path):
    assert arguments.checked(Options, dict(size=np.int64(4))) == {**arguments.defaults(Options), "size": 4}
    for values, message in [
        (dict(size=0), r"--size must be a whole number from 1 to 10, got 0\."),
        (dict(size=2.0), r"--size must be a whole number from 1 to 10, got 2\.0\."),
        (dict(share=0), r"--share must be in \(0, 1\], got 0\."),
        (dict(share=float("nan")), r"--share must be in \(0, 1\], got nan\."),
        (dict(mode="c"), r"--mode must be one of a, b, got 'c'\."),
        (dict(folder=str(tmp_path / "gone")), r"--from .*gone does not exist: give a checkpoint folder"),
    ]:
        with pytest.raises(ValueError, match=message):
            arguments.checked(Options, values)
    with pytest.raises(TypeError, match=r"unexpected option 'sise'; the options are size, share"):
        arguments.checked(Options, dict(sise=3))


def test_the_flags_their_help_and_defaults_come_from_the_declaration():
    parser = argparse.ArgumentParser()
    assert arguments.add_flags(parser, Options, skip=("quiet",))["folder"] == "--from"
    given = arguments.given(parser.parse_args(["--word", "x", "--word", "y"]), [f for f in dataclasses.fields(
        Options) if f.name != "quiet"])  # fmt: skip
    expected = {**arguments.defaults(Options), "words": ["X", "Y"], "rows": 8}
    assert given == {name: value for name, value in expected.items() if name != "quiet"}
    shown = " ".join(parser.format_help().split())
    assert "--share S how much (default: 0.5)" in shown
    assert "--rows ROWS how many rows (default: 8: the command prints a screenful)" in shown


@dataclasses.dataclass(frozen=True)
class Shared:
    """The options of two functions, `one` and `two`, and of a command that calls either."""

    factor: object = option(None, "how much wider", "factor")
    mode: str = option("a", "which", "choice", choices=("a", "b"), own={"two": "b"}, command=None, why="b suits two")
    only: int = option(0, "one's alone", "count", 0, takers=("one",))
    hidden: bool = option(False, "no flag", "switch", takers=("two",), flag=False, command=True, why="a command shows")


def test_options_of_several_functions_each_take_theirs_with_their_own_defaults():
    assert [field.name for field in arguments.taken_by(Shared, "one")] == ["factor", "mode", "only"]
    assert [field.name for field in arguments.taken_by(Shared, "two")] == ["factor", "mode", "hidden"]
    mode = dataclasses.fields(Shared)[1]
    assert (arguments.default_in(mode, "one"), arguments.default_in(mode, "two")) == ("a", "b")
    parser = argparse.ArgumentParser()
    assert arguments.add_flags(parser, Shared, where={"one": "ones", "two": "twos"}) == {
        "factor": "--factor", "mode": "--mode", "only": "--only"}  # fmt: skip
    args = parser.parse_args(["--factor", "4/3"])
    assert arguments.given(args, Shared) == dict(factor=fractions.Fraction(4, 3), mode=None, only=0)
    shown = " ".join(parser.format_help().split())
    assert "which (default: a for ones, b for twos: b suits two)" in shown and "no flag" not in shown
    with pytest.raises(SystemExit, match="^2$"):
        parser.parse_args(["--factor", "1/0"])
    with pytest.raises(ValueError, match=r"--factor must be a number above 0 such as 2, 1\.5 or 4/3, got 0\."):
        arguments.checked(Shared, dict(factor=0))
    with pytest.raises(argparse.ArgumentTypeError, match=r"^'x' is not a factor such as 2, 1\.5 or 4/3$"):
        arguments.factor("x")


@dataclasses.dataclass(frozen=True)
class Bounded:
    spread: float = option(2.0, "how far apart", "weight", most=100)
    temperature: float = option(1.0, "how hot", "positive", 1e-6)
    k: object = option(None, "the factor", "factor", 1)
    flag: bool = option(None, "on or off", "switch")


@pytest.mark.parametrize(
    ("values", "refusal"),
    [
        (dict(spread=100.5), "`spread` must be a number from 0 to 100 (how far apart), got spread=100.5."),
        (dict(temperature=1e-7), "`temperature` must be a number of at least 1e-06 (how hot), got temperature=1e-07."),
        (
            dict(k=fractions.Fraction(1, 2)),
            "`k` must be a number of at least 1 such as 2, 1.5 or 4/3, or None (the factor), got k=Fraction(1, 2).",
        ),  # fmt: skip
        (dict(flag="yes"), "`flag` must be True or False, or None (on or off), got flag='yes'."),
    ],
)
def test_real_kinds_honour_least_and_most_and_a_keyword_refusal_says_what_the_option_is(values, refusal):
    with pytest.raises(ValueError, match="^" + re.escape(refusal) + "$"):
        arguments.checked(Bounded, values, arguments.keyword_refusal)


def test_bounds_include_their_ends_and_numpy_values_become_python_ones():
    got = arguments.checked(Bounded, dict(spread=np.float32(100), temperature=1e-6, k=fractions.Fraction(4, 3),
                                          flag=np.bool_(True)))  # fmt: skip
    assert got == dict(spread=100.0, temperature=1e-6, k=fractions.Fraction(4, 3), flag=True)
    assert type(got["spread"]) is float and type(got["flag"]) is bool
    with pytest.raises(ValueError, match=r"^--k must be a number of at least 1 such as 2, 1\.5 or 4/3, got 1/2\.$"):
        arguments.checked(Bounded, dict(k=fractions.Fraction(1, 2)))
