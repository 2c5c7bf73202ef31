"""Pretrained BERT weights into kwiden's models: Hugging Face folders
(`config.json` + `model.safetensors`, read with numpy only).

Each kwiden variable is named by its layer and weight (`Transformer-0-
MultiHeadSelfAttention/query_kernel`); `bert_names` says which checkpoint
tensor fills it and how it is reshaped. Loading is all or nothing: a missing
tensor or a wrong shape raises before any weight is assigned.
"""

import pathlib

import numpy as np

SAFETENSORS = "model.safetensors"


def find_checkpoint(checkpoint_path):
    """The safetensors file of `checkpoint_path` (a folder or the file)."""
    path = pathlib.Path(checkpoint_path)
    if path.is_dir():
        if (path / SAFETENSORS).exists():
            return path / SAFETENSORS
        if any(path.glob("*.ckpt*.index")):
            raise ValueError(
                f"{path} holds a Google TensorFlow checkpoint (*.ckpt.index); kwiden reads Hugging "
                "Face folders (config.json + model.safetensors) so far."
            )
        raise FileNotFoundError(f"No {SAFETENSORS} in {path}: a Hugging Face BERT folder holds one.")
    if path.suffix == ".safetensors" and path.exists():
        return path
    raise FileNotFoundError(f"Checkpoint {path} not found (a folder with {SAFETENSORS}, or that file).")


def read_safetensors(path):
    from safetensors.numpy import load_file

    return load_file(str(path))


def bert_names(config, prefix=""):
    """`{(layer, weight): (tensor name, transform)}` for a Hugging Face BERT.

    Hugging Face's Linear weights are `(out, in)`; kwiden's kernels are
    `(in, out)`, with attention's split into `(in, heads, head_size)`.
    """
    heads, size = config["num_attention_heads"], config["attention_head_size"]
    linear = np.transpose

    def split_out(w):
        return w.T.reshape(w.shape[1], heads, size)

    def split_in(w):
        return w.T.reshape(heads, size, w.shape[0])

    def split_bias(b):
        return b.reshape(heads, size)

    def norm(layer, name):
        return {(layer, "gamma"): (f"{name}.weight", None), (layer, "beta"): (f"{name}.bias", None)}

    e = f"{prefix}embeddings"
    names = {
        ("Embedding-Token", "embeddings"): (f"{e}.word_embeddings.weight", None),
        ("Embedding-Segment", "embeddings"): (f"{e}.token_type_embeddings.weight", None),
        ("Embedding-Position", "embeddings"): (f"{e}.position_embeddings.weight", None),
        **norm("Embedding-Norm", f"{e}.LayerNorm"),
        ("Pooler-Dense", "kernel"): (f"{prefix}pooler.dense.weight", linear),
        ("Pooler-Dense", "bias"): (f"{prefix}pooler.dense.bias", None),
        ("MLM-Dense", "kernel"): ("cls.predictions.transform.dense.weight", linear),
        ("MLM-Dense", "bias"): ("cls.predictions.transform.dense.bias", None),
        **norm("MLM-Norm", "cls.predictions.transform.LayerNorm"),
        ("MLM-Bias", "bias"): ("cls.predictions.bias", None),
    }
    for i in range(config["num_hidden_layers"]):
        hf, attention, ffn = f"{prefix}encoder.layer.{i}", f"Transformer-{i}-MultiHeadSelfAttention", f"Transformer-{i}-FeedForward"
        for projection in ("query", "key", "value"):
            names[attention, f"{projection}_kernel"] = (f"{hf}.attention.self.{projection}.weight", split_out)
            names[attention, f"{projection}_bias"] = (f"{hf}.attention.self.{projection}.bias", split_bias)
        names[attention, "output_kernel"] = (f"{hf}.attention.output.dense.weight", split_in)
        names[attention, "output_bias"] = (f"{hf}.attention.output.dense.bias", None)
        names.update(norm(f"{attention}-Norm", f"{hf}.attention.output.LayerNorm"))
        names[ffn, "inner_kernel"] = (f"{hf}.intermediate.dense.weight", linear)
        names[ffn, "inner_bias"] = (f"{hf}.intermediate.dense.bias", None)
        names[ffn, "output_kernel"] = (f"{hf}.output.dense.weight", linear)
        names[ffn, "output_bias"] = (f"{hf}.output.dense.bias", None)
        names.update(norm(f"{ffn}-Norm", f"{hf}.output.LayerNorm"))
    return names


def load_bert_weights(model, config, checkpoint_path):
    """Fill every weight of the kwiden BERT `model` from a Hugging Face checkpoint.

    Raises, naming the variable, before assigning anything if a tensor is
    missing or has the wrong shape.
    """
    tensors = read_safetensors(find_checkpoint(checkpoint_path))
    prefix = "bert." if "bert.embeddings.word_embeddings.weight" in tensors else ""
    names = bert_names(config, prefix)
    values = []
    for layer in model.layers:
        for variable in layer.weights:
            key = (layer.name, variable.name)
            if key not in names:
                raise ValueError(f"kwiden does not know which checkpoint tensor fills '{variable.path}'.")
            name, transform = names[key]
            if name not in tensors:
                head = " (build without that head, or use a checkpoint that has it)" if layer.name.startswith(("MLM", "Pooler")) else ""
                raise ValueError(f"The checkpoint {checkpoint_path} has no tensor '{name}' for '{variable.path}'{head}.")
            value = tensors[name] if transform is None else transform(tensors[name])
            if tuple(value.shape) != tuple(variable.shape):
                raise ValueError(
                    f"'{variable.path}' has shape {tuple(variable.shape)} but the checkpoint's '{name}' "
                    f"gives {tuple(value.shape)}: the config does not match the checkpoint."
                )
            values.append((variable, value))
    for variable, value in values:
        variable.assign(value.astype(variable.dtype))
    return model
