"""Bad input to growth, verify, Admin folding and the command line: each case
an adversarial user tried gets one clear error, and no file is lost."""

import math
import re

import keras
import numpy as np
import pytest

import kwiden
from kwiden import GrowthError, memory
from kwiden.cli import main
from kwiden.growth import plan as growth_plan
from kwiden.growth.options import resolve
from kwiden.layers import ExpandableEmbedding
from kwiden.testing import padded_batch, randomize_weights, tiny_config


def resolve_options(model, k):
    return resolve(model, k=k)


@pytest.mark.parametrize("k", [math.nan, math.inf, 1e-9, np.float64("nan")])
def test_factors_that_are_no_factors(gpt, k):
    with pytest.raises(
        ValueError,
        match=r"`k` must be a number of at least 1 such as 2, 1\.5 or 4/3, or None \(width factor k .*\), got k=",
    ):
        kwiden.grow(gpt(), k)


@pytest.mark.parametrize("spread", [math.nan, math.inf, -1.0, 1e4, "1"])
def test_spread_out_of_its_exact_range(gpt, spread):
    with pytest.raises(
        ValueError,
        match=r"`spread` must be a number from 0 to 100 \(.*larger than 100, the splits cancel in float32\), got spread=",
    ):
        kwiden.grow(gpt(), 2, spread=spread)


def test_a_growth_too_big_for_memory_is_refused_before_it_starts(gpt, monkeypatch):
    small = gpt()
    monkeypatch.setattr(growth_plan, "available_memory", lambda: 2**30)  # 1 GiB free
    total, _ = growth_plan.grown_bytes(growth_plan.plan_growth(small, resolve_options(small, 4)))
    assert total == 4 * sum(int(np.prod(w.shape)) for w in kwiden.grow(small, 4).weights)  # the estimate is exact
    with pytest.raises(GrowthError, match=r"k=200 makes a model of 0.5\d GiB of weights and needs about 1.\d+ GiB"):
        kwiden.grow(small, 200)


def test_nothing_to_grow_is_an_error(tmp_path, capsys):
    x = keras.Input((4,))
    plain = keras.Model(x, keras.layers.Dense(3)(keras.layers.Dense(5)(x)))
    with pytest.raises(GrowthError, match=r"Nothing in model .* grows by k=2"):
        kwiden.grow(plain, 2)
    plain.save(tmp_path / "plain.keras")
    assert main(["grow", str(tmp_path / "plain.keras"), str(tmp_path / "big.keras"), "--factor", "2"]) == 1
    assert "Nothing in model" in capsys.readouterr().err and not (tmp_path / "big.keras").exists()


def test_raw_ops_on_grown_tensors_are_named():
    ids = keras.Input((None,), dtype="int32")
    x = ExpandableEmbedding(20, 8, name="Embedding-Token")(ids)
    with pytest.raises(GrowthError, match=r"raw `keras.ops` call \(Add\).*keras.layers.Add for `x \+ y`"):
        kwiden.grow(keras.Model(ids, x + x), 2)


def test_dropout_noise_shape_grows_with_the_features():
    ids = keras.Input((None,), dtype="int32")
    x = ExpandableEmbedding(20, 8, name="Embedding-Token")(ids)
    x = keras.layers.Dropout(0.5, noise_shape=(None, 1, 8), name="drop")(x)
    big = kwiden.grow(randomize_weights(keras.Model(ids, x)), 2)
    assert big.get_layer("drop").noise_shape == (None, 1, 16)
    big.compile("adam", "mse")
    big.fit(np.ones((2, 3), "int32"), np.ones((2, 3, 16), "float32"), verbose=0)  # trains


def test_empty_check_batch(gpt):
    with pytest.raises(ValueError, match=r"`check` is empty"):
        kwiden.grow(gpt(), 2, check=np.zeros((0, 4), "int32"))


def test_optimizer_of_another_model(gpt):
    optimizer = kwiden.optimizers.Adam(1e-3)
    optimizer.build(gpt(seed=1).trainable_variables)
    with pytest.raises(ValueError, match=r"was built on other variables than those of model 'gpt'.*small.optimizer"):
        kwiden.grow(gpt(), 2, optimizer=optimizer)


