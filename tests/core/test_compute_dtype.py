"""CPU dtype by capability: bfloat16 only where the processor has native bf16, with it faked."""

from __future__ import annotations

from pathlib import Path

import pytest

from hed.core import compute_dtype
from hed.errors import ConfigError

AVX2_ONLY = "fpu vme de pse tsc msr pae sse sse2 avx fma avx2"
SAPPHIRE_RAPIDS = AVX2_ONLY + " avx512f avx512bw avx512_bf16 amx_bf16 amx_tile amx_int8"


@pytest.fixture
def cpu(monkeypatch, tmp_path):
    """Fake ``/proc/cpuinfo`` flags and torch's capability: ``cpu(flags, capability)``."""

    def fake(flags: str, capability: str, onednn_bf16: bool = True) -> bool:
        cpuinfo = tmp_path / "cpuinfo"
        cpuinfo.write_text(f"processor\t: 0\nmodel name\t: fake\nflags\t\t: {flags}\n\n")
        monkeypatch.setattr(compute_dtype, "_CPUINFO", cpuinfo)
        monkeypatch.setattr(
            compute_dtype, "cpu_flags", lambda path=cpuinfo: frozenset(flags.split())
        )
        monkeypatch.setattr(compute_dtype, "torch_cpu_capability", lambda: capability)
        monkeypatch.setattr(compute_dtype, "_onednn_bf16", lambda: onednn_bf16)
        compute_dtype.cpu_has_native_bf16.cache_clear()
        return compute_dtype.cpu_has_native_bf16()

    yield fake
    compute_dtype.cpu_has_native_bf16.cache_clear()


def test_cpu_flags_are_read_from_cpuinfo(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(f"processor\t: 0\nflags\t\t: {SAPPHIRE_RAPIDS}\n\nprocessor\t: 1\n")
    assert {"amx_bf16", "avx512_bf16", "avx2"} <= compute_dtype.cpu_flags(cpuinfo)
    assert compute_dtype.cpu_flags(tmp_path / "missing") == frozenset()


@pytest.mark.parametrize(
    ("flags", "capability", "onednn", "native"),
    [
        (AVX2_ONLY, "AVX2", True, False),  # the slow scalar bf16 GEMM case
        (AVX2_ONLY + " avx512f avx512bw", "AVX512", True, False),  # AVX512 without BF16
        (SAPPHIRE_RAPIDS, "AVX512", True, True),
        (AVX2_ONLY + " avx512_bf16", "AVX512", True, True),
        (SAPPHIRE_RAPIDS, "AVX2", True, False),  # torch built/forced to AVX2 kernels
        (SAPPHIRE_RAPIDS, "AVX512", False, False),  # oneDNN without bf16
    ],
)
def test_native_bf16_needs_the_flag_torch_s_kernels_and_onednn(
    cpu, flags, capability, onednn, native
):
    assert cpu(flags, capability, onednn) is native
    assert compute_dtype.cpu_dtype_name() == ("bfloat16" if native else "float32")
    assert compute_dtype.dtype_name("by_device", "cpu") == ("bfloat16" if native else "float32")
    assert compute_dtype.dtype_name("by_device", "cuda:0") == "bfloat16"


def test_explicit_bfloat16_on_a_cpu_without_it_is_kept_but_warned_about(cpu, caplog):
    cpu(AVX2_ONLY, "AVX2")
    with caplog.at_level("WARNING", logger="hed.core.compute_dtype"):
        assert compute_dtype.dtype_name("bfloat16", "cpu") == "bfloat16"
    assert "no native bfloat16" in caplog.text


def test_auto_is_the_checkpoint_s_dtype(tmp_path: Path):
    (tmp_path / "config.json").write_text('{"torch_dtype": "bfloat16"}')
    assert compute_dtype.dtype_name("auto", "cpu", tmp_path) == "bfloat16"
    assert compute_dtype.dtype_name("auto", "cpu") == "auto"  # no folder: not resolved yet
    with pytest.raises(ConfigError, match="by_device: bfloat16 on CUDA"):
        compute_dtype.dtype_name("fastest", "cpu")


def test_mini_rl_computes_in_the_cpu_dtype(cpu):
    """Validation of a mini_dapo checkpoint: bf16 values (as saved), computed in the CPU dtype."""
    import torch

    from hed.mini_rl.export import compute_copy

    model = torch.nn.Linear(3, 2)
    with torch.no_grad():
        model.weight.copy_(torch.tensor([[1.0 + 2**-10, 2.0, 3.0], [4.0, 5.0, 6.0]]))
    cpu(AVX2_ONLY, "AVX2")
    slow = compute_copy(model)
    assert slow.weight.dtype == torch.float32
    assert slow.weight[0, 0].item() == 1.0  # rounded to bfloat16 (8 bits of mantissa) first
    assert model.weight.dtype == torch.float32 and model.weight[0, 0].item() == 1.0 + 2**-10
    cpu(SAPPHIRE_RAPIDS, "AVX512")
    assert compute_copy(model).weight.dtype == torch.bfloat16


def test_mini_rl_trainer_bf16_follows_the_cpu(cpu):
    from hed.mini_rl.config import cpu_trainer_args

    cpu(AVX2_ONLY, "AVX2")
    assert cpu_trainer_args({"learning_rate": 1e-5})["bf16"] is False
    cpu(SAPPHIRE_RAPIDS, "AVX512")
    assert cpu_trainer_args({"learning_rate": 1e-5})["bf16"] is True
    assert cpu_trainer_args({"bf16": False})["bf16"] is False  # the user's choice wins


def test_a_shard_of_dtype_auto_is_current_without_its_checkpoint_and_stale_after_a_change(
    tmp_path,
):
    from hed.records.shard_metadata import stale_field

    recorded = {"dtype": "bfloat16", "device": "cuda", "checkpoint": {"model_dir": "/gone"}}
    generation = {"dtype": "auto"}
    kwargs = {"prompt_params": None, "checkpoint": None, "prompt_ids": None}
    # re-plot on a machine without the checkpoint: its config_sha256 covers its dtype
    assert stale_field(recorded, generation=generation, **kwargs) is None
    (tmp_path / "config.json").write_text('{"dtype": "float16"}')
    here = {**recorded, "checkpoint": {"model_dir": str(tmp_path)}}
    found = stale_field(here, generation=generation, **kwargs)
    assert found is not None and found.field == "generation.dtype"
    (tmp_path / "config.json").write_text('{"dtype": "bfloat16"}')
    assert stale_field(here, generation=generation, **kwargs) is None
