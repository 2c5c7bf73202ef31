"""`kwiden.messages.warn`: every warning points at the user's line, however deep in kwiden it is raised."""

import inspect
import pathlib

import pytest

import kwiden
from kwiden import messages
from kwiden.testing import padded_batch


def kwiden_code(source):
    """The functions `source` defines, compiled as if they were a module of the kwiden package."""
    namespace = {"warn": messages.warn}
    exec(compile(source, str(pathlib.Path(messages.__file__).with_name("not_a_module.py")), "exec"), namespace)
    return namespace


def where(caught, text):
    """`(filename, line)` of the warning saying `text` (Keras may warn meanwhile)."""
    found = next(w for w in caught if text in str(w.message))
    return found.filename, found.lineno


def test_a_warning_points_at_its_caller_outside_kwiden():
    with pytest.warns(UserWarning, match="said here") as caught:
        line = inspect.currentframe().f_lineno + 1
        messages.warn("said here")
    assert (caught[0].filename, caught[0].lineno) == (__file__, line)


def test_a_warning_raised_three_calls_deep_in_kwiden_points_at_the_users_line():
    outer = kwiden_code(
        """
def inner():
    warn("deep", DeprecationWarning)

def middle():
    inner()

def outer():
    middle()
"""
    )["outer"]
    with pytest.warns(DeprecationWarning, match="deep") as caught:
        line = inspect.currentframe().f_lineno + 1
        outer()
    assert (caught[0].filename, caught[0].lineno) == (__file__, line)


def test_a_warning_raised_entering_a_kwiden_context_manager_points_at_the_with():
    held = kwiden_code(
        """
import contextlib

@contextlib.contextmanager
def held():
    warn("entered")
    yield
"""
    )["held"]
    with pytest.warns(UserWarning, match="entered") as caught:
        line = inspect.currentframe().f_lineno + 1
        with held():
            pass
    assert where(caught, "entered") == (__file__, line)


def test_a_public_function_that_warns_points_at_the_users_line(bert):
    small = bert()
    with pytest.warns(UserWarning, match="the grown model is approximate") as caught:  # growth/check.py, stages deep
        line = inspect.currentframe().f_lineno + 1
        kwiden.grow(small, 1, depth=2, allow_approximate=True, check=padded_batch())  # Post-LN blocks copied
    assert where(caught, "the grown model is approximate") == (__file__, line)


def test_no_module_but_messages_calls_warnings_warn():
    """kwiden warns through `messages.warn` alone, but in the shims of renamed
    modules (whose `stacklevel=2` names the importing line) and in the
    checkpoint modules, not moved over yet."""
    package = pathlib.Path(messages.__file__).parent
    elsewhere = {"messages.py", "plan.py", "growth/checkpoint.py", "checkpoints.py", "growth/streaming.py"}
    calls = [
        path.relative_to(package).as_posix()
        for path in sorted(package.rglob("*.py"))
        if "warnings.warn(" in path.read_text() and path.relative_to(package).as_posix() not in elsewhere
    ]
    assert not calls, calls
    assert not messages.kwidens(inspect.currentframe())
