"""Safetensors files, read and written one tensor at a time (numpy only),
and checkpoints sharded across several of them."""

import json
import pathlib
import re

import numpy as np

from kwiden.arguments import is_count
from kwiden.checkpoints.formats import SAFETENSORS, SAFETENSORS_INDEX, Tensors, damaged
from kwiden.files import json_text, read_json


class SafetensorsTensors(Tensors):
    """The tensors of a safetensors file, or of the shards a
    `model.safetensors.index.json` names, read one by one (numpy arrays,
    bfloat16 as `ml_dtypes.bfloat16`) so that no more than one is held.
    `.files` maps each tensor to its file; `.shape(name)` and `.dtype(name)`
    read the header only."""

    def __init__(self, path):
        path = pathlib.Path(path)
        self.path = path
        self._handles = {}
        if path.name == SAFETENSORS_INDEX:
            self.files = {name: path.parent / file for name, file in read_index(path).items()}
        else:
            self.files = {name: path for name in self._open(path).keys()}
        for file in dict.fromkeys(self.files.values()):
            self._check_shard(file)

    def _check_shard(self, file):
        if not file.is_file():
            wanted = next(name for name, other in self.files.items() if other == file)
            raise FileNotFoundError(
                f"The shard {file} is missing: {self.path} names it for '{wanted}' and other tensors. "
                "Download or copy the whole checkpoint again."
            )
        held = set(self._open(file).keys())
        lacking = [name for name, other in self.files.items() if other == file and name not in held]
        if lacking:
            raise ValueError(
                f"{self.path} says '{lacking[0]}' is in {file}, which does not hold it: the index and its shards "
                "come from different checkpoints. Download or copy the whole checkpoint again."
            )

    def _open(self, file):
        from safetensors import SafetensorError, safe_open

        if file not in self._handles:
            try:
                self._handles[file] = safe_open(str(file), framework="numpy")
            except (SafetensorError, OSError) as error:
                raise ValueError(damaged(file, error)) from None
        return self._handles[file]

    def __getitem__(self, name):
        from safetensors import SafetensorError

        file = self.files[name]
        try:
            return self._open(file).get_tensor(name)
        except (SafetensorError, OSError) as error:
            raise ValueError(damaged(file, f"reading '{name}' failed: {error}")) from None

    def shape(self, name):
        return tuple(self._open(self.files[name]).get_slice(name).get_shape())

    @property
    def names(self):
        return self.files

    def release(self):
        """Close the files opened so far (they are mapped into memory, and the
        pages read stay resident while they are open); they reopen when read."""
        self._handles.clear()

    def dtype(self, name):
        """The tensor's dtype as safetensors names it (`"F32"`, `"BF16"`)."""
        return self._open(self.files[name]).get_slice(name).get_dtype()


def read_index(path):
    """`{tensor: shard file name}` from a `model.safetensors.index.json`, checked."""
    problem = f"{path} is not a safetensors index kwiden can read"
    index = read_json(path, problem, "download or copy the checkpoint again")
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict) or not all(
        isinstance(file, str) and pathlib.Path(file).name == file and file.endswith(".safetensors")
        for file in weight_map.values()
    ):
        raise ValueError(f"{problem}: it needs a `weight_map` from each tensor to a .safetensors file beside it.")
    return weight_map


# numpy's dtype names as safetensors spells them.
SAFETENSORS_DTYPES = {"float64": "F64", "float32": "F32", "float16": "F16", "bfloat16": "BF16", "int64": "I64",
                      "int32": "I32", "int16": "I16", "int8": "I8", "uint8": "U8", "bool": "BOOL"}  # fmt: skip


