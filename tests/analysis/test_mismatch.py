"""Sampler–trainer mismatch: zero when the re-scorer is the sampler, a planted bias gives its
known KL, statistics equal float64 numpy (hed.analysis.mismatch)."""

from __future__ import annotations

from decimal import Decimal, localcontext

import numpy as np
import pytest

from hed.analysis.mismatch import SUBSETS, k3_terms, mismatch_stats, step_mismatch


def test_a_rescorer_equal_to_the_sampler_gives_zero_mismatch():
    logp = np.log(np.random.default_rng(0).uniform(0.01, 1.0, 500)).astype(np.float32)
    high = np.arange(500) % 5 == 0
    category = np.array(["anthropomorphic", "reasoning", "other", "other"] * 125)
    table = step_mismatch(logp, logp.copy(), high, category, run="r", step=3)
    assert table["subset"].tolist() == list(SUBSETS)
    assert table["n_tokens"].tolist() == [500, 100, 400, 125, 125]
    for column in ("mean_abs_delta_logprob", "p99_abs_delta_logprob", "kl_k3"):
        assert (table[column] == 0.0).all(), column
    assert (table["ratio_outside_share"] == 0.0).all()
    assert table[["ratio_low", "ratio_high"]].drop_duplicates().values.tolist() == [[0.5, 2.0]]


@pytest.mark.parametrize("c", [1e-6, 0.01, -0.3, 0.8])
def test_a_constant_planted_bias_gives_its_closed_form_kl(c):
    # log q = log p − c at every token: r = e^{−c}, k3 = e^{−c} − 1 + c exactly
    stats = mismatch_stats(np.full(200, c))  # Δ = log p − log q = c
    with localcontext() as ctx:  # the closed form in 50-digit decimals (no cancellation)
        ctx.prec = 50
        exact = float((-Decimal(c)).exp() - 1 + Decimal(c))
    assert stats["kl_k3"] == pytest.approx(exact, rel=1e-9)
    assert stats["mean_delta_logprob"] == pytest.approx(c)
    assert stats["mean_abs_delta_logprob"] == pytest.approx(abs(c))
    outside = not 0.5 <= np.exp(-c) <= 2.0
    assert stats["ratio_outside_share"] == float(outside)


def test_sampled_k3_estimates_the_exact_kl_of_a_planted_logit_bias():
    """Tokens drawn from p; q = softmax(z + bias): mean k3 → KL(p‖q) = Σ p (log p − log q)."""
    rng = np.random.default_rng(1)
    z = rng.normal(0, 2.0, 50)
    bias = rng.normal(0, 0.3, 50)
    log_p = z - np.logaddexp.reduce(z)
    log_q = (z + bias) - np.logaddexp.reduce(z + bias)
    exact = float(np.sum(np.exp(log_p) * (log_p - log_q)))
    tokens = rng.choice(50, size=400_000, p=np.exp(log_p))
    terms = k3_terms(log_p[tokens] - log_q[tokens])
    stats = mismatch_stats(log_p[tokens] - log_q[tokens])
    assert stats["kl_k3"] == pytest.approx(terms.mean())
    sigma = terms.std() / np.sqrt(len(terms))
    assert abs(stats["kl_k3"] - exact) < 4 * sigma
    assert exact > 0.01  # the bias is not negligible


def test_statistics_equal_numpy_and_the_bounds_are_verls():
    rng = np.random.default_rng(2)
    delta = rng.normal(0, 0.6, 1000)
    stats = mismatch_stats(delta.astype(np.float32), bounds=(0.5, 2.0))
    d = delta.astype(np.float32).astype(np.float64)
    assert stats["p90_abs_delta_logprob"] == pytest.approx(np.percentile(np.abs(d), 90))
    assert stats["p99_abs_delta_logprob"] == pytest.approx(np.percentile(np.abs(d), 99))
    r = np.exp(-d)
    assert stats["ratio_outside_share"] == pytest.approx(np.mean((r < 0.5) | (r > 2.0)))
    assert stats["kl_k3"] == pytest.approx(np.mean(r - 1 - np.log(r)), rel=1e-12)
    empty = mismatch_stats(np.array([]))
    assert empty["n_tokens"] == 0 and np.isnan(empty["kl_k3"])
