"""The memory a process may still use: what growth and pretraining check
before they build a model that would not fit."""

import pathlib


def available_memory(proc="/proc", cgroups="/sys/fs/cgroup"):
    """Bytes of memory available now, or None where unknown: Linux'
    MemAvailable, or less where the process's cgroup (v2 `memory.max`, v1
    `memory.limit_in_bytes`, or a parent's) caps it: a container started
    with `-m 2g` kills a process past its limit however much the machine has.
    Reclaimable page cache (`inactive_file`) counts as available, as the
    kernel frees it before killing anyone. `proc` and `cgroups` are where
    those files are mounted."""
    known = [n for n in (_meminfo_available(proc), _cgroup_available(proc, cgroups)) if n is not None]
    return min(known) if known else None


def _meminfo_available(proc):
    for line in _lines(pathlib.Path(proc) / "meminfo"):
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return None


# Per cgroup version: the limit's file, the usage's, and the page-cache line of memory.stat.
CGROUP_FILES = {2: ("memory.max", "memory.current", "inactive_file"),
                1: ("memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file")}  # fmt: skip
# A v1 limit this large is none (the kernel's "unlimited", rounded to pages).
NO_LIMIT = 2**60


def _cgroup_available(proc, cgroups):
    """The least memory any cgroup holding this process leaves it, or None."""
    room = []
    for line in _lines(pathlib.Path(proc) / "self" / "cgroup"):
        number, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if number == "0" and controllers == "":
            room += _room(pathlib.Path(cgroups), path, 2)
        elif "memory" in controllers.split(","):
            room += _room(pathlib.Path(cgroups) / "memory", path, 1)
    return min(room) if room else None


def _room(mount, path, version):
    """What each cgroup from `path` up to the mount leaves under its limit.
    A container sees its own cgroup at the mount's root, though
    /proc/self/cgroup names its host path: the root is read too."""
    limit_file, usage_file, cache_line = CGROUP_FILES[version]
    parts = [part for part in path.strip().strip("/").split("/") if part]
    folders = [mount.joinpath(*parts[:n]) for n in range(len(parts), -1, -1)]
    room = []
    for folder in dict.fromkeys(folders):
        limit, usage = _number(folder / limit_file), _number(folder / usage_file)
        if limit is None or usage is None or limit >= NO_LIMIT:
            continue
        cache = next(
            (int(line.split()[1]) for line in _lines(folder / "memory.stat") if line.split()[0] == cache_line), 0
        )
        room.append(max(0, limit - max(0, usage - cache)))
    return room


def _number(path):
    """The integer a cgroup file holds; None for "max", a missing file or anything else."""
    text = "".join(_lines(path)).strip()
    return int(text) if text.isdigit() else None


def _lines(path):
    try:
        with open(path, encoding="utf-8") as file:
            return [line for line in file if line.strip()]
    except (OSError, UnicodeDecodeError):
        return []


UNITS = {"B": 1, "kB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12}


def readable_size(size, smallest="GB"):
    """`size` bytes as a person reads them: in the largest unit from
    `smallest` up that it holds one of (`smallest` where it holds none)."""
    units = [unit for unit, scale in UNITS.items() if scale >= UNITS[smallest]]
    unit = next((unit for unit in reversed(units) if size >= UNITS[unit]), units[0])
    return f"{size / UNITS[unit]:.3g} {unit}"
