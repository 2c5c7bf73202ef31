"""`save_checkpoint`: a kwiden model as a checkpoint other tools load,
written beside its folder and moved into place whole."""

import contextlib
import os
import pathlib
import re

import numpy as np

from kwiden import messages
from kwiden.checkpoints.companions import (
    companion_files,
    copy_companions,
    refuse_stale_sentence_files,
    refuse_weighted_modules,
)
from kwiden.checkpoints.formats import (
    CONFIG_FILES,
    FORMAT_TITLES,
    FORMATS,
    GOOGLE_PREFIX,
    SAFETENSORS,
    SAFETENSORS_INDEX,
    describe,
    google_files,
    weight_files,
)
from kwiden.checkpoints.google import write_google
from kwiden.checkpoints.manifest import MANIFEST, write_manifest
from kwiden.checkpoints.reading import check_format, family_for, no_place, nonfinite, placed
from kwiden.checkpoints.safetensors import MAX_SHARD_SIZE, shard_bytes, shards, write_shards
from kwiden.files import give_mode, json_text, temporary_beside
from kwiden.models import naming
from kwiden.models.config import read_config_file
from kwiden.models.layout import Layout, join_parts, to_checkpoint


def save_checkpoint(
    model,
    directory,
    format="hf",
    family=None,
    allow_nonfinite=False,
    base_config=None,
    max_shard_size=None,
    copy_from="auto",
):
    """Write a kwiden model (built, loaded, fine-tuned or grown) as a
    checkpoint other tools load: `format="hf"` writes `config.json` and
    `model.safetensors` (BERT, RoFormer, GPT-2, LLaMA, Mistral, Qwen2: what
    `transformers.AutoModel*.from_pretrained` loads), `"google"` writes
    `bert_config.json` and `bert_model.ckpt.*` (BERT, RoFormer); both write
    `kwiden-manifest.json`, each file's size and sha256, which loading
    checks. Returns the directory.

    `base_config`: a `config.json` (a dict, its path, or its folder: the one
    the model was loaded from) whose keys kwiden does not write are kept:
    token ids (`bos_token_id`, `eos_token_id`), a rotary model's
    `max_position_embeddings`, the tokenizer's class and the like.

    `copy_from`: a folder whose tokenizer's, generation's and
    sentence-transformers' files (`kwiden.checkpoints.companion_files`) are
    copied beside the weights, a pooling's width made the model's; by
    default (`"auto"`) the folder the model was loaded from
    (`model.checkpoint_folder`, which `kwiden.grow` keeps), so a grown
    MiniLM keeps its vocab.txt and its mean pooling; None copies nothing.

    `max_shard_size`: Hugging Face folders only: the largest weight file, in
    bytes or as `"5GB"` (the default, as `transformers`' `save_pretrained`
    and `kwiden.grow_checkpoint`), `"500MB"`; more weights make shards
    (`model-00001-of-00002.safetensors`, …) and `model.safetensors.index.json`.

    `family`: the model's (a name or a `kwiden.models.Family`); by default the
    family recorded on the model (`kwiden.models.family_of`). The family writes the
    config (`to_hf_config`) and names the tensors (`checkpoint_names`).

    Nothing is lost and nothing half-written is visible: the files are
    written into a temporary sibling folder (`.<name>.kwiden-tmp-*`), which is
    removed if anything fails, leaving `directory` as it was. A new
    `directory` is that folder renamed, in one step. In an existing one,
    files of other names (a `vocab.txt`) stay; the manifest is moved in first,
    then each of kwiden's files replaces its old copy (one rename each), and
    an old Google checkpoint's files of the same prefix that the new one
    lacks are removed; were the process killed between those renames, loading
    would refuse the folder, naming the file that does not match the manifest.
    A folder that holds the other format's weights, or another Google
    checkpoint, is refused (saving would leave two checkpoints that loading
    could not choose between): save into another folder or delete them first.
    Weights with NaN or infinite values are refused, naming the variable,
    unless `allow_nonfinite=True`.

    BERT's config has one LayerNorm epsilon; a grown model's stream norms use
    ε/k and its MLM norm ε, so the most common value is written and a warning
    names the norms that differ. Google's own BERT code ignores the config's
    ε (1e-12 there) and uses tanh-GeLU where kwiden's "gelu" is exact; Hugging
    Face reads both from the config. Models with an MLM head are written as
    Hugging Face's `BertForMaskedLM` (encoder under `bert.`) or
    `RoFormerForMaskedLM`; decoders as their `*ForCausalLM` (GPT-2's
    `GPT2LMHeadModel`). Where a config cannot say what a model computes (a
    rotary model grown with `heads="size"`, decoder norms of different ε,
    biases the family does not have) the save is refused, naming what would.

    Example:

    >>> import kwiden, tempfile
    >>> bert = kwiden.build_transformer_model(
    ...     dict(vocab_size=50, hidden_size=8, num_hidden_layers=1, num_attention_heads=2))
    >>> folder = kwiden.save_checkpoint(bert, tempfile.mkdtemp())
    >>> sorted(p.name for p in folder.iterdir())
    ['config.json', 'kwiden-manifest.json', 'model.safetensors']
    >>> kwiden.save_checkpoint(bert, folder, format="google")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: ... holds Hugging Face's model.safetensors; saving Google's (bert_model.ckpt.*) weights beside ...
    """
    if format not in FORMATS:
        raise ValueError(f"`format` must be one of {FORMATS}, got format={format!r}.")
    if format == "google" and max_shard_size is not None:
        raise ValueError("`max_shard_size` shards Hugging Face folders; a Google checkpoint is one data file.")
    limit = shard_bytes(MAX_SHARD_SIZE if max_shard_size is None else max_shard_size)
    family = family_for(model, family)
    if family.to_hf_config is None:
        raise ValueError(no_place(family))
    directory = pathlib.Path(directory)
    _check_target(directory, format)
    copy_from = _copy_from(model, copy_from)
    width = model.get_layer(naming.EMBEDDING_TOKEN).output_dim
    if copy_from is not None:  # before anything is written
        refuse_weighted_modules(copy_from, width, SAVE_REMEDY)
    refuse_stale_sentence_files(directory, () if copy_from is None else companion_files(copy_from))
    config = family.to_hf_config(model, format)
    if base_config is not None:
        config = {**_base_config(base_config), **config}
    check_format(family, format)
    blocks = naming.count_blocks(layer.name for layer in model.layers)
    names = family.checkpoint_names(blocks, format, written_prefix(config, family))
    tensors, parts = {}, {}
    for _, variable, name, kind in placed(model, family, names):
        value = np.asarray(variable.numpy())
        bad = 0 if allow_nonfinite else nonfinite(value)
        if bad:
            raise ValueError(messages.nonfinite_weight(variable, bad))
        layout = Layout.of(kind, format)
        if layout.part is None:
            tensors[name] = np.ascontiguousarray(to_checkpoint(value, layout))
        else:
            parts.setdefault(name, [None] * layout.part[1])[layout.part[0]] = to_checkpoint(value, layout)
            if all(part is not None for part in parts[name]):
                tensors[name] = np.ascontiguousarray(join_parts(parts[name], layout))
    _write_atomically(directory, format, config, tensors, limit, copy_from, width)
    return directory


