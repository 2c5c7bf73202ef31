"""Files written whole or not at all.

A file or folder is first written under a temporary name beside its target,
`.{name}.kwiden-tmp-{random}{suffix}`, created exclusively (a planted file
or link of that name is never followed) and locked (`flock`) while its
writer lives. A writer killed with `kill -9` cannot remove its temporary, but
its lock dies with it: the next write to the same target removes the
temporaries no live process holds, which only kwiden's own can be (the name
says kwiden's; the lock says whether its writer is gone).
"""

import contextlib
import hashlib
import json
import math
import os
import pathlib
import shutil
import stat
import uuid

try:
    import fcntl
except ImportError:  # Windows: no flock, so stale temporaries are left to the user
    fcntl = None

from kwiden.messages import warn

# Part of the name of every temporary file or folder kwiden writes.
TEMPORARY = ".kwiden-tmp-"


@contextlib.contextmanager
def replaced_atomically(path):
    """Yield a temporary path beside `path` to write the new file to; once the
    block ends without error it replaces `path` in one rename, keeping the
    mode of the file it replaces. If the block fails, the temporary file is
    removed and `path` is as it was.

    >>> import pathlib, tempfile
    >>> target = pathlib.Path(tempfile.mkdtemp()) / "table.txt"
    >>> with replaced_atomically(target) as temporary:
    ...     _ = temporary.write_text("done")
    >>> target.read_text(), [p.name for p in target.parent.iterdir()]
    ('done', ['table.txt'])
    """
    path = pathlib.Path(path)
    # The suffix is kept: writers such as Keras' save and matplotlib's savefig read it.
    with temporary_beside(path, suffix=path.suffix) as temporary:
        yield temporary
        give_mode(temporary, path)
        os.replace(temporary, path)


def give_mode(path, replaced):
    """Give `path` the mode of the file `replaced` it is to replace, or, where
    there is none, a new file's (0o666 less the umask)."""
    os.chmod(path, stat.S_IMODE(replaced.stat().st_mode) if replaced.is_file() else 0o666 & ~_umask())


def _umask():
    """The process's umask: Linux says it in /proc; elsewhere reading it means setting it for an instant."""
    try:
        with open("/proc/self/status", encoding="utf-8") as status:
            return next(int(line.split()[1], 8) for line in status if line.startswith("Umask:"))
    except (OSError, StopIteration, ValueError):
        mask = os.umask(0o022)
        os.umask(mask)
        return mask


@contextlib.contextmanager
def temporary_beside(target, suffix="", folder=False):
    """Yield a new, empty file (or, with `folder=True`, folder) beside
    `target`, held locked until the block ends and removed then unless the
    block moved it away. Stale temporaries of `target` (their writer dead)
    are removed first."""
    target = pathlib.Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    remove_stale(target, suffix)
    temporary, descriptor = _create_locked(target, suffix, folder)
    try:
        yield temporary
    finally:
        try:
            if folder and not temporary.is_symlink():
                shutil.rmtree(temporary, ignore_errors=True)
            else:
                temporary.unlink(missing_ok=True)
        finally:
            if descriptor is not None:
                os.close(descriptor)  # the lock goes last: until then no sweep takes it for stale


def _create_locked(target, suffix, folder):
    """`(path, descriptor or None)` of a new temporary beside `target`,
    created so that it cannot be an existing file or link, and locked where
    the file system has locks (else unlocked, and never swept)."""
    for _ in range(100):
        path = target.with_name(f".{target.name}{TEMPORARY}{uuid.uuid4().hex[:12]}{suffix}")
        try:
            if folder:
                path.mkdir()
                if fcntl is None:  # nothing to lock with (Windows, which opens no folders)
                    return path, None
                descriptor = os.open(path, os.O_RDONLY)
            else:
                # 0o666 less the umask, as any new file; O_EXCL refuses a name that exists, links included.
                descriptor = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR | NOFOLLOW, 0o666)
        except (FileExistsError, FileNotFoundError):  # taken, or swept in the instant after mkdir: another name
            continue
        lock = _lock(descriptor)
        if lock is not HELD and _same_file(descriptor, path):
            return path, descriptor  # locked, or on a file system without locks (an NFS folder)
        os.close(descriptor)  # a sweep took it in the instant between creating and locking: another name
    raise FileExistsError(f"No free name for a temporary file beside {target}.")


def remove_stale(target, suffix=""):
    """Remove the temporaries of `target` whose writer is gone (no live
    process holds their lock); returns their names."""
    target = pathlib.Path(target)
    return sweep(target.parent, f".{_escaped(target.name)}{TEMPORARY}*{_escaped(suffix)}", f"beside {target}")


