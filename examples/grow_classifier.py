"""Fine-tune a small BERT classifier, grow it x2 with its head, keep training.

The task, on the text that ships with kwiden: is a 64-byte window real text
(label 1) or the same bytes shuffled (label 0)? A plain Keras `Dense` head on
the pooler grows with its output width kept.

    python examples/grow_classifier.py [--steps 200] [--grow-steps 100]
"""

import argparse

import keras
import numpy as np

import kwiden
from kwiden import optimizers
from kwiden.text import corpus


def dataset(ids, count, rng, length=64):
    x, _ = corpus.windows(ids, length, count, rng)
    labels = rng.integers(0, 2, count)
    for row in np.flatnonzero(labels == 0):
        rng.shuffle(x[row])
    return [x, np.zeros_like(x)], labels


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--grow-steps", type=int, default=100)
    parser.add_argument("--batch", type=int, default=32)
    args = parser.parse_args(argv)
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    ids = corpus.encode(corpus.load_text())
    split = int(0.9 * len(ids))
    x_train, y_train = dataset(ids[:split], (args.steps + args.grow_steps) * args.batch, rng)
    x_valid, y_valid = dataset(ids[split:], 512, rng)

    config = dict(
        vocab_size=corpus.VOCAB_SIZE,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        max_position_embeddings=64,
        layer_norm_eps=1e-5,
    )
    bert = kwiden.build_transformer_model(config, with_pool=True)
    probs = keras.layers.Dense(2, activation="softmax", name="Classifier")(bert.outputs[1])
    small = keras.Model(bert.inputs, probs)
    small.compile(optimizers.AdamW(1e-3, weight_decay=0.01), "sparse_categorical_crossentropy", metrics=["accuracy"])
    n = args.steps * args.batch
    small.fit([x[:n] for x in x_train], y_train[:n], batch_size=args.batch, verbose=0)
    _, small_accuracy = small.evaluate(x_valid, y_valid, verbose=0)

    big, optimizer = kwiden.grow(small, 2, check=[x[:4] for x in x_valid], spread=1.0, optimizer=small.optimizer)
    big.compile(optimizer, "sparse_categorical_crossentropy", metrics=["accuracy"])
    _, grown_accuracy = big.evaluate(x_valid, y_valid, verbose=0)
    big.fit([x[n:] for x in x_train], y_train[n:], batch_size=args.batch, verbose=0)
    _, big_accuracy = big.evaluate(x_valid, y_valid, verbose=0)

    print(f"small (hidden 32), {args.steps} steps: accuracy {small_accuracy:.4f}, {small.count_params():,} params")
    print(f"grown x2 (hidden 64), no training:  accuracy {grown_accuracy:.4f}, {big.count_params():,} params")
    print(f"grown, +{args.grow_steps} steps:             accuracy {big_accuracy:.4f}")
    return small_accuracy, grown_accuracy, big_accuracy


if __name__ == "__main__":
    main()
