"""The `--corpus` entries: the shipped English tutorial, Debian's Chinese fortunes and Python docs, or paths."""

import gzip
import pathlib
from importlib import resources

from kwiden.text.tokens import corpus_files

SHIPPED = "python_tutorial.txt.gz"
ZH_FILES = ("chinese", "song100", "tang300")
ZH_FOLDERS = ("/usr/share/games/fortunes", "/usr/share/games/fortunes/zh")
DOCS = "/usr/share/doc/python3.11/html/_sources"  # Debian's python3-doc: 11 MB of English


def corpus_paths(name, stack):
    """`(paths, description)` of a `--corpus` entry, or `(None, why)` where it is not there."""
    if name == "en":
        path = stack.enter_context(resources.as_file(resources.files("kwiden").joinpath("data", SHIPPED)))
        return [path], f"en: the shipped Python tutorial ({SHIPPED}, {text_bytes([path]):,} bytes)"
    if name == "zh":
        for folder in map(pathlib.Path, ZH_FOLDERS):
            paths = [folder / file for file in ZH_FILES]
            if all(p.is_file() for p in paths):
                return paths, f"zh: Debian's fortunes-zh ({', '.join(map(str, paths))}; {text_bytes(paths):,} bytes)"
        return None, (
            f"skipping corpus zh: Debian's fortunes-zh is not installed (no {'/'.join(ZH_FILES)} in "
            f"{' or '.join(ZH_FOLDERS)}); `apt-get install fortunes-zh` provides it"
        )
    if name == "docs":
        if not pathlib.Path(DOCS).is_dir():
            return None, f"skipping corpus docs: {DOCS} is not there; `apt-get install python3-doc` provides it"
        return [pathlib.Path(DOCS)], f"docs: Debian's python3-doc ({DOCS}, {text_bytes([DOCS]):,} bytes)"
    path = pathlib.Path(name)
    if not path.exists():
        return None, f"skipping corpus {name}: no such file or folder"
    return [path], f"{name}: {text_bytes([path]):,} bytes"


def text_bytes(paths):
    """The bytes of the text `kwiden.pretrain` reads from `paths` (its `corpus_files`): the byte tokenizer's tokens."""
    total = 0
    for path in corpus_files(paths):
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rb") as file:
            total += len(file.read())
    return total