def test_verify_refuses_mismatched_models(bert):
    small = bert(with_mlm=True)
    big = kwiden.grow(small, 2)
    inputs = padded_batch()
    without_mlm = keras.Model(big.inputs, big.outputs[0])
    with pytest.raises(ValueError, match=r"`big` does not have `small`'s outputs"):
        kwiden.verify(small, without_mlm, inputs)  # a missing output
    extra = keras.Model(big.inputs, [*big.outputs, keras.layers.Dense(3, name="extra")(big.outputs[0])])
    with pytest.raises(ValueError, match=r"`big` does not have `small`'s outputs"):
        kwiden.verify(small, extra, inputs)  # an extra output
    with pytest.raises(ValueError, match=r"is 16 wide; `small`'s \(32\) grown by k=1 would be 32"):
        kwiden.verify(big, small, inputs)  # swapped arguments
    with pytest.raises(ValueError, match=r"is 32 wide; `small`'s \(16\) grown by k=3 would be 48"):
        kwiden.verify(small, big, inputs, k=3)  # a wrong factor
    with pytest.raises(ValueError, match=r"`inputs` is empty"):
        kwiden.verify(small, big, [np.zeros((0, 4), "int32")] * 2)


def test_a_report_is_never_ok_beside_a_departure(bert):
    small = bert()
    big = kwiden.grow(small, 2)
    big.get_layer("Transformer-0-FeedForward").output_bias.assign(np.full(32, 0.1, "float32"))
    report = kwiden.verify(small, big, padded_batch())
    assert report.first_departure is not None and not report.ok


def test_fold_refuses_non_finite_omega():
    model = kwiden.build_transformer_model(tiny_config(), model="gpt", residual="admin")
    model.get_layer("Transformer-0-FeedForward-Norm").omega.assign(np.full(16, np.nan, "float32"))
    with pytest.raises(ValueError, match=r"'Transformer-0-FeedForward-Norm': ω is not finite in channels \[0, 1"):
        kwiden.training.admin.fold(model)


@pytest.fixture
def saved(gpt, tmp_path):
    path = tmp_path / "small.keras"
    gpt().save(path)
    return path


