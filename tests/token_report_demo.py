"""Demo records for the token report: real SmolLM2 token ids and texts, HED's own word rule.

Two steps (0 and 20) × 3 prompts × 2 samples. Each response is tokenized with the real
tokenizer; ``token_text`` comes from :func:`hed.core.token_text.token_texts`, ``word`` from
:func:`hed.core.words.assign_words`, ``category`` from the default lexicon, ``is_high_entropy`` from
the exact top-ρ rule of the step. Entropies, probabilities and top-k alternatives are drawn
from a seeded generator (the sampled token is among the top-k). One response holds
``<script>alert(1)</script>`` and ``</span>``.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pyarrow as pa
import yaml

from hed.core.lexicon import parse_lexicon
from hed.core.token_text import token_texts
from hed.core.words import assign_words
from hed.records.schema import MERGED_TOKEN_RECORD_SCHEMA, SEQUENCE_SCHEMA

from .conftest import REPO_ROOT

RUN = "demo_run"
STEPS = (0, 20)
PROMPTS = [
    "What is 3 + 4?",
    "Write the HTML tag that runs JavaScript, then compute 5 * 2.",
    "How many primes are below 10?",
]
ANSWERS = ["7", "10", "4"]
RESPONSES = {
    (0, 0): "Let me think. So we need 3 + 4 = 7.\nWait, perhaps I should check: 7 is right.\n"
    "The answer is 7.",
    (0, 1): "Hmm, 3 + 4... maybe 8? Actually, let me recount: 3, then 4 more gives 7. "
    "The answer is 7.",
    (1, 0): "The tag is <script>alert(1)</script> and </span> closes a span. So 5 * 2 = 10.",
    (1, 1): 'I guess it is <b>bold</b> & "quoted" <script>window.__pwned=1</script> — '
    "5 × 2 = 10. Therefore the answer is 10.",
    (2, 0): "Primes below 10: 2, 3, 5, 7. So there are 4. Wait, is 1 prime? No. Answer: 4.",
    (2, 1): "First, list them: 2, 3, 5, 7, 9. Hence 5 primes. The answer is 5.",
}
RHO = 0.2
TOP_K = 5


def default_lexicon():
    params = yaml.safe_load((REPO_ROOT / "conf/base/parameters_aggregation.yml").read_text())
    return parse_lexicon(params["aggregation"]["lexicon"])


def demo_step(
    tokenizer, step: int, seed: int = 0, responses: dict | None = None
) -> tuple[pa.Table, pd.DataFrame]:
    """Merged records and sequences of one demo step (schemas of docs/datasets.md).

    ``responses``: ``{(prompt_index, sample_index): text}`` (default :data:`RESPONSES`).
    """
    responses = RESPONSES if responses is None else responses
    rng = np.random.default_rng(seed + step)
    lexicon = default_lexicon()
    vocab = len(tokenizer)
    rows, seqs = [], []
    for (p, s), text in responses.items():
        ids = [*tokenizer.encode(text, add_special_tokens=False), tokenizer.eos_token_id]
        texts = token_texts(tokenizer, ids)
        n = len(ids)
        entropy = np.where(
            rng.random(n) < 0.5, rng.uniform(1e-5, 0.01, n), rng.lognormal(-0.7, 1.1, n)
        ).astype(np.float32)
        for pos, (tid, ttext) in enumerate(zip(ids, texts, strict=True)):
            others = [int(i) for i in rng.choice(vocab, TOP_K, replace=False) if i != tid]
            probs = np.sort(rng.dirichlet(np.full(TOP_K, 0.6)))[::-1].astype(np.float32)
            rank = int(rng.integers(0, 2))
            topk = [*others[:rank], tid, *others[rank : TOP_K - 1]]
            rows.append(
                {
                    "run": RUN,
                    "step": step,
                    "shard": p % 2,
                    "prompt_index": p,
                    "sample_index": s,
                    "position": pos,
                    "token_id": tid,
                    "token_text": ttext,
                    "entropy": float(entropy[pos]),
                    "logprob": float(np.log(probs[rank])),
                    "prob": float(probs[rank]),
                    "topk_token_ids": topk,
                    "topk_probs": probs.tolist(),
                    "is_special": tid == tokenizer.eos_token_id,
                }
            )
        correct = responses[(p, s)].rstrip(".").split()[-1] == ANSWERS[p]
        seqs.append(
            {
                "run": RUN,
                "step": step,
                "shard": p % 2,
                "prompt_index": p,
                "prompt_id": f"{p:016x}",
                "sample_index": s,
                "response_text": "".join(texts),
                "n_tokens": n,
                "finish_reason": "eos",
                "extracted_answer": responses[(p, s)].rstrip(".").split()[-1],
                "correct": correct,
            }
        )
    frame = pd.DataFrame(rows)
    starts = frame["position"].to_numpy() == 0
    words = assign_words(pa.array(frame["token_text"]), starts, frame["is_special"].to_numpy())
    frame["word"] = words.to_pylist()
    frame["category"] = lexicon.categorise(words).to_pylist()
    candidates = frame[~frame["is_special"]]
    k = math.ceil(RHO * len(candidates) - 1e-9)
    order = np.lexsort(
        (
            candidates["position"],
            candidates["sample_index"],
            candidates["prompt_index"],
            -candidates["entropy"].astype(np.float64),
        )
    )
    frame["is_high_entropy"] = False
    frame.loc[candidates.index[order[:k]], "is_high_entropy"] = True
    frame = frame.assign(anthropomorphic_mass=None, reasoning_mass=None)  # not recorded
    records = pa.Table.from_pandas(frame, schema=MERGED_TOKEN_RECORD_SCHEMA, preserve_index=False)
    threshold = float(candidates["entropy"].iloc[order[:k]].min())
    sequences = pa.Table.from_pylist(seqs, schema=SEQUENCE_SCHEMA).to_pandas()
    sequences.attrs["threshold"] = threshold
    return records, sequences


def demo_prompts() -> pd.DataFrame:
    """The ``prompts`` table of the demo (prompt_index, prompt_id, prompt, answer)."""
    return pd.DataFrame(
        {
            "prompt_index": range(len(PROMPTS)),
            "prompt_id": [f"{p:016x}" for p in range(len(PROMPTS))],
            "prompt": PROMPTS,
            "answer": ANSWERS,
        }
    )
