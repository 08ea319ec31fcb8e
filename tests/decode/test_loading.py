"""Loading a checkpoint straight onto the node's device (no host copy, then ``.to``).

On CPU the weights are in host memory by definition, so what a GPU load does is checked at
the boundary: ``AutoModelForCausalLM.from_pretrained`` is replaced by a recorder and the call
must carry ``device_map`` (the process's GPU) and the target dtype, and the model must never
be moved afterwards.
"""

from __future__ import annotations

import json

import pytest
import torch
import transformers

from hed.core import compute_dtype
from hed.decode import loading as recording


class _Model:
    """What ``from_pretrained`` returns here: records ``eval``; ``to`` must not be called."""

    def __init__(self) -> None:
        self.evaluated = False

    def to(self, *args, **kwargs):
        raise AssertionError(f"model.to{args} after loading: a full host copy was made first")

    def eval(self):
        self.evaluated = True
        return self


@pytest.fixture
def recorded_load(monkeypatch, tiny_model_dir):
    calls = []

    def from_pretrained(model_dir, **kwargs):
        calls.append((model_dir, kwargs))
        return _Model()

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", from_pretrained)
    return calls


@pytest.mark.parametrize(
    ("device", "want"), [("cuda", "cuda:0"), ("cuda:0", "cuda:0"), ("cuda:3", "cuda:3")]
)
def test_a_gpu_load_passes_device_map_and_dtype(recorded_load, tiny_model_dir, device, want):
    model, tokenizer = recording.load_model_and_tokenizer(tiny_model_dir, "by_device", device)
    [(model_dir, kwargs)] = recorded_load
    assert model_dir == tiny_model_dir
    assert kwargs["device_map"] == {"": torch.device(want)}
    assert kwargs["dtype"] == torch.bfloat16  # by_device on CUDA
    assert kwargs["local_files_only"] is True
    assert model.evaluated and tokenizer.padding_side == "left"


def test_auto_passes_the_checkpoint_s_dtype(recorded_load, tiny_model_dir, tmp_path):
    folder = tmp_path / "fp16"
    folder.mkdir()
    for path in tiny_model_dir.iterdir():
        if path.is_file():
            (folder / path.name).write_bytes(path.read_bytes())
    config = json.loads((folder / "config.json").read_text())
    config["dtype"] = "float16"
    (folder / "config.json").write_text(json.dumps(config))
    recording.load_model_and_tokenizer(folder, "auto", "cuda:0")
    [(_, kwargs)] = recorded_load
    assert kwargs["dtype"] == torch.float16


def test_a_cpu_load_is_placed_on_cpu_at_load(monkeypatch, recorded_load, tiny_model_dir):
    monkeypatch.setattr(compute_dtype, "cpu_has_native_bf16", lambda: False)
    recording.load_model_and_tokenizer(tiny_model_dir, "by_device", "cpu")
    [(_, kwargs)] = recorded_load
    assert kwargs["device_map"] == {"": torch.device("cpu")}
    assert kwargs["dtype"] == torch.float32


def test_a_real_cpu_load_gives_the_dtype_and_device(tiny_model_dir):
    model, _ = recording.load_model_and_tokenizer(tiny_model_dir, "bfloat16", "cpu")
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    assert {p.device.type for p in model.parameters()} == {"cpu"}
    assert not model.training
