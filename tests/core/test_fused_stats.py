"""The fused statistics routes (hed.core.fused_stats) against the reference code.

The reference is hed.core.entropy.token_distribution_stats (itself tested against float64 in
test_entropy.py). Every route must give its entropy and log Z within 1e-5 nats, its top-k
probabilities within 1e-5, and top-k ids that point at the reference's top-k values (ids may
differ only between exactly equal values). The Triton kernel runs here under Triton's CPU
interpreter (a subprocess with TRITON_INTERPRET=1) and is compiled for an sm_90 target.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap

import pytest
import torch

from hed.core.entropy import token_distribution_stats
from hed.core.fused_stats import (
    DistributionStats,
    check_stats_kernel,
    compiled_stats,
    resolve_stats_kernel,
)
from hed.errors import ConfigError

NEG_INF = float("-inf")
SHAPES = [(1, 7), (5, 1000), (3, 5000), (2, 151936)]
DTYPES = [torch.float32, torch.bfloat16, torch.float16]
TEMPERATURES = [1.0, 0.6, 1.7]


def masked_logits(rows: int, vocab: int, dtype: torch.dtype, seed: int) -> torch.Tensor:
    """Random logits (scale 4) with a third of row 0 and every other entry of the last -inf."""
    generator = torch.Generator().manual_seed(seed)
    logits = torch.randn(rows, vocab, generator=generator) * 4.0
    logits[0, : vocab // 3] = NEG_INF
    logits[-1, 1::2] = NEG_INF
    return logits.to(dtype)


def largest_differences(logits, temperature, *stats) -> dict:
    """Max |difference| to the reference, and whether the ids point at the top-k values."""
    entropy, log_z, top_probs, top_ids = stats
    ref = token_distribution_stats(logits, temperature, top_ids.shape[-1], check_finite=False)
    scaled = logits.float() / temperature
    return {
        "entropy": (entropy - ref.entropy).abs().max().item(),
        "log_z": (log_z - ref.log_z).abs().max().item(),
        "top_probs": (top_probs - ref.topk_probs).abs().max().item(),
        "ids_at_top_values": torch.equal(
            scaled.gather(-1, top_ids), scaled.gather(-1, ref.topk_ids)
        ),
        "ids_equal_share": (top_ids == ref.topk_ids).float().mean().item(),
    }


def assert_matches(diff: dict) -> None:
    assert diff["entropy"] <= 1e-5
    assert diff["log_z"] <= 1e-5
    assert diff["top_probs"] <= 1e-5  # |Δp| ≤ p·|Δlog Z|
    assert diff["ids_at_top_values"] is True


TRITON_SCRIPT = textwrap.dedent(
    """
    import json, sys, warnings
    import torch
    warnings.simplefilter("ignore")
    sys.path.insert(0, sys.argv[1])
    from test_fused_stats import DTYPES, SHAPES, TEMPERATURES, largest_differences, masked_logits
    from hed.core.stats_triton import triton_row_stats
    out = []
    for rows, vocab in SHAPES:
        for dtype in DTYPES:
            for temperature in TEMPERATURES:
                logits = masked_logits(rows, vocab, dtype, seed=rows * vocab)
                stats = triton_row_stats(logits, temperature, 5)
                diff = largest_differences(logits, temperature, *stats)
                out.append({"case": [rows, vocab, str(dtype), temperature], **diff})
    nan, inf = float("nan"), float("inf")
    bad = torch.tensor([[0.0, nan, 1.0], [-inf, -inf, -inf], [1.0, inf, 0.0]])
    entropy, log_z, _, _ = triton_row_stats(bad, 1.0, 2)
    out.append({"undefined": [entropy.isnan().tolist(), log_z.tolist()]})
    print(json.dumps(out))
    """
)


def test_triton_kernel_matches_reference_under_interpreter():
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    result = subprocess.run(
        [sys.executable, "-c", TRITON_SCRIPT, os.path.dirname(__file__)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    *cases, undefined = json.loads(result.stdout.strip().splitlines()[-1])
    assert len(cases) == len(SHAPES) * len(DTYPES) * len(TEMPERATURES)
    for case in cases:
        assert_matches(case)
    # float32 random logits with >= 5 finite entries per row have no ties among the top 5:
    # the ids are the reference's exactly
    exact = [c for c in cases if "float32" in c["case"][2] and c["case"][1] >= 1000]
    assert len(exact) == 9 and all(c["ids_equal_share"] == 1.0 for c in exact)
    nan_rows, log_z = undefined["undefined"]
    assert nan_rows == [True, True, True]  # NaN logit, all -inf row, +inf logit
    assert log_z[1] == NEG_INF and log_z[0] != log_z[0] and log_z[2] != log_z[2]


def test_triton_kernel_compiles_for_sm90():
    """The real compiler (not the interpreter) builds the kernel for an H100/H200, no GPU."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, compile

    from hed.core.stats_triton import _row_stats_kernel

    signature = {
        "z_ptr": "*bf16",
        "row_stride": "i32",
        "n_cols": "i32",
        "temperature": "fp32",
        "entropy_ptr": "*fp32",
        "log_z_ptr": "*fp32",
        "top_probs_ptr": "*fp32",
        "top_ids_ptr": "*i64",
        "K": "constexpr",
        "K_PAD": "constexpr",
        "BLOCK": "constexpr",
    }
    source = ASTSource(
        fn=_row_stats_kernel, signature=signature, constexprs={"K": 5, "K_PAD": 8, "BLOCK": 4096}
    )
    kernel = compile(source, target=GPUTarget("cuda", 90, 32), options={"num_warps": 8})
    assert ".target sm_90" in kernel.asm["ptx"]
    assert len(kernel.asm["cubin"]) > 1000