SAVE_REMEDY = "Save with copy_from=None (the tokenizer's files not copied either), or from a folder without it."


def _copy_from(model, copy_from):
    """The folder `save_checkpoint` copies companions from: `"auto"`, the one the model was loaded from (or
    none); else `copy_from`, which must be a folder, or None."""
    if isinstance(copy_from, str) and copy_from == "auto":
        return getattr(model, "checkpoint_folder", None)
    if copy_from is None:
        return None
    if not isinstance(copy_from, (str, os.PathLike)) or not pathlib.Path(copy_from).is_dir():
        raise ValueError(f"copy_from={copy_from!r}: give the folder whose tokenizer's files go beside the weights, "
                         "'auto' (the one the model was loaded from) or None.")  # fmt: skip
    return pathlib.Path(copy_from)


def _base_config(base_config):
    """The dict `save_checkpoint`'s `base_config` gives (a dict, a config file or its folder)."""
    if isinstance(base_config, dict):
        return dict(base_config)
    path = pathlib.Path(base_config)
    return read_config_file(path / CONFIG_FILES["hf"] if path.is_dir() else path)


def _check_target(directory, format):
    """Raise if `directory` is a file, or holds weights that are not the ones
    this save replaces: the other format's, or another Google checkpoint."""
    if directory.exists() and not directory.is_dir():
        raise ValueError(f"{directory} is a file; save_checkpoint writes a folder.")
    if not directory.is_dir():
        return
    own = (SAFETENSORS, SAFETENSORS_INDEX) if format == "hf" else (f"{GOOGLE_PREFIX}.index",)
    others = [name for name in weight_files(directory) if name not in own]
    if others:
        files = "; ".join(describe(directory, name) for name in others)
        raise ValueError(
            f"{directory} holds {files}; saving {FORMAT_TITLES[format]} weights beside them would leave two "
            "checkpoints that loading cannot choose between. Save into another folder, or delete those files first."
        )