@pytest.mark.parametrize(
    "make_args, message",
    [
        (lambda d, s: [str(d / "missing.keras"), str(d / "big.keras")], r"missing.keras does not exist"),
        (lambda d, s: [str(d), str(d / "big.keras")], r"is a folder"),
        (lambda d, s: [str(s), str(s)], r"is the source model; write the grown model to another file"),
        (lambda d, s: [str(s), str(d / "no" / "big.keras")], r"the folder .*no does not exist"),
        (lambda d, s: [str(s), str(d / "big.h5")], r"give a name ending in .keras"),
    ],
    ids=["missing", "folder", "same-file", "missing-folder", "h5-destination"],
)
def test_grow_command_checks_paths_before_any_work(saved, tmp_path, capsys, make_args, message):
    before = saved.read_bytes()
    assert main(["grow", *make_args(tmp_path, saved), "--factor", "2"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("kwiden grow: ")  # one line, no traceback
    assert re.search(message, err), err
    assert saved.read_bytes() == before


def test_grow_command_refuses_files_that_are_not_keras_models(tmp_path, capsys):
    (tmp_path / "model.h5").write_bytes(b"\x89HDF")
    (tmp_path / "broken.keras").write_text("not a zip")
    assert main(["grow", str(tmp_path / "model.h5"), str(tmp_path / "big.keras"), "--factor", "2"]) == 1
    assert "legacy HDF5 file" in capsys.readouterr().err
    assert main(["grow", str(tmp_path / "broken.keras"), str(tmp_path / "big.keras"), "--factor", "2"]) == 1
    assert "is not a .keras model file" in capsys.readouterr().err


def test_grow_command_rejects_a_factor_with_a_zero_denominator(saved, tmp_path, capsys):
    with pytest.raises(SystemExit, match="^2$"):  # argparse's usage error: exit status 2, its message on stderr
        main(["grow", str(saved), str(tmp_path / "big.keras"), "--factor", "1/0"])
    assert "'1/0' is not a factor such as 2, 1.5 or 4/3" in capsys.readouterr().err


def test_a_failed_save_leaves_the_old_file_and_no_partial_one(saved, tmp_path, monkeypatch, capsys):
    destination = tmp_path / "big.keras"
    destination.write_bytes(b"the previous grown model")

    def fail(self, path, *args, **kwargs):
        open(path, "wb").write(b"half a model")
        raise OSError("No space left on device")

    monkeypatch.setattr(keras.Model, "save", fail)
    assert main(["grow", str(saved), str(destination), "--factor", "2"]) == 1
    assert "No space left on device" in capsys.readouterr().err
    assert destination.read_bytes() == b"the previous grown model"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["big.keras", "small.keras"]


def test_demo_refuses_a_zero_budget_before_training(capsys):
    with pytest.raises(SystemExit, match="^2$"):  # argparse's usage error: exit status 2, its message on stderr
        main(["demo", "--budget", "0"])
    assert "argument --budget: must be at least 1, got 0" in capsys.readouterr().err


def test_check_inputs_outside_the_tables_are_named(gpt, bert):
    with pytest.raises(ValueError, match=r"`check`\[0\] \('Input-Token'\) holds the id 97, outside 'Embedding-Token'"):
        kwiden.grow(gpt(vocab_size=97), 2, check=np.array([[5, 97]]))
    with pytest.raises(ValueError, match=r"`inputs`\[1\] \('Input-Segment'\) holds the id -1, .* give ids in \[0, 2\)"):
        kwiden.verify(bert(), bert(), [np.array([[5, 6]]), np.array([[0, -1]])], k=1)
    with pytest.raises(ValueError, match=r"is 40 long; 'Embedding-Position' has 32 positions"):
        kwiden.grow(gpt(max_position_embeddings=32), 2, check=np.ones((1, 40), "int32"))
    with pytest.raises(ValueError, match=r"feeds 'Embedding-Token' and must hold integer ids, not float32"):
        kwiden.grow(gpt(), 2, check=np.ones((1, 4), "float32"))


def fake_system(root, cgroup, files, meminfo_kib=8 * 2**20):
    """A /proc and /sys/fs/cgroup under `root`: /proc/self/cgroup's text, and `{path: text}` cgroup files."""
    (root / "proc" / "self").mkdir(parents=True)
    (root / "proc" / "self" / "cgroup").write_text(cgroup)
    (root / "proc" / "meminfo").write_text(f"MemTotal: 16000000 kB\nMemAvailable: {meminfo_kib} kB\n")
    for path, text in files.items():
        (root / "cgroup" / path).parent.mkdir(parents=True, exist_ok=True)
        (root / "cgroup" / path).write_text(text)
    return dict(proc=root / "proc", cgroups=root / "cgroup")


GIB = 2**30


@pytest.mark.parametrize(
    "cgroup, files, expected",
    [
        # cgroup v2 in a container (`docker run -m 2g`): the limit at the mount's root; page cache counts as free.
        ("0::/\n", {"memory.max": f"{2 * GIB}\n", "memory.current": f"{GIB}\n", "memory.stat": f"anon 1\ninactive_file {GIB // 2}\n"}, 1.5 * GIB),
        # v2 on a host: the process's own cgroup is unlimited, its parent is not.
        ("0::/user.slice/job\n", {"user.slice/memory.max": f"{3 * GIB}", "user.slice/memory.current": f"{GIB}",
                                   "user.slice/job/memory.max": "max", "user.slice/job/memory.current": "5"}, 2 * GIB),
        # v1, the host's path not mounted inside the container: its root holds the limit.
        ("4:memory:/docker/abc\n0::/\n", {"memory/memory.limit_in_bytes": f"{GIB}", "memory/memory.usage_in_bytes": f"{GIB // 4}",
                                          "memory/memory.stat": f"total_inactive_file {GIB // 4}\n"}, GIB),
        # v1 unlimited (the kernel's 2^63 rounded to pages): MemAvailable alone.
        ("4:memory:/\n", {"memory/memory.limit_in_bytes": "9223372036854771712", "memory/memory.usage_in_bytes": "10"}, 8 * GIB),
        # No cgroup files at all: MemAvailable.
        ("0::/\n", {}, 8 * GIB),
    ],
)  # fmt: skip
def test_available_memory_reads_the_cgroup_limit(tmp_path, cgroup, files, expected):
    assert memory.available_memory(**fake_system(tmp_path, cgroup, files)) == expected


def test_a_cgroup_limit_below_the_growths_peak_refuses_it(gpt, tmp_path, monkeypatch):
    where = fake_system(tmp_path, "0::/\n", {"memory.max": str(2**16), "memory.current": "0"})
    real = growth_plan.available_memory
    monkeypatch.setattr(growth_plan, "available_memory", lambda: real(**where))
    with pytest.raises(GrowthError, match=r"needs about .* GiB at its peak; 0.00 GiB of memory is available"):
        kwiden.grow(gpt(), 2)
