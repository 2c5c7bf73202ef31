"""`fit_growing`: a growth schedule run inside training, resumable from its backups."""

import json
import shutil

import keras
import numpy as np
import pytest
from growing_runs import SCHEDULE, compile_for_growing, weighted_batches

import kwiden
from kwiden import optimizers


def batches(count=20):
    """`count` language-model micro-batches `(x, y)`, the same every time."""
    return [(x, y) for x, y, _ in weighted_batches(count)]


def compiled(gpt, accum_steps=1):
    return compile_for_growing(gpt(), accum_steps, metrics=["accuracy"])


class CrashAt(keras.callbacks.Callback):
    """Stand-in for a crash: raise once the optimizer has done `updates` updates."""

    def __init__(self, updates):
        super().__init__()
        self.updates = updates

    def on_train_batch_end(self, batch, logs=None):
        if int(self.model.optimizer.updates_done) >= self.updates:
            raise KeyboardInterrupt(f"crashed after update {self.updates}")


class StopAtEpoch(keras.callbacks.Callback):
    def __init__(self, epoch):
        super().__init__()
        self.epoch, self.epochs = epoch, []

    def on_epoch_end(self, epoch, logs=None):
        self.epochs.append(epoch)  # each stretch between growths is one epoch, numbered on
        if epoch == self.epoch:
            self.model.stop_training = True


def test_two_growths_train_and_carry_the_optimizer(gpt):
    small = compiled(gpt, accum_steps=2)
    width = small.get_layer("Embedding-Token").output_dim
    big, history = kwiden.fit_growing(small, batches(), SCHEDULE, steps=8, verbose=0)
    assert big.get_layer("Embedding-Token").output_dim == 2 * width
    assert kwiden.models.naming.count_blocks(layer.name for layer in big.layers) == 4  # 2 blocks, doubled
    assert int(big.optimizer.iterations) == 16 and int(big.optimizer.updates_done) == 8
    # The learning-rate schedule went on counting updates across both growths.
    assert big.optimizer.get_config()["learning_rate"] == small.optimizer.get_config()["learning_rate"]
    assert float(big.optimizer.learning_rate) == pytest.approx(float(optimizers.WarmupDecay(3e-3, 2, 10)(8)))
    assert len(history["loss"]) == 3 and len(history["accuracy"]) == 3  # three stretches of fit
    assert big.get_compile_config()["metrics"] == ["accuracy"]


