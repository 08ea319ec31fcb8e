"""Each advantage scheme against values worked out by hand from its paper's definition."""

from __future__ import annotations

import math

import numpy as np
import pytest

from hed.core.advantage import group_advantages
from hed.core.advantage_shaping import (
    SCHEMES,
    SchemeParams,
    flat_token_advantages,
    group_token_advantages,
    scheme_params,
    token_advantages,
    top_rho_threshold,
)
from hed.errors import ConfigError, InputDataError

EPS = 1e-6
# one prompt's group: two correct responses of lengths 3 and 2, one incorrect of length 4
H = [np.array([1.0, 2.0, 0.5]), np.array([2.0, 2.0]), np.array([1.0, 4.0, 1.0, 1.0])]
R = np.array([1.0, 1.0, 0.0])
# GRPO: mean 2/3, unbiased std sqrt(1/3): A = (1/3)/sqrt(1/3) = 1/sqrt(3), (−2/3)/sqrt(1/3)
A_POS, A_NEG = (1 / 3) / (math.sqrt(1 / 3) + EPS), (-2 / 3) / (math.sqrt(1 / 3) + EPS)


def _flat(arrays):
    return np.concatenate(arrays)


def _z(values):
    values = np.asarray(values, dtype=np.float64)
    return (values - values.mean()) / (values.std(ddof=1) + EPS)


def test_grpo_and_dr_grpo_are_the_dynamics_advantage_on_every_token():
    grpo = group_token_advantages(H, R, "grpo")
    assert [len(a) for a in grpo] == [3, 2, 4]
    assert _flat(grpo) == pytest.approx([A_POS] * 5 + [A_NEG] * 4, rel=1e-12)
    assert _flat(group_token_advantages(H, R, "dr_grpo")) == pytest.approx(
        [1 / 3] * 5 + [-2 / 3] * 4, rel=1e-12
    )
    # the same function as the dynamics tables
    assert grpo[2][0] == group_advantages(np.zeros(3), R, "grpo")[2]


def test_top_rho_mask_keeps_tokens_at_or_above_tau_ties_included():
    out = group_token_advantages(H, R, "top_rho_mask", tau=2.0)
    assert _flat(out) == pytest.approx([0, A_POS, 0, A_POS, A_POS, 0, A_NEG, 0, 0], rel=1e-12)
    # from ρ: N = 9 tokens, ⌈0.2·9⌉ = 2 → τ = 2nd largest = 2.0; the three 2.0 ties all count
    assert top_rho_threshold(_flat(H), 0.2) == 2.0
    assert _flat(group_token_advantages(H, R, "top_rho_mask", rho=0.2)) == pytest.approx(
        _flat(out), rel=1e-12
    )
    assert top_rho_threshold(_flat(H), 1) == 0.5


def test_entropy_advantage_adds_the_capped_detached_entropy_term():
    out = group_token_advantages(H, R, "entropy_advantage")  # α = 0.4, κ = 2
    cap_pos, cap_neg = abs(A_POS) / 2, abs(A_NEG) / 2  # 0.2887, 0.5774
    expected_pos = [A_POS + min(0.4 * h, cap_pos) for h in (1.0, 2.0, 0.5, 2.0, 2.0)]
    # 0.4·1 = 0.4 < 0.577 kept; 0.4·4 = 1.6 capped at |A|/κ
    expected_neg = [A_NEG + 0.4, A_NEG + cap_neg, A_NEG + 0.4, A_NEG + 0.4]
    assert _flat(out) == pytest.approx(expected_pos + expected_neg, rel=1e-12)
    assert out[0][2] == pytest.approx(A_POS + 0.2, rel=1e-12)  # 0.4·0.5 under the cap


def test_gtpo_token_rewards_with_responses_shorter_than_t():
    out = group_token_advantages(H, R, "gtpo")  # α1 = α2 = 1
    # correct: t=0: d=2, ΣH=3 → 1 + (1/3)·2, 1 + (2/3)·2; t=1: ΣH=4 → 1 + (2/4)·2 twice;
    # t=2: only the first reaches it, d=1 → 1 + 1·1. incorrect alone at every t: −1 − 1 = −2
    rewards = [1 + 2 / 3, 2, 2, 1 + 4 / 3, 2, -2, -2, -2, -2]
    assert _flat(out) == pytest.approx(_z(rewards), rel=1e-12)


def test_gtpo_inverse_entropy_weights_of_incorrect_responses():
    h = [np.array([1.0, 3.0]), np.array([2.0]), np.array([4.0, 1.0])]
    r = np.array([0.0, 0.0, 1.0])
    out = group_token_advantages(h, r, "gtpo", SchemeParams(gtpo_alpha1=0.5, gtpo_alpha2=2.0))
    # t=0: incorrect H = 1, 2: 1/H = 1, 0.5, Σ = 1.5, h_0 = 2
    #   → −0.5 − 2·(1/1.5)·2, −0.5 − 2·(0.5/1.5)·2
    # t=1: only the first incorrect: −0.5 − 2·1·1; the correct one alone: 0.5 + 2·1·1 at both t
    rewards = [-0.5 - 8 / 3, -2.5, -0.5 - 4 / 3, 2.5, 2.5]
    assert _flat(out) == pytest.approx(_z(rewards), rel=1e-12)


