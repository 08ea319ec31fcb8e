"""hed.core.entropy against a two-line float64 reference (DESIGN.md §5.1)."""

from __future__ import annotations

import math

import pytest
import torch

from hed.core.entropy import (
    NonFiniteLogitsError,
    entropy_from_logits,
    token_distribution_stats,
    token_logprobs,
)
from hed.errors import InputDataError

NEG_INF = float("-inf")


@pytest.fixture(autouse=True, scope="module")
def one_torch_thread():
    """Run this module's tensors on one intra-op thread.

    They are small: a second thread buys nothing, and on a shared CPU OpenMP's spin-waiting
    made this module several times slower (measured: 111 s instead of 16 s at load 4 on 2 cores).
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def reference_log_probs(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """log softmax(z / T) in float64."""
    return torch.log_softmax(logits.double() / temperature, dim=-1)


def reference_entropy(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """-Σ p log p in float64, with 0·log 0 = 0."""
    log_p = reference_log_probs(logits, temperature)
    return -(log_p.exp() * log_p.nan_to_num(neginf=0.0)).sum(-1)


def random_logits(rows: int, vocab: int, seed: int, scale: float = 4.0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    logits = torch.randn(rows, vocab, generator=generator) * scale
    logits[0, : vocab // 3] = NEG_INF  # a masked row
    logits[-1, 1::2] = NEG_INF
    return logits


@pytest.mark.parametrize("rows,vocab", [(1, 7), (5, 1000), (9, 49152), (3, 151936)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("temperature", [1.0, 0.6, 1.7])
@pytest.mark.parametrize("chunk_size", [1, 4, 64])
def test_stats_match_float64_reference(rows, vocab, dtype, temperature, chunk_size):
    logits = random_logits(rows, vocab, seed=rows * vocab).to(dtype)
    stats = token_distribution_stats(logits, temperature, top_k=5, chunk_size=chunk_size)

    log_p = reference_log_probs(logits, temperature)
    assert stats.entropy.dtype == torch.float32
    assert stats.entropy.shape == (rows,)
    torch.testing.assert_close(
        stats.entropy.double(), reference_entropy(logits, temperature), atol=1e-4, rtol=0
    )
    torch.testing.assert_close(
        stats.log_z.double(),
        torch.logsumexp(logits.double() / temperature, dim=-1),
        atol=1e-4,
        rtol=0,
    )
    k = min(5, vocab)
    ref_probs = log_p.exp().topk(k, dim=-1).values
    torch.testing.assert_close(stats.topk_probs.double(), ref_probs, atol=1e-6, rtol=1e-4)
    # Ids agree up to exact ties (bf16 logits tie often): compare the probabilities they name.
    torch.testing.assert_close(log_p.exp().gather(-1, stats.topk_ids), ref_probs, atol=0, rtol=0)
    assert (stats.topk_probs[:, :-1] >= stats.topk_probs[:, 1:]).all()  # most probable first


def test_known_entropies():
    vocab = 49152
    uniform = torch.zeros(3, vocab)
    assert token_distribution_stats(uniform).entropy.tolist() == pytest.approx(
        [math.log(vocab)] * 3, abs=1e-5
    )
    one_hot = torch.full((2, vocab), NEG_INF)
    one_hot[0, 17] = 3.0
    one_hot[1, 0] = -50.0
    stats = token_distribution_stats(one_hot, top_k=3)
    assert stats.entropy.tolist() == [0.0, 0.0]  # exactly: masked entries add nothing
    assert stats.topk_ids[:, 0].tolist() == [17, 0]
    assert stats.topk_probs[:, 0].tolist() == [1.0, 1.0]
    assert stats.topk_probs[:, 1:].abs().sum() == 0
    two_way = torch.tensor([[0.0, 0.0, NEG_INF, NEG_INF]])
    assert token_distribution_stats(two_way).entropy.item() == pytest.approx(math.log(2), abs=1e-7)


def test_temperature_changes_entropy_as_expected():
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0]])
    cold = token_distribution_stats(logits, temperature=0.25).entropy.item()
    warm = token_distribution_stats(logits, temperature=4.0).entropy.item()
    assert cold < token_distribution_stats(logits).entropy.item() < warm < math.log(4)


def test_token_logprobs_match_log_softmax():
    logits = random_logits(6, 5000, seed=3).to(torch.bfloat16)
    tokens = torch.tensor([7, 3000, 7, 0, 1234, 3])  # rows 0 and 5 pick masked tokens
    for temperature in (1.0, 0.7):
        stats = token_distribution_stats(logits, temperature)
        got = token_logprobs(logits, tokens, stats.log_z, temperature)
        expected = reference_log_probs(logits, temperature).gather(-1, tokens[:, None])[:, 0]
        assert got.dtype == torch.float32
        finite = expected.isfinite()
        assert finite.tolist() == [False, True, True, True, True, False]
        assert got[~finite].eq(NEG_INF).all()
        torch.testing.assert_close(got.double()[finite], expected[finite], atol=1e-5, rtol=0)


def test_entropy_from_logits_restores_leading_shape():
    logits = torch.randn(2, 3, 4, 100, generator=torch.Generator().manual_seed(7))
    entropy = entropy_from_logits(logits, chunk_size=5)
    assert entropy.shape == (2, 3, 4)
    # float32 against a float64 oracle: within 1e-5 nats (DESIGN.md §5.1), not float64's 1e-7
    torch.testing.assert_close(
        entropy.double(),
        reference_entropy(logits.reshape(-1, 100), 1.0).reshape(2, 3, 4),
        atol=1e-5,
        rtol=0,
    )


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_logits_raise_one_line_error(bad):
    logits = torch.randn(4, 300)
    logits[2, 17] = bad
    with pytest.raises(NonFiniteLogitsError, match=r"NaN logits .*try dtype float32") as info:
        token_distribution_stats(logits)
    assert isinstance(info.value, InputDataError)
    assert "\n" not in str(info.value)
    unchecked = token_distribution_stats(logits, check_finite=False)  # decode-time path
    assert unchecked.entropy[[0, 1, 3]].isfinite().all()
    assert not unchecked.entropy[2].isfinite()


def test_input_is_not_modified():
    logits = random_logits(3, 500, seed=1)
    before = logits.clone()
    token_distribution_stats(logits, temperature=1.0)
    token_distribution_stats(logits, temperature=0.5)
    assert torch.equal(logits, before)
