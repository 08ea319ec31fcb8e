"""generation.vllm settings that need no engine: tensor parallelism refused, ports per slot."""

from __future__ import annotations

import pytest

from hed.decode.vllm import PORT_STRIDE, VLLMSettings, slot_port
from hed.errors import ConfigError


def test_tensor_parallel_size_2_is_refused_in_one_line():
    with pytest.raises(ConfigError) as caught:
        VLLMSettings(tensor_parallel_size=2)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("generation.vllm.tensor_parallel_size: 2 is not supported: ")
    assert "set tensor_parallel_size: 1 and run one engine per GPU" in message
    assert VLLMSettings(tensor_parallel_size=1).tensor_parallel_size == 1
    with pytest.raises(ConfigError, match=r"tensor_parallel_size must be 1, got 0"):
        VLLMSettings(tensor_parallel_size=0)


def test_vllm_port_is_offset_per_slot():
    assert slot_port({}) is None
    assert slot_port({"VLLM_PORT": "29500"}) == 29500  # outside the runner: slot 0
    ports = [slot_port({"VLLM_PORT": "29500", "HED_SLOT_INDEX": str(k)}) for k in range(8)]
    assert ports == [29500 + PORT_STRIDE * k for k in range(8)]
    with pytest.raises(ConfigError, match=r"VLLM_PORT='http' is not a port number"):
        slot_port({"VLLM_PORT": "http"})
    with pytest.raises(ConfigError, match=r"leaves no room for slot 7 .*at most 65423"):
        slot_port({"VLLM_PORT": "65500", "HED_SLOT_INDEX": "7"})