def test_several_steps_a_call_reach_every_growth_and_train_the_same_weights(gpt, straight):
    """Stretches of 3 and 3 updates in calls of 4 (`steps_per_execution`): each stretch's short last call counts
    the batches it ran, not the 4 Keras names it by."""
    several = compiled(gpt)
    several.compile(several.optimizer, several.loss, metrics=["accuracy"], steps_per_execution=4)
    several, _ = kwiden.fit_growing(several, batches(), SCHEDULE, steps=9, verbose=0)
    assert int(several.optimizer.updates_done) == 9
    assert kwiden.models.naming.count_blocks(layer.name for layer in several.layers) == 4
    for a, b in zip(straight.model.get_weights(), several.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_resumes_after_a_growth_to_identical_weights(gpt, tmp_path, straight):
    with pytest.raises(KeyboardInterrupt, match="^crashed after update 5$"):
        kwiden.fit_growing(compiled(gpt), batches(), SCHEDULE, steps=9, verbose=0,
                           callbacks=[CrashAt(5)], backup_dir=tmp_path)  # fmt: skip
    # The backup is the model just after the first growth (update 3), not the crashed one.
    resumed, _ = kwiden.fit_growing(gpt(seed=7), batches(), SCHEDULE, steps=9, verbose=0, backup_dir=tmp_path)
    assert len(resumed.weights) == len(straight.model.weights)
    for a, b in zip(straight.model.get_weights(), resumed.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_resumes_from_a_backup_taken_before_a_growth(gpt, tmp_path, straight):
    stopped, _ = kwiden.fit_growing(compiled(gpt), batches(), SCHEDULE, steps=3, verbose=0, backup_dir=tmp_path)
    width = stopped.get_layer("Embedding-Token").output_dim
    assert width == gpt().get_layer("Embedding-Token").output_dim  # stopped at update 3, not grown yet
    resumed, _ = kwiden.fit_growing(stopped, batches(), SCHEDULE, steps=5, verbose=0, backup_dir=tmp_path)
    assert resumed.get_layer("Embedding-Token").output_dim == 2 * width
    # Where a straight run of 5 updates ends: the straight run of 9 at its update 5.
    for a, b in zip(straight.at_update_5, resumed.get_weights(), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_a_backup_made_under_another_schedule_is_refused(gpt, tmp_path, backup_at_update_2):
    shutil.copytree(backup_at_update_2, tmp_path, dirs_exist_ok=True)
    with pytest.raises(ValueError, match=r"made under another growth schedule .* pass the same schedule"):
        kwiden.fit_growing(compiled(gpt), batches(), {4: dict(k=2)}, steps=6, verbose=0, backup_dir=tmp_path)


def test_a_backup_folder_in_use_or_made_on_another_backend_is_refused(gpt, tmp_path, backup_at_update_2):
    from kwiden.files import FolderLock

    shutil.copytree(backup_at_update_2, tmp_path, dirs_exist_ok=True)
    lock = FolderLock(tmp_path)
    assert lock.acquire() == "locked"  # another run backing up there
    try:
        with pytest.raises(ValueError, match=r"`backup_dir` .* is in use by another process backing up there"):
            kwiden.fit_growing(compiled(gpt), batches(), SCHEDULE, steps=2, verbose=0, backup_dir=tmp_path)
    finally:
        lock.release()
    state = tmp_path / "kwiden-growing.json"
    other = "jax" if keras.backend.backend() != "jax" else "tensorflow"
    state.write_text(json.dumps({**json.loads(state.read_text()), "backend": other}))
    with pytest.raises(
        ValueError, match=rf"made on the {other} backend; resumed on {keras.backend.backend()} it would"
    ):
        kwiden.fit_growing(compiled(gpt), batches(), SCHEDULE, steps=2, verbose=0, backup_dir=tmp_path)


@pytest.mark.parametrize(
    "growths, message",
    [
        ({6: dict(k=2), 3: dict(depth=2)}, r"updates must be strictly increasing, got 6 then 3"),
        ({0: dict(k=2)}, r"updates must be integers >= 1, got 0"),
        ({2.5: dict(k=2)}, r"updates must be integers >= 1, got 2.5"),
        ({3: dict(k=2, optimizer=None)}, r"GrowthSchedule\[3\] has 'optimizer', which kwiden.grow does not take"),
        ({3: dict(width=2)}, r"has 'width', which kwiden.grow does not take .* it takes k, check"),
        ({3: 2}, r"GrowthSchedule\[3\] must be a dict of kwiden.grow's arguments, got 2"),
        ([(3, dict(k=2))], r"GrowthSchedule takes a dict \{update: dict\(k=2, …\)\}, got list"),
    ],
)
def test_bad_schedules_are_refused(growths, message):
    with pytest.raises(ValueError, match=message):
        kwiden.GrowthSchedule(growths)


def test_schedule_config_round_trips():
    schedule = kwiden.GrowthSchedule(SCHEDULE)
    assert kwiden.GrowthSchedule.from_config(schedule.get_config()).growths == schedule.growths


def test_bad_training_arguments_are_refused(gpt):
    with pytest.raises(ValueError, match=r"fit_growing needs a compiled model: call .*\.compile\(optimizer, loss\)"):
        kwiden.fit_growing(gpt(), batches(), SCHEDULE, steps=4)
    with pytest.raises(ValueError, match=r"`steps` must be an integer >= 0 \(parameter updates\), got steps=-1"):
        kwiden.fit_growing(compiled(gpt), batches(), SCHEDULE, steps=-1)
    with pytest.raises(ValueError, match=r"`data` holds 4 batches; fit_growing needs one per micro-step, 8 for"):
        kwiden.fit_growing(compiled(gpt), batches(4), SCHEDULE, steps=8, verbose=0)
    with pytest.raises(ValueError, match=r"`data` ran out after 4 batches; fit_growing needs one per micro-step"):
        kwiden.fit_growing(compiled(gpt), iter(batches(4)), SCHEDULE, steps=8, verbose=0)


def test_a_model_past_a_growth_point_is_refused(gpt):
    model = compiled(gpt)
    model.fit(batches(4)[0][0], batches(4)[0][1], batch_size=1, verbose=0)  # 4 updates
    with pytest.raises(ValueError, match=r"has done 4 updates, past the schedule's growth at update 3"):
        kwiden.fit_growing(model, batches(), SCHEDULE, steps=8, verbose=0)


def test_optimizers_it_cannot_follow_are_refused_before_training(gpt, tmp_path):
    model = gpt()
    model.compile(keras.optimizers.Adam(gradient_accumulation_steps=2), "mse")
    with pytest.raises(ValueError, match=r"Keras' gradient_accumulation_steps .* use kwiden.optimizers with accum"):
        kwiden.fit_growing(model, batches(), SCHEDULE, steps=8)
    model.compile(keras.optimizers.Adam(), "mse")
    with pytest.raises(ValueError, match=r"GrowthSchedule\[3\] asks for `rewarm`, which needs one of kwiden's"):
        kwiden.fit_growing(model, batches(), {3: dict(k=2, rewarm=10)}, steps=8)
    with pytest.raises(ValueError, match=r"GrowthSchedule\[3\] asks for `scale_learning_rates=True`, which needs one"):
        kwiden.fit_growing(model, batches(), {3: dict(k=2, scale_learning_rates=True)}, steps=8)
    (tmp_path / "file").write_text("")
    with pytest.raises(ValueError, match=r"`backup_dir` .*file is a file; give a folder"):
        kwiden.fit_growing(compiled(gpt), batches(), SCHEDULE, steps=8, backup_dir=tmp_path / "file")


def test_custom_losses_numpy_arguments_and_early_stopping(gpt, tmp_path):
    def my_loss(y_true, y_pred):  # not registered: the live object is reused, not deserialised
        return keras.losses.sparse_categorical_crossentropy(y_true, y_pred, from_logits=True)

    model = gpt()
    model.compile(optimizers.Adam(1e-3), my_loss)
    stop = StopAtEpoch(1)  # a callback that sets model.stop_training, as EarlyStopping does
    schedule = {2: dict(k=np.int64(2)), 4: dict(depth=2)}  # a numpy int, written to the backup as text
    big, history = kwiden.fit_growing(model, batches(), schedule, 8, callbacks=[stop], backup_dir=tmp_path, verbose=0)
    assert len(history["loss"]) == 2 and int(big.optimizer.iterations) == 4 and stop.epochs == [0, 1]
    assert kwiden.models.naming.count_blocks(layer.name for layer in big.layers) == 2  # the depth growth never came
    assert big.loss is my_loss


AUTO_TARGET = dict(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128,
                   max_position_embeddings=32, layer_norm_eps=1e-3)  # fmt: skip


@pytest.mark.parametrize("model, build", [("gpt", {}), ("bert", {"with_mlm": True}), ("llama", {})])
def test_auto_schedule_starts_small_grows_to_the_target_and_spends_the_budget(model, build):
    schedule = kwiden.GrowthSchedule.auto(AUTO_TARGET, budget=200, model=model, seq_len=32, **build)
    [growth] = schedule.growths
    update, arguments = growth.update, growth.arguments
    assert growth.fraction == 0.8  # the fraction of the run auto placed it at, kept
    assert abs(update - 0.8 * schedule.steps) <= 1
    if model == "bert":  # Post-LN: width, whose growth is exact
        assert (
            arguments == {"k": 2, "scale_learning_rates": None, "spread": 2.0, "relax_learning_rates": 0}
            and schedule.start_config["hidden_size"] == 16
        )
        assert (
            "width ×2 at 80%" in schedule.why
            and "width-aware learning rates held to the end and splits of spread 2" in schedule.why
        )
    else:  # Pre-LN: depth
        assert arguments == {"depth": 2} and schedule.start_config["num_hidden_layers"] == 1
        assert "depth ×2 at 80%" in schedule.why
    small = kwiden.build_transformer_model(schedule.start_config, model=model, **build)
    big = kwiden.grow(small, **arguments)
    target = kwiden.build_transformer_model(AUTO_TARGET, model=model, **build)
    assert sorted((w.path, w.shape) for w in big.weights) == sorted((w.path, w.shape) for w in target.weights)
    # equal FLOPs: the small model's updates and the target's after growth cost what 200 of the target's do
    small_cost, target_cost = (kwiden.training.compute.flops_per_token(m, 32) for m in (small, target))
    spent = update * small_cost + (schedule.steps - update) * target_cost
    assert 200 * target_cost - target_cost < spent <= 200 * target_cost


def test_auto_width_growth_trains_on_with_keras_own_adam():
    """A 3-block GPT widens; with Keras' Adam (one rate) it grows and trains on at one rate."""
    target = kwiden.testing.tiny_config(vocab_size=100, hidden_size=16, num_hidden_layers=3, intermediate_size=32)
    schedule = kwiden.GrowthSchedule.auto(target, budget=8, model="gpt", seq_len=8)
    assert [growth.arguments["k"] for growth in schedule.growths] == [2]
    small = kwiden.build_transformer_model(schedule.start_config, model="gpt")
    small.compile(keras.optimizers.Adam(1e-3), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    big, _ = kwiden.fit_growing(small, batches(), schedule, steps=schedule.steps, verbose=0)
    assert big.get_layer("Embedding-Token").embeddings.shape == (100, 16)
    assert isinstance(big.optimizer, keras.optimizers.Adam) and int(big.optimizer.iterations) == schedule.steps


def test_auto_schedule_of_a_target_that_does_not_halve_grows_nothing_and_says_why():
    odd = dict(AUTO_TARGET, hidden_size=30)  # heads of 15: no half width; BERT is Post-LN: no depth growth
    schedule = kwiden.GrowthSchedule.auto(odd, budget=50, model="bert")
    assert schedule.growths == [] and schedule.steps == 50 and schedule.why.startswith("none")
    assert schedule.start_config["hidden_size"] == 30