def _write_atomically(directory, format, config, tensors, limit, copy_from, width):
    """Write the checkpoint into a temporary sibling folder, `copy_from`'s companions beside it (for a model
    `width` wide), then move it into `directory` (`save_checkpoint` says how)."""
    with written_atomically(directory, format) as temporary:
        if copy_from is not None:
            copy_companions(copy_from, temporary, width, SAVE_REMEDY)
        (temporary / CONFIG_FILES[format]).write_text(json_text(config, CONFIG_FILES[format]), encoding="utf-8")
        if format == "hf":
            specs = [(name, value.dtype, value.shape) for name, value in tensors.items()]
            write_shards(temporary, shards(specs, limit), tensors.__getitem__)
        else:
            write_google(tensors, temporary / GOOGLE_PREFIX)


@contextlib.contextmanager
def written_atomically(directory, format="hf"):
    """Yield a new temporary folder beside `directory` to write a checkpoint's
    files into; once the block ends without error, `kwiden-manifest.json`
    records every file at its top (a sub-folder's, such as
    sentence-transformers' `1_Pooling/`, is moved but not recorded) and they
    are moved into `directory`: a new
    `directory` is the temporary folder renamed, in one step
    (`save_checkpoint` says how an existing one is updated). The temporary
    folder is gone after, whatever happened; one left by a killed process is
    removed by the next save beside it (`kwiden.files`)."""
    target = pathlib.Path(directory).resolve()  # a link's target: the sibling is then on its file system
    # Made as any folder is (the umask's permissions, where `tempfile.mkdtemp` gives 0o700):
    # a new checkpoint folder is this one renamed.
    with temporary_beside(target, folder=True) as temporary:
        yield temporary
        files = sorted(p.name for p in temporary.iterdir() if p.is_file())
        for name in files:  # some writers (safetensors) make theirs readable by their owner alone
            give_mode(temporary / name, target / name)
        write_manifest(temporary, format, files)
        for name in (*files, MANIFEST):
            _sync(temporary / name)
        _move_into_place(temporary, target, files, format)


def _move_into_place(temporary, target, files, format):
    if not target.exists():
        try:
            os.rename(temporary, target)  # one step: the whole checkpoint or nothing
            _sync(target.parent)
            return
        except OSError:
            if not target.is_dir():  # not a folder made meanwhile by someone else
                raise
    stale = [name for name in _own_weight_files(target, format) if name not in files]
    # The manifest first: from here until the last rename, loading refuses the folder.
    os.replace(temporary / MANIFEST, target / MANIFEST)
    for name in files:
        os.replace(temporary / name, target / name)
    for path in sorted(temporary.rglob("*")):  # the files of sub-folders (1_Pooling/), which the manifest leaves out
        if path.is_file():
            (target / path.relative_to(temporary)).parent.mkdir(parents=True, exist_ok=True)
            os.replace(path, target / path.relative_to(temporary))
    for name in stale:
        (target / name).unlink()
    _sync(target)


def _own_weight_files(folder, format):
    """The weight files a save of `format` writes that `folder` holds: they
    go where the new checkpoint lacks them (its shards replace one file, or
    one file its shards)."""
    if format == "google":
        return google_files(folder, GOOGLE_PREFIX)
    shard = re.compile(r"model-\d{5}-of-\d{5}\.safetensors")
    return [p.name for p in folder.iterdir() if p.name in (SAFETENSORS, SAFETENSORS_INDEX) or shard.fullmatch(p.name)]


def _sync(path):
    """Flush a file, or a folder's entries, to the disk (where the system allows it)."""
    try:
        descriptor = os.open(path, os.O_RDONLY)
    except OSError:  # Windows opens no folders
        return
    try:
        os.fsync(descriptor)
    except OSError:
        pass
    finally:
        os.close(descriptor)


def written_prefix(config, family):
    """Hugging Face task models (`BertForMaskedLM`) hold the base model under
    a prefix (the family's `hf_prefix`, else its `model_type`: `bert.`)
    beside their heads; base models (`BertModel`) at the top."""
    if family.hf_prefix is not None:
        return family.hf_prefix
    architecture = (config.get("architectures") or ["Model"])[0]
    return "" if architecture.endswith("Model") else f"{config['model_type']}."
