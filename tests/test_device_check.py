"""bench/device_check.py end to end on CPU with tiny shapes (the GPU run uses the same code).

Phases: (a) float32 records vs a float64 teacher-forced re-score, (b) plain vs recorded
generate, (c) the statistics alone, reference vs fused, (d) ``kedro run --pipelines
generation`` on GPURunner in a throwaway project with a random Qwen3 and a byte-level
tokenizer. Every figure must be in the JSON the script writes.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow


def test_device_check_runs_end_to_end_on_cpu(tmp_path):
    result = subprocess.run(
        [sys.executable, str(REPO_ROOT / "bench/device_check.py"), "--device", "cpu"],
        env={"OUT": str(tmp_path), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    figures = json.loads((tmp_path / "device_check.json").read_text())
    printed = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    assert {key for line in printed for key in line if key != "t_s"} == set(figures)
    # (a) float32 records equal a float64 re-score within 1e-4 nats
    assert figures["a_float32_within_1e-4"] is True
    assert figures["a_float32_entropy_max_abs_diff"] <= 1e-4
    assert figures["a_float32_logprob_max_abs_diff"] <= 1e-4
    assert figures["a_float32_topk_ids_equal_share"] == 1.0
    assert 0 < figures["a_bfloat16_entropy_max_abs_diff"] < 1.0  # bf16 rounding, not a bug
    # (b) both runs generated; the ratio is a positive number per batch size
    for batch in (2, 4):
        assert figures[f"b_batch{batch}_plain_tokens_per_s"] > 0
        assert 0 < figures[f"b_batch{batch}_ratio"] < 10
    # (c) the fused route agrees with the reference within 1e-5 nats
    assert figures["c_fused_route"] in {"compiled", "reference"}
    assert figures["c_fused_entropy_max_abs_diff"] <= 1e-5
    assert figures["c_fused_log_z_max_abs_diff"] <= 1e-5
    assert figures["c_fused_within_1e-5"] is True
    assert figures["c_fused_topk_ids_equal"] is True
    assert figures["c_decode_step_ms"] > 0
    # (d) the generation pipeline on GPURunner; records exact against float64
    assert figures["d_kedro_exit_status"] == 0
    assert figures["d_log_says"] == "CPU worker 0"
    assert 8 <= figures["d_records"] <= 4 * 2 * 16  # 8 responses of 1..16 tokens
    assert figures["d_records_within_1e-4"] is True
    assert figures["all_pass"] is True
