"""The memory a process may still use, on the host and on the accelerator:
what growth, pretraining and generation check before they build what would
not fit."""

import pathlib
import shutil
import subprocess


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


def accelerated():
    """Whether Keras computes on a GPU or TPU (its memory, not the host's, holds the model)."""
    import keras  # here, not at the top: the command line reads its arguments before a backend loads

    devices = keras.distribution.list_devices()
    return any(kind in device.lower() for device in devices for kind in ("gpu", "tpu", "cuda"))


def device_memory(backend=None):
    """Bytes free on the first accelerator the backend computes on, or None
    on a CPU or where the backend does not say: JAX's `bytes_limit` less
    `bytes_in_use`; PyTorch's free CUDA memory plus what its cache holds
    unused; TensorFlow's device total (from `nvidia-smi`, which TensorFlow
    has no call for) less what TensorFlow holds, the device taken as this
    process's alone."""
    import keras

    backend = backend or keras.backend.backend()
    try:
        return {"jax": _jax_free, "torch": _torch_free, "tensorflow": _tensorflow_free}.get(backend, _unknown)()
    except (RuntimeError, ValueError, KeyError, OSError, AttributeError, subprocess.SubprocessError):
        return None


def _unknown():
    return None


def _jax_free():
    import jax

    device = jax.devices()[0]
    stats = device.memory_stats() if device.platform != "cpu" else None
    return None if not stats or "bytes_limit" not in stats else stats["bytes_limit"] - stats.get("bytes_in_use", 0)


def _torch_free():
    import torch

    if not torch.cuda.is_available():
        return None
    free, _ = torch.cuda.mem_get_info()
    return free + torch.cuda.memory_reserved() - torch.cuda.memory_allocated()


def _tensorflow_free():
    import tensorflow as tf

    if not tf.config.list_logical_devices("GPU"):
        return None
    total = nvidia_total_memory()
    return None if total is None else max(0, total - tf.config.experimental.get_memory_info("GPU:0")["current"])


def nvidia_total_memory(run=subprocess.run):
    """The first NVIDIA GPU's memory in bytes, as `nvidia-smi` reports it, or None without it."""
    if shutil.which("nvidia-smi") is None:
        return None
    query = ["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits", "--id=0"]
    result = run(query, capture_output=True, text=True, timeout=10)
    text = result.stdout.strip() if result.returncode == 0 else ""
    return int(float(text)) * 2**20 if text.replace(".", "", 1).isdigit() else None  # MiB


UNITS = {"B": 1, "kB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12}


def readable_size(size, smallest="GB"):
    """`size` bytes as a person reads them: in the largest unit from
    `smallest` up that it holds one of (`smallest` where it holds none)."""
    units = [unit for unit, scale in UNITS.items() if scale >= UNITS[smallest]]
    unit = next((unit for unit in reversed(units) if size >= UNITS[unit]), units[0])
    return f"{size / UNITS[unit]:.3g} {unit}"
