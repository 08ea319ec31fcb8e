"""Nodes of the aggregation pipeline (docs/aggregation.md): short verbs over HED's library.

Per (run, step), in this order:

1. :func:`check_sequences` — the shards are current and cover the step
   (:func:`hed.records.shard_checks.checked_responses`).
2. :func:`check_token_records` — the token records are current, in key order and agree with
   the responses (:func:`hed.records.shard_checks.shard_report`).
3. :func:`compute_entropy_threshold` — the exact top-ρ selection over the whole step
   (:func:`hed.core.thresholds.compute_threshold`).
4. :func:`read_lexicon` — ``aggregation.lexicon`` parsed once for the step's nodes.
5. :func:`map_candidate_words` — the word of every sampled token id, for the top-k candidates.
6. :func:`merge_token_records` — the merged, marked records and the merged responses
   (:func:`hed.analysis.step_merge.merge_step`).
7. :func:`select_high_entropy_positions`, :func:`tabulate_token_probability_mass`,
   :func:`tabulate_category_probability_mass`, :func:`summarise_step` — the per-step tables
   (:mod:`hed.analysis.step_merge`, :mod:`hed.analysis.word_mass`,
   :mod:`hed.analysis.step_summary`).

Then :func:`combine_tables` and :func:`combine_high_entropy_positions` stack the per-step
tables of every run and step. Record tables are lazy ``pyarrow.dataset.Dataset`` objects
(:class:`hed.io.datasets.ArrowParquetDataset`); the library streams them in record batches and
returns streams of tables for large outputs (the dataset writes them atomically), so memory
does not grow with the step.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.dataset as ds

from hed.analysis.step_merge import (
    HighEntropySpill,
    MergedStep,
    first_sampled_words,
    merge_step,
    read_spill,
    stacked_positions,
)
from hed.analysis.step_summary import step_summary
from hed.analysis.word_mass import category_probability_mass, token_probability_mass
from hed.config.params import AggregationParams, GenerationParams
from hed.config.prompt_params import PromptsParams
from hed.core.lexicon import Lexicon
from hed.core.thresholds import EntropyThreshold, compute_threshold
from hed.records.shard_checks import (
    CurrentGeneration,
    checked_responses,
    mass_metadata,
    non_special_entropies,
    shard_report,
    shards_mass_lexicon,
)

logger = logging.getLogger(__name__)


def check_sequences(
    prompts: pd.DataFrame,
    generation: GenerationParams | dict[str, Any],
    prompt_params: PromptsParams | dict[str, Any],
    checkpoints: dict[str, Any],
    *shard_sequences: ds.Dataset,
    run: str,
    step: int,
) -> pd.DataFrame:
    """Check that the shards are current and hold every response of the step once, in its shard.

    Args:
        prompts: ``prompts`` (the expected prompt set and its ``prompt_id`` per shard).
        generation: ``params:generation`` (``num_shards``, ``samples_per_prompt``, sampling).
        prompt_params: ``params:prompts`` (the rendering settings; parsed or its dict).
        checkpoints: ``checkpoints`` (fingerprint of each (run, step)'s checkpoint).
        *shard_sequences: ``<run>.step_<step>.shard_<k>.sequences`` for k = 0, 1, ...
        run, step: the step (bound when the pipeline is built).

    Returns:
        The responses of all shards (SEQUENCE_SCHEMA), sorted by (prompt_index, sample_index).

    Raises:
        InputDataError: see :func:`hed.records.shard_checks.checked_responses`.
        ConfigError: ``num_shards`` or ``samples_per_prompt`` is not a positive integer.
    """
    generation = GenerationParams.of(generation)
    current = _current(generation, prompt_params, checkpoints, prompts)
    return checked_responses(
        shard_sequences,
        current,
        num_shards=generation.num_shards,
        samples=generation.samples_per_prompt,
        run=run,
        step=step,
    )


def _current(
    generation: Any, prompt_params: Any, checkpoints: dict[str, Any], prompts: pd.DataFrame
) -> CurrentGeneration:
    """The configuration the shards are compared with: generation as configured, the prompts'
    rendering settings as ``params:prompts`` writes them."""
    rendering = PromptsParams.of(prompt_params).rendering.as_params()
    return CurrentGeneration(GenerationParams.of(generation).raw, rendering, checkpoints, prompts)


def check_token_records(
    sequences: pd.DataFrame,
    prompts: pd.DataFrame,
    generation: GenerationParams | dict[str, Any],
    prompt_params: PromptsParams | dict[str, Any],
    checkpoints: dict[str, Any],
    *shard_records: ds.Dataset,
    run: str,
    step: int,
) -> pd.DataFrame:
    """Check every shard's token records: current, and in agreement with the step's responses.

    Returns:
        One row per shard: shard, source (file), n_sequences, n_records.

    Raises:
        InputDataError: see :func:`hed.records.shard_checks.shard_report`.
    """
    generation = GenerationParams.of(generation)
    current = _current(generation, prompt_params, checkpoints, prompts)
    return shard_report(
        sequences, shard_records, current, num_shards=generation.num_shards, run=run, step=step
    )


def compute_entropy_threshold(
    shard_report: pd.DataFrame,
    aggregation: AggregationParams | dict[str, Any],
    *shard_records: ds.Dataset,
    run: str,
    step: int,
) -> EntropyThreshold:
    """Compute the exact top-ρ high-entropy selection of the whole step (all shards together).

    Args:
        shard_report: :func:`check_token_records`'s report (its row counts size the buffer).
        aggregation: ``params:aggregation`` (``top_entropy_frac``).
        *shard_records: the step's shard token records.
        run, step: the step.

    Returns:
        The :class:`hed.core.thresholds.EntropyThreshold` (threshold in nats, n_high_entropy,
        statistics).

    Raises:
        InputDataError: a non-finite or null entropy, or no non-special token.
        ConfigError: ``top_entropy_frac`` outside (0, 1].
    """
    rho = AggregationParams.of(aggregation).top_entropy_frac
    n_records = int(shard_report["n_records"].sum())
    entropy = non_special_entropies(shard_records, n_records, run=run, step=step)
    selection = compute_threshold(entropy, rho, run=run, step=step)
    logger.info(
        "%s.step_%d: N=%d, %d high-entropy tokens, threshold %.4f nats",
        run,
        step,
        selection.n_tokens,
        selection.n_high_entropy,
        selection.threshold,
    )
    return selection


def tabulate_entropy_threshold(selection: EntropyThreshold) -> pd.DataFrame:
    """One ``entropy_thresholds`` row: run, step, n_tokens, top_entropy_frac, n_high_entropy,
    threshold, p50, p80, p90, p95, frac_below_0_01, mean_entropy (entropies in nats).
    """
    return pd.DataFrame([selection.as_row()])


def read_lexicon(
    shard_report: pd.DataFrame, aggregation: AggregationParams | dict[str, Any]
) -> Lexicon:
    """``aggregation.lexicon`` parsed once for the step's merge and tables.

    Args:
        shard_report: :func:`check_token_records`'s report; it only places this node after
            the checks, so a run resumed ``--from-nodes`` a shard's generation includes it.
        aggregation: ``params:aggregation``.

    Raises:
        ConfigError: the lexicon is invalid (:func:`hed.core.lexicon.parse_lexicon`).
    """
    return AggregationParams.of(aggregation).parsed_lexicon


def map_candidate_words(shard_report: pd.DataFrame, *shard_records: ds.Dataset) -> pd.DataFrame:
    """Give every token id sampled in the step the word of its text taken alone.

    Args:
        shard_report: :func:`check_token_records`'s report (orders this node after the checks).
        *shard_records: the step's shard token records.

    Returns:
        token_id (int32), word (string; ``""`` when the text has no letters), sorted by id
        (:func:`hed.analysis.step_merge.first_sampled_words`).
    """
    return first_sampled_words(shard_records)


def merge_token_records(
    sequences: pd.DataFrame,
    selection: EntropyThreshold,
    lexicon: Lexicon,
    aggregation: AggregationParams | dict[str, Any],
    *shard_records: ds.Dataset,
) -> MergedStep:
    """Merge the shards into the step's records with word, category and is_high_entropy.

    Args:
        sequences: the checked responses (:func:`check_sequences`).
        selection: the step's threshold (:func:`compute_entropy_threshold`).
        lexicon: :func:`read_lexicon`.
        aggregation: ``params:aggregation`` (``chunk_records``).
        *shard_records: the step's shard token records (already checked).

    Returns:
        ``token_records`` (a stream of MERGED_TOKEN_RECORD_SCHEMA tables whose key-value
        metadata names the lexicon the shards' mass columns were computed with:
        :func:`hed.records.shard_checks.mass_metadata`; words and categories are always the
        current lexicon's, whatever the shards recorded), ``high_entropy_rows`` (the
        :class:`hed.analysis.step_merge.HighEntropySpill` that stream fills), ``sequences``.

    Raises:
        ConfigError: ``chunk_records`` is not a positive integer.
    """
    chunk_records = AggregationParams.of(aggregation).chunk_records
    metadata = mass_metadata(shards_mass_lexicon(shard_records))
    merged = merge_step(
        sequences, selection, shard_records, lexicon=lexicon, chunk_records=chunk_records
    )
    tagged = (
        table.replace_schema_metadata({**(table.schema.metadata or {}), **metadata})
        for table in merged.token_records
    )
    return merged._replace(token_records=tagged)


def select_high_entropy_positions(high_entropy_rows: HighEntropySpill) -> Iterator[pa.Table]:
    """Stream a step's high-entropy rows (HIGH_ENTROPY_POSITION_SCHEMA), set aside by the merge.

    Returns:
        Tables of ``high_entropy_positions`` rows in key order
        (:func:`hed.analysis.step_merge.read_spill`).

    Raises:
        InputDataError: the spill is missing (the merge did not complete).
    """
    return read_spill(high_entropy_rows)


def tabulate_token_probability_mass(
    selection: EntropyThreshold,
    high_entropy_positions: ds.Dataset,
    candidate_words: pd.DataFrame,
    lexicon: Lexicon,
) -> pd.DataFrame:
    """Per word: how often and how much probability sits at the step's high-entropy positions.

    Returns:
        run, step, word, category, count, count_share, sampled_prob_sum, sampled_prob_share,
        topk_mass, topk_mass_share (definitions: :mod:`hed.analysis.word_mass`).
    """
    return token_probability_mass(selection, high_entropy_positions, candidate_words, lexicon)


def tabulate_category_probability_mass(
    token_probability_mass: pd.DataFrame, selection: EntropyThreshold, lexicon: Lexicon
) -> pd.DataFrame:
    """The per-word measures summed per category (every lexicon category and ``other``)."""
    return category_probability_mass(token_probability_mass, selection, lexicon)


def summarise_step(
    entropy_thresholds: pd.DataFrame,
    sequences: ds.Dataset,
    token_records: ds.Dataset,
    lexicon: Lexicon,
) -> pd.DataFrame:
    """One ``summary_by_step`` row (columns: :func:`hed.analysis.step_summary.step_summary`).

    Raises:
        InputDataError: the merged file marks another number of high-entropy tokens than
            ``entropy_thresholds`` says (a file of another aggregation: rerun this step).
    """
    return pd.DataFrame([step_summary(entropy_thresholds, sequences, token_records, lexicon)])


def combine_tables(*tables: pd.DataFrame) -> pd.DataFrame:
    """Stack per-step tables (each carries run and step) in (run, step) pipeline order."""
    frames = [t for t in tables if len(t)]
    if not frames:
        return tables[0].iloc[:0] if tables else pd.DataFrame()
    return pd.concat(frames, ignore_index=True)


def combine_high_entropy_positions(*per_step: ds.Dataset) -> Iterator[pa.Table]:
    """Stream every step's ``high_entropy_positions`` into one table (run, step order)."""
    return stacked_positions(per_step)
