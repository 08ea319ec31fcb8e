"""Held-out validation of a policy: greedy pass@1 and the mean token entropy of its responses.

Greedy decoding makes the number a property of the weights alone (no sampling noise between
checkpoints): pass@1 = the fraction of held-out problems whose greedy response the run's
grader accepts (:mod:`hed.mini_rl.reward`; the training reward uses the same one). The entropy
is that of softmax(z) over the full vocabulary at each generated position (nats;
:func:`hed.core.entropy.entropy_from_logits`), averaged over every response token up to and
including its EOS.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from hed.mini_rl.reward import integer_match


@dataclass(frozen=True)
class ValidationResult:
    """Greedy validation of one checkpoint.

    Attributes:
        pass1: fraction of problems answered correctly (greedy, one response each).
        mean_entropy: mean next-token entropy over every response token, nats.
        mean_length: mean response length in tokens.
        n_problems: problems evaluated.
    """

    pass1: float
    mean_entropy: float
    mean_length: float
    n_problems: int

    def as_wandb(self, metric_key: str) -> dict[str, float]:
        """The W&B row: ``metric_key`` (pass@1) and ``val-aux`` keys beside it.

        ``val-core/<task>/acc/mean@1`` gives ``val-aux/<task>/entropy/mean`` and
        ``val-aux/<task>/response_length/mean``.
        """
        parts = metric_key.split("/")
        task = parts[1] if len(parts) > 2 else "validation"
        return {
            metric_key: self.pass1,
            f"val-aux/{task}/entropy/mean": self.mean_entropy,
            f"val-aux/{task}/response_length/mean": self.mean_length,
        }


def greedy_validation(
    model: Any,
    tokenizer: Any,
    prompts: Sequence[str],
    answers: Sequence[str],
    *,
    eos_token_ids: Sequence[int],
    max_new_tokens: int,
    batch_size: int,
    grade: Callable[[str, str], bool] = integer_match,
) -> ValidationResult:
    """Answer every held-out prompt greedily and grade the responses.

    The model is put in eval mode for the call and restored to its former mode afterwards.

    Args:
        model: a causal LM.
        tokenizer: its tokenizer (prompts are padded on the left here).
        prompts: fully rendered model inputs (chat template applied).
        answers: reference integers, as strings.
        eos_token_ids: tokens that end a response.
        max_new_tokens: response length limit.
        batch_size: prompts per ``generate`` call.
        grade: ``grade(response, answer) -> bool``.

    Returns:
        A :class:`ValidationResult`.
    """
    import torch

    from hed.core.entropy import entropy_from_logits

    was_training = model.training
    model.eval()
    eos = torch.tensor(list(eos_token_ids))
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else int(eos_token_ids[0])
    n_correct, entropy_sum, n_tokens = 0, 0.0, 0
    try:
        for start in range(0, len(prompts), batch_size):
            batch = list(prompts[start : start + batch_size])
            encoded = tokenizer(
                batch,
                return_tensors="pt",
                padding=True,
                padding_side="left",
                add_special_tokens=False,
            )
            with torch.no_grad():
                out = model.generate(
                    **encoded,
                    do_sample=False,
                    max_new_tokens=max_new_tokens,
                    eos_token_id=list(eos_token_ids),
                    pad_token_id=pad_id,
                    output_logits=True,
                    return_dict_in_generate=True,
                )
            new = out.sequences[:, encoded["input_ids"].shape[1] :]  # (B, T)
            entropy = entropy_from_logits(torch.stack(out.logits, dim=1).float())  # (B, T)
            is_eos = torch.isin(new, eos)
            # response tokens: up to and including the first EOS (later positions are padding)
            valid = (is_eos.cumsum(dim=1) - is_eos.int()) == 0
            entropy_sum += float(entropy[valid].sum())
            n_tokens += int(valid.sum())
            texts = tokenizer.batch_decode(
                new.masked_fill(~valid, pad_id), skip_special_tokens=True
            )
            n_correct += sum(
                grade(text, ref)
                for text, ref in zip(texts, answers[start : start + batch_size], strict=True)
            )
    finally:
        model.train(was_training)
    n = len(prompts)
    return ValidationResult(
        pass1=n_correct / n if n else float("nan"),
        mean_entropy=entropy_sum / n_tokens if n_tokens else float("nan"),
        mean_length=n_tokens / n if n else float("nan"),
        n_problems=n,
    )
