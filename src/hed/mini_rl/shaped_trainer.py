"""``ShapedGRPOTrainer``: TRL's ``GRPOTrainer`` with an entropy-shaped per-token advantage.

TRL 1.16 gives every token of a completion its completion's advantage A_i (shape (B,)). Its
``_compute_loss`` also accepts a (B, T) advantage, and this subclass uses exactly that: after
TRL has generated and scored a batch (``_generate_and_score_completions``), it replaces the
advantage with the per-token advantage of one scheme of :mod:`hed.core.advantage_shaping`
(imported, not re-written):

* ``entropy_advantage`` (Cheng et al., arXiv 2506.14758v1): A_{i,t} = A_i + min(α·H_{i,t}, |A_i|/κ);
* ``gtpo`` and ``grpo_s`` (Tan et al., arXiv 2508.04349v1): entropy-weighted token rewards,
  normalised over the group.

What the subclass feeds the formulas:

* H_{i,t}: the entropy (nats) of the policy's next-token distribution at each completion
  token, under ``softmax(logits / temperature)``, computed once per generated batch with the
  policy that sampled it (one extra no-grad forward pass, TRL's own
  ``_get_per_token_logps_and_entropies``). It is detached by construction, as Cheng et al.
  require; with ``num_iterations > 1`` the later passes over the batch reuse it (the
  entropy of the sampling policy π_old).
* r_i: the completion's reward (the weighted sum of TRL's reward functions; 0/1 for HED's
  correctness reward); groups: TRL's consecutive blocks of ``num_generations`` completions.
* the outcome advantage A_i of ``entropy_advantage``: :func:`hed.core.advantage.group_advantages`
  (GRPO, unbiased std, ε = 1e-6) rather than TRL's (ε = 1e-4): the two differ by under 1e-4
  relative.

Everything else (clipping, clip-higher, ``top_entropy_quantile``, ``entropy_coef``, the loss
type, the logged ``clip_ratio/*`` and ``entropy``) is TRL's. The shaped advantage's mean over
the batch's tokens is logged as ``shaped_advantage/mean``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from trl import GRPOTrainer

from hed.core.advantage_shaping import token_advantages
from hed.mini_rl.shaping import ShapingSpec


class ShapedGRPOTrainer(GRPOTrainer):
    """``GRPOTrainer`` whose per-token advantage is shaped by ``shaping`` (module docstring).

    Args:
        *args, **kwargs: as ``GRPOTrainer`` (single process: HED trains on one CPU).
        shaping: the scheme and its constants (:func:`hed.mini_rl.shaping.shaping_spec`).
    """

    def __init__(self, *args: Any, shaping: ShapingSpec, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.shaping = shaping
        self._batch_rewards: torch.Tensor | None = None

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        """TRL's rewards (B, n_funcs), also kept as the weighted sum r_i for the shaping."""
        rewards_per_func = super()._calculate_rewards(
            inputs, prompts, completions, completion_ids_list
        )
        weights = self.reward_weights.to(rewards_per_func.device).unsqueeze(0)
        self._batch_rewards = (rewards_per_func * weights).nansum(dim=1)
        return rewards_per_func

    def _generate_and_score_completions(self, inputs):
        """TRL's batch, with ``advantages`` replaced by the (B, T) shaped advantage."""
        batch = super()._generate_and_score_completions(inputs)
        mode = "train" if self.model.training else "eval"
        if mode != "train":
            return batch
        completion_mask = batch["completion_mask"]
        entropies = self._sampling_entropies(batch)
        rewards = self._batch_rewards
        n_generations = self.num_generations
        groups = np.arange(rewards.numel()) // n_generations
        shaped = shaped_advantages(entropies, completion_mask, rewards, groups, self.shaping)
        batch["advantages"] = shaped.to(batch["advantages"].dtype)
        tokens = completion_mask.sum().clamp(min=1)
        self._metrics[mode]["shaped_advantage/mean"].append(
            float((shaped * completion_mask).sum() / tokens)
        )
        return batch

    @torch.no_grad()
    def _sampling_entropies(self, batch: dict[str, Any]) -> torch.Tensor:
        """(B, T) entropies of the completions' tokens under the policy that sampled them."""
        input_ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
        attention_mask = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
        _, entropies, _ = self._get_per_token_logps_and_entropies(
            self.model,
            input_ids,
            attention_mask,
            batch["completion_ids"].size(1),
            compute_entropy=True,
        )
        return entropies


def shaped_advantages(
    entropies: torch.Tensor,
    completion_mask: torch.Tensor,
    rewards: torch.Tensor,
    groups: np.ndarray,
    shaping: ShapingSpec,
) -> torch.Tensor:
    """The (B, T) float32 advantage of ``shaping.scheme`` for a batch of completions.

    Args:
        entropies: (B, T) entropies H_{i,t}, nats (padding ignored).
        completion_mask: (B, T) 1 on completion tokens (a completion's tokens come first).
        rewards: (B,) rewards r_i.
        groups: (B,) prompt group of each completion.
        shaping: scheme and constants.

    Returns:
        :func:`hed.core.advantage_shaping.token_advantages` as a float32 tensor on
        ``entropies``' device, 0 on padding.

    Raises:
        InputDataError: a reward other than 0/1 under ``gtpo`` / ``grpo_s``, or a non-finite
            entropy (from :func:`~hed.core.advantage_shaping.token_advantages`).
    """
    shaped = token_advantages(
        entropies.detach().float().cpu().numpy(),
        completion_mask.detach().cpu().numpy().astype(bool),
        rewards.detach().float().cpu().numpy(),
        shaping.scheme,
        shaping.params,
        groups=groups,
    )
    return torch.from_numpy(shaped).to(device=entropies.device, dtype=torch.float32)
