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