class SafetensorsWriter:
    """One safetensors file written tensor by tensor, so that no more than one
    is held: the header first, from every tensor's name, dtype and shape
    (`specs`, in the order they will come), then each tensor's bytes as
    `write` is given it. `close` raises unless every tensor came, in order,
    with the dtype and shape announced.

    >>> import tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "model.safetensors"
    >>> with SafetensorsWriter(path, [("b", "float32", (2,)), ("a", "float32", (1, 2))]) as writer:
    ...     writer.write("b", np.ones(2, "float32"))
    ...     writer.write("a", np.zeros((1, 2), "float32"))
    >>> SafetensorsTensors(path)["a"]
    array([[0., 0.]], dtype=float32)
    """

    def __init__(self, path, specs, metadata=None):
        self.path = pathlib.Path(path)
        self.specs = [(name, np.dtype(dtype), tuple(int(n) for n in shape)) for name, dtype, shape in specs]
        header, offset = {"__metadata__": dict(metadata or {"format": "pt"})}, 0
        for name, dtype, shape in self.specs:
            if dtype.name not in SAFETENSORS_DTYPES:
                raise ValueError(f"'{name}' is {dtype.name}, which safetensors files do not hold.")
            size = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
            header[name] = {"dtype": SAFETENSORS_DTYPES[dtype.name], "shape": list(shape),
                            "data_offsets": [offset, offset + size]}  # fmt: skip
            offset += size
        text = json.dumps(header, separators=(",", ":")).encode("utf-8")
        text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned, as safetensors' own writer has it
        self.file = open(self.path, "wb")
        self.file.write(len(text).to_bytes(8, "little") + text)
        self.written = 0

    def write(self, name, value):
        if self.written == len(self.specs):
            raise ValueError(f"{self.path}: '{name}' was not announced; the file holds {len(self.specs)} tensors.")
        expected, dtype, shape = self.specs[self.written]
        value = np.asarray(value)
        if (name, value.dtype, tuple(value.shape)) != (expected, dtype, shape):
            raise ValueError(
                f"{self.path}: tensor {self.written} is '{expected}' ({dtype.name}, {shape}), given '{name}' "
                f"({value.dtype.name}, {tuple(value.shape)})."
            )
        self.file.write(np.ascontiguousarray(value).reshape(-1).view(np.uint8).data)
        self.written += 1

    def close(self):
        self.file.close()
        if self.written != len(self.specs):
            raise ValueError(f"{self.path}: {self.written} of its {len(self.specs)} tensors were written.")

    def __enter__(self):
        return self

    def __exit__(self, kind, error, traceback):
        if kind is None:
            self.close()
        else:
            self.file.close()


# Hugging Face's default shard size (transformers' `save_pretrained`).
MAX_SHARD_SIZE = "5GB"


def shard_bytes(size):
    """A shard size in bytes from an int or a string such as `"5GB"` or `"500MiB"`.

    >>> shard_bytes("5GB"), shard_bytes("1.5 KiB"), shard_bytes(100)
    (5000000000, 1536, 100)
    """
    if is_count(size, 1):
        return int(size)
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmg]?)(i?)b?\s*", str(size), re.IGNORECASE)
    if not match or float(match.group(1)) <= 0 or (match.group(3) and not match.group(2)):
        raise ValueError(f"`max_shard_size` must be a number of bytes or a size such as '5GB', got {size!r}.")
    prefix, binary = match.group(2).upper(), match.group(3)
    return int(float(match.group(1)) * (2**10 if binary else 10**3) ** " KMG".index(prefix or " "))


def shards(specs, limit):
    """`[(file name, [spec])]` for tensor `specs` (`(name, dtype, shape)`, in
    the order they are written): consecutive tensors, at most `limit` bytes a
    file (a larger tensor gets a file of its own); `model.safetensors` where
    one file holds them all, else Hugging Face's `model-00001-of-00003.safetensors`."""
    groups, size = [], 0
    for spec in specs:
        nbytes = _nbytes(spec)
        if not groups or (size + nbytes > limit and groups[-1]):
            groups.append([])
            size = 0
        groups[-1].append(spec)
        size += nbytes
    if len(groups) <= 1:
        return [(SAFETENSORS, groups[0] if groups else [])]
    return [(f"model-{i + 1:05d}-of-{len(groups):05d}.safetensors", group) for i, group in enumerate(groups)]


def write_shards(folder, files, value_of, written=None):
    """Write `shards`' `files` into `folder`, each tensor's value asked of
    `value_of(name)` as its turn comes (so that one is held at a time), and
    the index where there are several files. `written(value)` is called after
    each tensor (a progress bar's update)."""
    for file, specs in files:
        with SafetensorsWriter(pathlib.Path(folder) / file, specs) as writer:
            for name, _, _ in specs:
                value = value_of(name)
                writer.write(name, value)
                if written is not None:
                    written(value)
                del value
    if len(files) > 1:
        index = {
            "metadata": {"total_size": sum(_nbytes(spec) for _, specs in files for spec in specs)},
            "weight_map": {name: file for file, specs in files for name, _, _ in specs},
        }
        (pathlib.Path(folder) / SAFETENSORS_INDEX).write_text(json_text(index, SAFETENSORS_INDEX), encoding="utf-8")


def _nbytes(spec):
    _, dtype, shape = spec
    return int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