def sweep(folder, pattern, where=None):
    """Remove the temporaries in `folder` matching the glob `pattern` (which
    names kwiden's: it holds `TEMPORARY`) whose writer is gone, with a
    warning naming them; returns their names. Where locks are not to be had
    (Windows, a file system without them), nothing is removed."""
    folder = pathlib.Path(folder)
    if fcntl is None or TEMPORARY not in pattern or not folder.is_dir():
        return []
    removed = [path.name for path in folder.glob(pattern) if _stale(path)]
    if removed:
        warn(
            f"Removed {len(removed)} temporary file(s) {where or f'in {folder}'} left by a kwiden process that was "
            f"killed: {', '.join(removed)}."
        )
    return removed


def _stale(path):
    """Whether `path` is a temporary no live process holds; if so, it is removed."""
    try:
        # Open for writing where it can be: file systems that emulate flock (NFS) lock only such files.
        descriptor = os.open(path, (os.O_RDONLY if path.is_dir() else os.O_RDWR) | NOFOLLOW)
    except OSError:  # gone meanwhile, a link, or not ours to open
        return False
    try:
        if _lock(descriptor) is not LOCKED or not _same_file(descriptor, path):
            return False
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink()
        return True
    except OSError:
        return False
    finally:
        os.close(descriptor)


# What `_lock` finds: the lock taken; a live process holding it; no lock to be had here.
LOCKED, HELD, UNLOCKABLE = "locked", "held", "unlockable"
NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


def _lock(descriptor):
    """Take `descriptor`'s lock without waiting."""
    if fcntl is None:
        return UNLOCKABLE
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return LOCKED
    except BlockingIOError:  # EWOULDBLOCK: a live process holds it
        return HELD
    except OSError:  # ENOLCK, ENOSYS, NFS' EBADF for a read-only descriptor: this file system has no locks
        return UNLOCKABLE


def _same_file(descriptor, path):
    """Whether `path` still names the file open as `descriptor` (not removed and made anew)."""
    try:
        return os.path.samestat(os.fstat(descriptor), os.stat(path, follow_symlinks=False))
    except OSError:
        return False


def _escaped(text):
    """`text` with glob's special characters matched literally."""
    return "".join(f"[{c}]" if c in "*?[" else c for c in text)


class FolderLock:
    """An exclusive `flock` on a folder itself (no lock file to write or
    leave behind), held until `release` or the process's end: the kernel
    drops the lock of a killed process, so a killed holder never blocks the
    next. `acquire` returns `LOCKED`, `HELD` (a live process holds it) or
    `UNLOCKABLE` (a file system without locks)."""

    def __init__(self, folder):
        self.folder = pathlib.Path(folder)
        self.descriptor = None

    def acquire(self):
        descriptor = os.open(self.folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        taken = _lock(descriptor)
        if taken is HELD:
            os.close(descriptor)
        else:
            self.descriptor = descriptor
        return taken

    def hold(self, in_use, without_locks):
        """Acquire the lock, or refuse: `ValueError(in_use())` where a live
        process holds it; where no lock is to be had, warn `without_locks`
        and go on."""
        taken = self.acquire()
        if taken is HELD:
            raise ValueError(in_use())
        if taken is not LOCKED:
            warn(without_locks)

    def release(self):
        if self.descriptor is not None:
            os.close(self.descriptor)  # closing drops the lock
            self.descriptor = None


def file_digest(path):
    """The SHA-256 of a file's bytes, read in chunks (about 0.7 s a GB where the
    processor has SHA instructions)."""
    with open(path, "rb") as file:
        return hashlib.file_digest(file, "sha256").hexdigest()


def append_text(path, text, what):
    """Append `text` to the file at `path` (made if missing), refusing a link
    there: a link planted in a folder kwiden writes must not send its lines
    into the file it points to. A file with another name (a hard link) is
    copied first, so that only this name's file grows."""
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | NOFOLLOW, 0o666)
    except OSError:
        if os.path.islink(path):
            raise ValueError(
                f"{what} {path} is a link; kwiden writes there only a file of its own: remove the link."
            ) from None
        raise
    if os.fstat(descriptor).st_nlink > 1:  # a hard link (a `cp -al` snapshot): appending would change the other name
        os.close(descriptor)
        with replaced_atomically(path) as temporary:
            shutil.copyfile(path, temporary)  # this name gets a copy of its own; the other keeps the file
        descriptor = os.open(path, os.O_WRONLY | os.O_APPEND | NOFOLLOW)
    with os.fdopen(descriptor, "a", encoding="utf-8") as file:
        file.write(text)
        file.flush()


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


def read_json(path, problem, remedy):
    """The JSON value in the file `path`; a ValueError saying `problem`, the
    parser's error and the `remedy` where it is not UTF-8 JSON."""
    try:
        return json.loads(pathlib.Path(path).read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"{problem} ({error}); {remedy}.") from None


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