@pytest.mark.parametrize("dtype", DTYPES)
def test_compiled_route_matches_reference(dtype):
    torch.manual_seed(0)
    for rows, vocab in SHAPES:
        for temperature in TEMPERATURES:
            logits = masked_logits(rows, vocab, dtype, seed=rows * vocab)
            assert_matches(
                largest_differences(logits, temperature, *compiled_stats(logits, temperature, 5))
            )


def test_auto_is_reference_on_cpu_and_names_are_checked():
    stats = DistributionStats("auto")
    logits = masked_logits(3, 100, torch.float32, seed=1)
    out = stats(logits, 0.7, 5)
    assert stats.route == "reference"
    ref = token_distribution_stats(logits, 0.7, 5, check_finite=False)
    assert torch.equal(out.entropy, ref.entropy) and torch.equal(out.topk_ids, ref.topk_ids)
    assert check_stats_kernel("compiled") == "compiled"
    with pytest.raises(ConfigError, match=r"stats_kernel must be one of .*got 'fast'"):
        DistributionStats("fast")
    with pytest.raises(ConfigError, match="triton needs CUDA logits"):
        resolve_stats_kernel("triton", "cpu")


def test_a_failing_route_falls_back_to_the_reference_with_one_warning(monkeypatch, caplog):
    from hed.core import fused_stats

    def broken(logits, temperature, k):
        raise RuntimeError("no compiler\nsecond line")

    monkeypatch.setitem(fused_stats._ROUTES, "compiled", broken)
    stats = DistributionStats("compiled")
    logits = masked_logits(2, 50, torch.float32, seed=2)
    with caplog.at_level(logging.WARNING, logger="hed.core.fused_stats"):
        out = stats(logits, 1.0, 3)
        stats(logits, 1.0, 3)
    assert stats.route == "reference"
    assert [r.getMessage() for r in caplog.records] == [
        "stats_kernel compiled failed at its first call (no compiler); "
        "using the reference statistics"
    ]
    ref = token_distribution_stats(logits, 1.0, 3, check_finite=False)
    assert torch.equal(out.log_z, ref.log_z)
