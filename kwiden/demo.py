"""`kwiden demo`: train a small GPT on shipped text, grow it ×2, train on.

The growth breaks the copies' symmetry exactly (`spread=1.0`) and carries the
optimizer over (grown Adam state, per-tensor learning rates), so training goes
on from where the small model stood.
"""

import time

import keras
import numpy as np

import kwiden
from kwiden import corpus, optimizers

LOSS = keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def run(steps=300, grow_steps=150, factor=2, batch_size=32, length=64, hidden_size=64, seed=0, verbose=1):
    """Returns the table's rows as dicts; prints progress and the table."""
    keras.utils.set_random_seed(seed)
    rng = np.random.default_rng(seed)
    ids = corpus.encode(corpus.load_text())
    split = int(0.9 * len(ids))
    train_ids, valid = ids[:split], ids[split:]
    x_valid, y_valid = corpus.windows(valid, length, 256, rng)
    config = corpus.gpt_config(hidden_size, 2, length)
    small = kwiden.build_transformer_model(config, model="gpt")
    small.compile(optimizers.Adam(2e-3), LOSS)

    def train(model, steps):
        """Fit on `steps` fresh batches; the seconds it took and the validation loss."""
        start = time.perf_counter()
        x, y = corpus.windows(train_ids, length, steps * batch_size, rng)
        model.fit(x, y, batch_size=batch_size, epochs=1, verbose=verbose)
        return time.perf_counter() - start, model.evaluate(x_valid, y_valid, batch_size=64, verbose=0)

    print(f"Training the small model (hidden {hidden_size}) for {steps} steps of {batch_size}×{length} bytes")
    small_time, small_loss = train(small, steps)

    print(f"Growing ×{factor}")
    start = time.perf_counter()
    big, optimizer = kwiden.grow(small, factor, check=x_valid[:8], spread=1.0, seed=seed, optimizer=small.optimizer)
    grow_time = time.perf_counter() - start
    big.compile(optimizer, LOSS)
    grown_loss = big.evaluate(x_valid, y_valid, batch_size=64, verbose=0)

    print(f"Training the grown model (hidden {hidden_size * factor}) for {grow_steps} steps")
    big_time, big_loss = train(big, grow_steps)

    rows = [
        dict(stage=f"small, {steps} steps", params=small.count_params(), loss=small_loss, seconds=small_time),
        dict(stage=f"grown ×{factor}, no training", params=big.count_params(), loss=grown_loss, seconds=grow_time),
        dict(stage=f"grown, +{grow_steps} steps", params=big.count_params(), loss=big_loss, seconds=big_time),
    ]
    print()
    print(f"{'stage':<28}{'params':>10}{'valid loss':>13}{'seconds':>10}")
    for row in rows:
        print(f"{row['stage']:<28}{row['params']:>10,}{row['loss']:>13.4f}{row['seconds']:>10.1f}")
    print(
        f"\nLoss right after growth minus loss before: {grown_loss - small_loss:+.2e} "
        "(the grown model computes the same function)."
    )
    return rows
