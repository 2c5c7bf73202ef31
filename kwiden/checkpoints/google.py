"""Google's TensorFlow checkpoints (`bert_model.ckpt.*`), read and written
with TensorFlow's checkpoint ops; TensorFlow is imported only here, and only then."""

from kwiden.checkpoints.formats import Tensors, damaged


def read_google(path):
    """The tensors of the Google checkpoint at prefix `path`, read when asked for."""
    import tensorflow as tf  # only Google-format files need TensorFlow

    try:
        return GoogleTensors(tf.train.load_checkpoint(str(path)), path)
    except (tf.errors.OpError, IndexError, RuntimeError) as error:
        raise ValueError(damaged(path, error)) from None


class GoogleTensors(Tensors):
    """A Google checkpoint's tensors, read when asked for; a tensor that
    cannot be read (a truncated or damaged data file) raises a ValueError."""

    def __init__(self, reader, path):
        self.reader = reader
        self.path = path
        self.shapes = reader.get_variable_to_shape_map()
        self.names = self.shapes

    def shape(self, name):
        return tuple(self.shapes[name])

    def dtype(self, name):
        """The tensor's dtype as numpy names it (`"float32"`)."""
        if not hasattr(self, "dtypes"):
            self.dtypes = self.reader.get_variable_to_dtype_map()
        return self.dtypes[name].name

    def __getitem__(self, name):
        if name not in self.shapes:
            raise KeyError(name)
        import tensorflow as tf  # imported already: the reader is TensorFlow's

        try:
            return self.reader.get_tensor(name)
        except (tf.errors.OpError, IndexError, RuntimeError) as error:
            raise ValueError(damaged(self.path, f"reading '{name}' failed: {error}")) from None


def write_google(tensors, prefix):
    """Write `{name: array}` as the Google checkpoint `prefix` (`.index` and one data file)."""
    import tensorflow as tf  # only Google-format files need TensorFlow

    tf.raw_ops.SaveV2(
        prefix=str(prefix),
        tensor_names=list(tensors),
        shape_and_slices=[""] * len(tensors),
        tensors=[tf.constant(v) for v in tensors.values()],
    )
