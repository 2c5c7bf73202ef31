"""The memory kwiden checks before it builds: the host's (`available_memory`) and the accelerator's
(`device_memory`)."""

import subprocess
import sys

import pytest

from kwiden import memory


def test_a_cpu_has_no_device_memory_and_is_not_accelerated():
    assert memory.accelerated() is False
    assert memory.device_memory() is None
    assert memory.device_memory("an unknown backend") is None


def test_nvidia_smi_total_is_read_in_mebibytes(monkeypatch):
    monkeypatch.setattr(memory.shutil, "which", lambda name: "/usr/bin/nvidia-smi")

    def answering(stdout, returncode=0):
        return lambda *args, **kwargs: subprocess.CompletedProcess(args, returncode, stdout=stdout)

    assert memory.nvidia_total_memory(answering("81559\n")) == 81559 * 2**20
    assert memory.nvidia_total_memory(answering("[N/A]\n")) is None
    assert memory.nvidia_total_memory(answering("81559\n", returncode=9)) is None
    monkeypatch.setattr(memory.shutil, "which", lambda name: None)
    assert memory.nvidia_total_memory(answering("81559\n")) is None


def test_jax_device_memory_is_its_limit_less_what_it_holds(monkeypatch):
    class Device:
        platform = "gpu"

        def memory_stats(self):
            return {"bytes_limit": 80 * 2**30, "bytes_in_use": 30 * 2**30}

    class Jax:
        @staticmethod
        def devices():
            return [Device()]

    monkeypatch.setitem(sys.modules, "jax", Jax)
    assert memory.device_memory("jax") == 50 * 2**30
    Device.platform = "cpu"
    assert memory.device_memory("jax") is None


@pytest.mark.parametrize("failure", [RuntimeError("no backend"), subprocess.TimeoutExpired("nvidia-smi", 10)])
def test_a_backend_that_fails_to_say_gives_none(monkeypatch, failure):
    def failing():
        raise failure

    monkeypatch.setattr(memory, "_tensorflow_free", failing)
    assert memory.device_memory("tensorflow") is None
