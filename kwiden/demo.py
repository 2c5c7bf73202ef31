"""`kwiden demo`: train a small GPT on shipped text, grow it ×2, train on,
and train the big model from scratch for the same compute to compare.

The growth is `kwiden.grow`'s default recipe (docs/growth-that-pays.md):
exact symmetry breaking and the optimizer carried over, so training goes on
from where the small model stood. Compute is counted in training FLOPs
(`kwiden.compute.flops_per_token`), the small model's included.
"""

import time

import keras
import numpy as np

import kwiden
from kwiden import corpus, optimizers
from kwiden.compute import flops_per_token

LOSS = keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def run(steps=300, grow_steps=150, factor=2, batch_size=32, length=64, hidden_size=64, seed=0, verbose=1):
    """Returns the table's rows as dicts; prints progress and the table."""
    keras.utils.set_random_seed(seed)
    rng = np.random.default_rng(seed)
    ids = corpus.encode(corpus.load_text())
    split = int(0.9 * len(ids))
    train_ids, valid = ids[:split], ids[split:]
    x_valid, y_valid = corpus.windows(valid, length, 256, rng)

    def gpt(hidden):
        """A compiled 2-block byte-level GPT of width `hidden`, fresh from its initialisers."""
        model = kwiden.build_transformer_model(corpus.gpt_config(hidden, 2, length), model="gpt")
        model.compile(optimizers.Adam(2e-3), LOSS)
        return model

    small = gpt(hidden_size)

    def train(model, steps):
        """Fit on `steps` fresh batches: the seconds it took, the validation loss and the FLOPs."""
        start = time.perf_counter()
        x, y = corpus.windows(train_ids, length, steps * batch_size, rng)
        model.fit(x, y, batch_size=batch_size, epochs=1, verbose=verbose)
        flops = steps * batch_size * length * flops_per_token(model, length)
        return time.perf_counter() - start, model.evaluate(x_valid, y_valid, batch_size=64, verbose=0), flops

    print(f"Training the small model (hidden {hidden_size}) for {steps} steps of {batch_size}×{length} bytes")
    small_time, small_loss, small_flops = train(small, steps)

    print(f"Growing ×{factor}")
    start = time.perf_counter()
    big, optimizer = kwiden.grow(small, factor, check=x_valid[:8], seed=seed, optimizer=small.optimizer)
    grow_time = time.perf_counter() - start
    big.compile(optimizer, LOSS)
    grown_loss = big.evaluate(x_valid, y_valid, batch_size=64, verbose=0)

    print(f"Training the grown model (hidden {hidden_size * factor}) for {grow_steps} steps")
    big_time, big_loss, big_flops = train(big, grow_steps)

    budget = small_flops + big_flops
    scratch_steps = round(budget / (batch_size * length * flops_per_token(big, length)))
    print(f"Training hidden {hidden_size * factor} from scratch for the same compute: {scratch_steps} steps")
    keras.utils.set_random_seed(seed)
    scratch = gpt(hidden_size * factor)
    scratch_time, scratch_loss, scratch_flops = train(scratch, scratch_steps)

    rows = [
        dict(stage=f"small, {steps} steps", params=small.count_params(), flops=small_flops, loss=small_loss,
             seconds=small_time),
        dict(stage=f"grown ×{factor}, no training", params=big.count_params(), flops=small_flops, loss=grown_loss,
             seconds=grow_time),
        dict(stage=f"grown, +{grow_steps} steps", params=big.count_params(), flops=budget, loss=big_loss,
             seconds=big_time),
        dict(stage=f"from scratch, {scratch_steps} steps", params=scratch.count_params(), flops=scratch_flops,
             loss=scratch_loss, seconds=scratch_time),
    ]  # fmt: skip
    print()
    print(f"{'stage':<28}{'params':>10}{'FLOPs':>11}{'valid loss':>13}{'seconds':>10}")
    for row in rows:
        print(f"{row['stage']:<28}{row['params']:>10,}{row['flops']:>11.3g}{row['loss']:>13.4f}{row['seconds']:>10.1f}")
    print(
        f"\nLoss right after growth minus loss before: {grown_loss - small_loss:+.2e} "
        "(the grown model computes the same function)."
    )
    print(
        f"At equal compute ({budget:.3g} FLOPs, the small model's included): grown {big_loss:.4f}, "
        f"from scratch {scratch_loss:.4f} ({big_loss - scratch_loss:+.4f})."
    )
    return rows
