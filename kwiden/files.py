"""Files written whole or not at all."""

import contextlib
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


def read_text(path, what, wanted, in_folder=None, not_utf8="", newline=None):
    """The UTF-8 text of the file at `path`, or one error that calls it `what`
    ("The vocabulary …") and says what to give instead (`wanted`; for a folder,
    `in_folder` where given) when it is a folder, is missing, or is not UTF-8
    (`not_utf8` ends that sentence). `newline` is `open`'s: None turns \r\n
    and \r into \n, "" keeps line endings as the file has them."""
    path = pathlib.Path(path)
    if path.is_dir():
        raise ValueError(f"{what} {path} is a folder; give {in_folder or wanted}.")
    try:
        with open(path, encoding="utf-8", newline=newline) as file:
            return file.read()
    except FileNotFoundError:
        raise FileNotFoundError(f"{what} {path} does not exist; give {wanted}.") from None
    except UnicodeDecodeError as error:
        raise ValueError(f"{what} {path} is not UTF-8 text (at byte offset {error.start}){not_utf8}.") from None
