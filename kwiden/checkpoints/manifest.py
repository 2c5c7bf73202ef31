"""What kwiden writes it can vouch for: `kwiden-manifest.json`, each file's
size and sha256, written with a checkpoint and checked wherever it is found."""

import hashlib
import pathlib
import re

from kwiden.arguments import is_count
from kwiden.files import json_text, read_json

MANIFEST = "kwiden-manifest.json"
MANIFEST_VERSION = 1


def verify_manifest(folder):
    """Check each file `folder`'s `kwiden-manifest.json` lists against its
    recorded size and sha256. Returns the names checked, or `()` where there
    is no manifest (a folder written by another tool). Raises naming the
    first file that is missing or differs.
    """
    folder = pathlib.Path(folder)
    path = folder / MANIFEST
    if not path.is_file():
        return ()
    files = _read_manifest(path)
    for name, record in files.items():
        file = folder / name
        if not file.is_file():
            raise FileNotFoundError(
                f"{file} is missing, though {path} lists it: the file was deleted, or a save into {folder} was "
                "interrupted. Save or download the checkpoint again."
            )
        size = file.stat().st_size
        if size != record["bytes"] or _sha256(file) != record["sha256"]:
            how = f"{size} bytes where {record['bytes']} were written" if size != record["bytes"] else "another sha256"
            raise ValueError(
                f"{file} is not the file kwiden wrote ({how}, says {MANIFEST}): it was damaged or changed since, or "
                "a save into this folder was interrupted. Save or download the checkpoint again; if another tool "
                f"rewrote it on purpose, delete {path}."
            )
    return tuple(files)


def _read_manifest(path):
    """`{file name: {"bytes": …, "sha256": …}}` from a manifest, checked."""
    problem = f"{path} is not a manifest kwiden can read"
    manifest = read_json(path, problem, "save the checkpoint again, or delete it to load unchecked")
    files = manifest.get("files") if isinstance(manifest, dict) else None
    if not isinstance(files, dict) or manifest.get("kwiden_manifest") != MANIFEST_VERSION:
        raise ValueError(
            f"{problem} (version {MANIFEST_VERSION}, with its files' sizes and sha256); save the checkpoint again."
        )
    for name, record in files.items():
        if (
            pathlib.Path(name).name != name
            or name in ("", ".", "..")
            or not isinstance(record, dict)
            or not is_count(record.get("bytes"))
            or not re.fullmatch(r"[0-9a-f]{64}", str(record.get("sha256")))
        ):
            raise ValueError(f"{problem}: its entry {name!r} is not a file name with bytes and a sha256.")
    return files


def _sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for chunk in iter(lambda: file.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def write_manifest(folder, format, files):
    records = {name: {"bytes": (folder / name).stat().st_size, "sha256": _sha256(folder / name)} for name in files}
    manifest = {"kwiden_manifest": MANIFEST_VERSION, "format": format, "files": records}
    (folder / MANIFEST).write_text(json_text(manifest, MANIFEST), encoding="utf-8")
