"""Files written whole or not at all."""

import contextlib
import json
import math
import os
import pathlib


@contextlib.contextmanager
def replaced_atomically(path):
    """Yield a temporary path beside `path` to write the new file to; once the
    block ends without error it replaces `path` in one rename. If the block
    fails, the temporary file is removed and `path` is as it was.

    >>> import pathlib, tempfile
    >>> target = pathlib.Path(tempfile.mkdtemp()) / "table.txt"
    >>> with replaced_atomically(target) as temporary:
    ...     _ = temporary.write_text("done")
    >>> target.read_text()
    'done'
    """
    path = pathlib.Path(path)
    # The suffix is kept: writers such as Keras' save and matplotlib's savefig read it.
    temporary = path.with_name(f".{path.stem}.{os.getpid()}.tmp{path.suffix}")
    try:
        yield temporary
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


def read_text(path, what, wanted, in_folder=None, not_utf8=""):
    """The UTF-8 text of the file at `path`, or one error that calls it `what`
    ("The vocabulary …") and says what to give instead (`wanted`; for a folder,
    `in_folder` where given) when it is a folder, is missing, or is not UTF-8
    (`not_utf8` ends that sentence)."""
    path = pathlib.Path(path)
    if path.is_dir():
        raise ValueError(f"{what} {path} is a folder; give {in_folder or wanted}.")
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise FileNotFoundError(f"{what} {path} does not exist; give {wanted}.") from None
    except UnicodeDecodeError as error:
        raise ValueError(f"{what} {path} is not UTF-8 text (at byte offset {error.start}){not_utf8}.") from None


def find_key(value, test, path=""):
    """`(dotted key, item)` of the first item inside a JSON-like `value`
    (`rope_parameters.rope_theta`, `a[2]`) for which `test` holds, or None."""
    if isinstance(value, dict):
        items = ((f"{path}.{key}" if path else str(key), item) for key, item in value.items())
    elif isinstance(value, (list, tuple)):
        items = ((f"{path}[{index}]", item) for index, item in enumerate(value))
    else:
        return (path, value) if test(value) else None
    return next(filter(None, (find_key(item, test, key) for key, item in items)), None)


def json_text(value, what):
    """`value` as indented JSON text; refused, naming the key, where it holds
    NaN or an infinity, which JSON has no word for (Python would write a bare
    `Infinity`, which other readers refuse).

    >>> json_text({"rope_theta": float("inf")}, "The config.json")
    Traceback (most recent call last):
    ...
    ValueError: The config.json would hold rope_theta=inf, which JSON cannot say; nothing was written. Give it a finite value.
    """
    found = find_key(value, lambda item: isinstance(item, float) and not math.isfinite(item))
    if found is not None:
        raise ValueError(
            f"{what} would hold {found[0]}={found[1]!r}, which JSON cannot say; nothing was written. "
            "Give it a finite value."
        )
    return json.dumps(value, indent=2, allow_nan=False) + "\n"