def test_gtpo_zero_entropies_split_evenly():
    h = [np.array([0.0]), np.array([0.0]), np.array([0.0]), np.array([2.0])]
    r = np.array([1.0, 1.0, 0.0, 0.0])
    out = group_token_advantages(h, r, "gtpo")
    # correct: ΣH = 0 → 1/2 each · d=2 → 1 + 1; incorrect: the H=0 one takes all: −1 − 2, other −1
    assert _flat(out) == pytest.approx(_z([2.0, 2.0, -3.0, -1.0]), rel=1e-12)


def test_grpo_s_uses_each_responses_mean_entropy():
    out = group_token_advantages(H, R, "grpo_s")
    # Ĥ = 7/6, 2 (correct; Σ = 19/6, n = 2), 7/4 (incorrect, m = 1)
    seq = _z([1 + (7 / 6) / (19 / 6) * 2, 1 + 2 / (19 / 6) * 2, -2.0])
    assert _flat(out) == pytest.approx([seq[0]] * 3 + [seq[1]] * 2 + [seq[2]] * 4, rel=1e-12)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_all_equal_groups_get_zero(scheme):
    for rewards in ([1.0, 1.0, 1.0], [0.0, 0.0, 0.0]):
        out = group_token_advantages(H, np.array(rewards), scheme, tau=0.0)
        assert _flat(out).tolist() == [0.0] * 9


def test_single_sample_groups():
    one = [np.array([1.0, 3.0])]
    # verl: mean 0, std 1 → A = r/(1 + ε); the shaping built on it follows
    assert _flat(group_token_advantages(one, np.array([1.0]), "grpo")) == pytest.approx(
        [1 / (1 + EPS)] * 2, rel=1e-12
    )
    ent = group_token_advantages(one, np.array([1.0]), "entropy_advantage")
    assert _flat(ent) == pytest.approx([1 / (1 + EPS) + 0.4, 1 / (1 + EPS) + 0.5 / (1 + EPS)])
    for scheme in ("gtpo", "grpo_s"):  # nothing to compare with
        assert _flat(group_token_advantages(one, np.array([1.0]), scheme)).tolist() == [0, 0]


def test_padded_batch_with_two_groups_matches_the_groups_alone():
    h2 = [np.array([0.3, 0.1]), np.array([0.2])]
    r2 = np.array([0.0, 1.0])
    entropy = np.full((5, 4), 99.0)  # padding values are ignored
    mask = np.zeros((5, 4), dtype=bool)
    for row, values in enumerate([*H, *h2]):
        entropy[row, : len(values)] = values
        mask[row, : len(values)] = True
    groups = np.array([7, 7, 7, 3, 3])
    for scheme in SCHEMES:
        batch = token_advantages(entropy, mask, np.r_[R, r2], scheme, groups=groups, tau=0.25)
        alone = group_token_advantages(H, R, scheme, tau=0.25) + group_token_advantages(
            h2, r2, scheme, tau=0.25
        )
        assert batch[~mask].tolist() == [0.0] * int((~mask).sum())
        assert batch[mask] == pytest.approx(_flat(alone), rel=1e-12), scheme


def test_bad_parameters_are_one_line_errors_naming_the_key():
    where = "analyses.advantage_shaping"
    for bad, key in (({"alpha": 0}, "alpha"), ({"alpha": -1}, "alpha"), ({"kappa": 1}, "kappa")):
        with pytest.raises(ConfigError, match=rf"^{where}\.{key} must be a number > ") as caught:
            scheme_params(bad, where)
        assert "\n" not in str(caught.value)
    with pytest.raises(ConfigError, match=rf"{where}\.kapa.*did you mean {where}\.kappa"):
        scheme_params({"kapa": 3}, where)
    for rho in (0, 1.5, -0.2, True):
        with pytest.raises(ConfigError, match=r"^mini_rl\.rho = .*\(0, 1\]"):
            top_rho_threshold(np.ones(3), rho, "mini_rl.rho")
    assert scheme_params(None, where) == SchemeParams()


def test_bad_inputs():
    with pytest.raises(InputDataError, match="rewards must be 0"):
        group_token_advantages(H, np.array([1.0, 0.5, 0.0]), "gtpo")
    with pytest.raises(InputDataError, match="negative"):
        group_token_advantages([np.array([-1.0])], np.array([1.0]), "grpo")
    with pytest.raises(InputDataError, match=r"must be \(B, T\)"):
        token_advantages(np.zeros((2, 3)), np.ones((2, 2), bool), np.zeros(2), "grpo")
    with pytest.raises(ConfigError, match="advantage scheme 'ppo'"):
        group_token_advantages(H, R, "ppo")


def test_flat_tokens_in_any_order_give_the_same_advantages():
    lengths = [len(h) for h in H]
    rows = np.repeat(np.arange(3), lengths)
    position = np.concatenate([np.arange(n) for n in lengths])
    order = np.random.default_rng(0).permutation(rows.size)
    for scheme in SCHEMES:
        shuffled = flat_token_advantages(
            _flat(H)[order], rows[order], position[order], R, np.zeros(3), scheme=scheme, tau=2.0
        )
        expected = _flat(group_token_advantages(H, R, scheme, tau=2.0))[order]
        assert shuffled == pytest.approx(expected, rel=1e-12), scheme
