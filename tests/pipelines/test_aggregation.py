"""Aggregation pipeline: coverage checks, the exact step threshold, merged records, tables.

Hand-made shard files stand in for generation's output; a cut-down pipeline runs with
``SequentialRunner`` on the real catalog entries, with every path under ``tmp_path``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from kedro.config import OmegaConfigLoader
from kedro.io import DataCatalog, MemoryDataset
from kedro.runner import SequentialRunner

from hed.config.layout import RunSpec, StudyLayout
from hed.core.lexicon import parse_lexicon
from hed.errors import ConfigError, HEDError, InputDataError
from hed.io.datasets import write_parquet_atomically
from hed.pipelines.aggregation import create_pipeline
from hed.pipelines.aggregation import nodes as agg
from hed.records.schema import (
    HIGH_ENTROPY_POSITION_SCHEMA,
    MERGED_TOKEN_RECORD_SCHEMA,
    SEQUENCE_SCHEMA,
    TOKEN_RECORD_SCHEMA,
)
from hed.records.sequence import MASS_COLUMNS

REPO = Path(__file__).resolve().parents[2]
LEXICON = {
    "anthropomorphic": ["wait", "perhaps", "hmm"],
    "reasoning": ["so", "let", "alternatively", "wait"],
}
AGGREGATION = {"top_entropy_frac": 0.2, "chunk_records": 7, "lexicon": LEXICON}
PARSED = parse_lexicon(LEXICON)

# Responses of a small step: (prompt_index, sample_index) -> [(token_text, entropy), ...].
# The last token of each response is the special "<|im_end|>".
RESPONSES = {
    (0, 0): [(" Wait", 2.0), (",", 0.1), (" so", 1.5), (" 2", 0.0)],
    (0, 1): [("Altern", 3.0), ("atively", 0.2), (" let", 1.0), (".", 0.0)],
    (1, 0): [(" Hmm", 2.5), (",", 2.5), (" perhaps", 0.5), (" x", 0.3)],
    (1, 1): [(" So", 1.5), (" the", 0.01), (" answer", 2.5), (" is", 0.0)],
    (2, 0): [(" let", 0.9), (" me", 0.8), (" check", 2.0), ("!", 0.0)],
    (2, 1): [(" wait", 0.0), (" 42", 0.0), (" ok", 0.7), (" done", 0.6)],
}
END = ("<|im_end|>", 5.0)


def _vocabulary(responses) -> dict[str, int]:
    texts = sorted({t for tokens in responses.values() for t, _ in tokens} | {END[0], " ok"})
    return {t: i for i, t in enumerate(texts)}


def shard_tables(
    responses,
    num_shards: int,
    run: str = "r",
    step: int = 0,
    special_end: bool = True,
    *,
    recorded: dict | None = None,
):
    """(records, sequences) tables per shard, as generation writes them.

    ``hed.generation`` holds run, step, shard and num_shards, plus the fields of ``recorded``
    (e.g. :data:`RECORDED`) with the shard's prompt ids, when given.
    """
    vocab = _vocabulary(responses)
    ok = vocab[" ok"]  # every position's second candidate
    out = []
    for shard in range(num_shards):
        rows, seqs = [], []
        for (p, s), response in sorted(responses.items()):
            if p % num_shards != shard:
                continue
            tokens = [*response, END] if special_end else response
            for position, (text, entropy) in enumerate(tokens):
                prob = float(np.exp(-entropy))
                rows.append(
                    {
                        "run": run,
                        "step": step,
                        "shard": shard,
                        "prompt_index": p,
                        "sample_index": s,
                        "position": position,
                        "token_id": vocab[text],
                        "token_text": text,
                        "entropy": entropy,
                        "logprob": math.log(prob),
                        "prob": prob,
                        "topk_token_ids": [vocab[text], ok],
                        "topk_probs": [prob, (1 - prob) / 2],
                        "is_special": text == END[0],
                    }
                )
            seqs.append(
                {
                    "run": run,
                    "step": step,
                    "shard": shard,
                    "prompt_index": p,
                    "prompt_id": f"id{p}",
                    "sample_index": s,
                    "response_text": "".join(t for t, _ in tokens),
                    "n_tokens": len(tokens),
                    "finish_reason": "eos",
                    "extracted_answer": None,
                    "correct": (p + s) % 2 == 0,
                }
            )
        fields = {"run": run, "step": step, "shard": shard, "num_shards": num_shards}
        if recorded is not None:
            ids = sorted({f"id{p}" for p, _ in responses if p % num_shards == shard})
            fields = {"prompt_ids": ids, **recorded, **fields}
        meta = {b"hed.generation": json.dumps(fields)}
        records = pa.Table.from_pylist(rows, schema=TOKEN_RECORD_SCHEMA).replace_schema_metadata(
            meta
        )
        sequences = pa.Table.from_pylist(seqs, schema=SEQUENCE_SCHEMA).replace_schema_metadata(meta)
        out.append((records, sequences))
    return out


def write_shards(root: Path, tables) -> tuple[list[ds.Dataset], list[ds.Dataset]]:
    records, sequences = [], []
    for k, (rec, seq) in enumerate(tables):
        write_parquet_atomically(root / f"shard_{k}.parquet", rec)
        write_parquet_atomically(root / f"shard_{k}.sequences.parquet", seq)
        records.append(ds.dataset(str(root / f"shard_{k}.parquet")))
        sequences.append(ds.dataset(str(root / f"shard_{k}.sequences.parquet")))
    return records, sequences


def prompts_frame(n: int = 3) -> pd.DataFrame:
    return pd.DataFrame(
        {"prompt_index": np.arange(n, dtype=np.int32), "prompt_id": [f"id{i}" for i in range(n)]}
    )


GENERATION = {
    "num_shards": 2,
    "samples_per_prompt": 2,
    "temperature": 1.0,
    "top_p": 1.0,
    "top_k": None,
    "max_new_tokens": 5,
    "batch_size": 8,
    "seed": 0,
    "top_prob_k": 2,
    "dtype": "by_device",
    "torch_threads": None,
    "log_every_s": 30,
}
PROMPT_PARAMS = {"apply_chat_template": True, "enable_thinking": None, "system_prompt": None}
CHECKPOINTS = {
    "r": {
        "role": "single",
        "checkpoint_root": "ckpt",
        "steps": {
            str(s): {
                "model_dir": "ckpt",
                "config_sha256": "c" * 64,
                "weights_index_sha256": "w" * 64,
            }
            for s in (0, 5, 10)
        },
    }
}


@pytest.fixture(autouse=True)
def cpu_without_native_bf16(monkeypatch):
    """by_device on CPU is float32 here, as on a CPU without AVX512-BF16 / AMX."""
    from hed.core import compute_dtype

    monkeypatch.setattr(compute_dtype, "cpu_has_native_bf16", lambda: False)


#: What generate_shard records for GENERATION, PROMPT_PARAMS and CHECKPOINTS on a CPU.
RECORDED = {
    "samples_per_prompt": 2,
    "sampling": {
        "temperature": 1.0,
        "top_p": 1.0,
        "top_k": None,
        "max_new_tokens": 5,
        "top_prob_k": 2,
        "seed": 0,
        "batch_size": 8,
    },
    "dtype": "float32",
    "device": "cpu",
    "checkpoint": CHECKPOINTS["r"]["steps"]["0"],
    "chat_template": PROMPT_PARAMS,
    "hed_version": "0.0.test",
}


def check_sequences(
    prompts, generation, *sequences, prompt_params=PROMPT_PARAMS, checkpoints=CHECKPOINTS
):
    """``agg.check_sequences`` for run "r" step 0 with the default current configuration."""
    return agg.check_sequences(
        prompts, generation, prompt_params, checkpoints, *sequences, run="r", step=0
    )


def run_checks(
    records,
    sequences,
    generation=GENERATION,
    prompts=None,
    *,
    prompt_params=PROMPT_PARAMS,
    checkpoints=CHECKPOINTS,
):
    prompts = prompts if prompts is not None else prompts_frame()
    checked = check_sequences(
        prompts, generation, *sequences, prompt_params=prompt_params, checkpoints=checkpoints
    )
    report = agg.check_token_records(
        checked, prompts, generation, prompt_params, checkpoints, *records, run="r", step=0
    )
    return checked, report


def one_line(exc: pytest.ExceptionInfo) -> str:
    message = str(exc.value)
    assert "\n" not in message
    assert isinstance(exc.value, HEDError)
    return message


# --------------------------------------------------------------------------- coverage


def test_checks_pass_on_complete_step(tmp_path):
    records, sequences = write_shards(tmp_path, shard_tables(RESPONSES, 2))
    checked, report = run_checks(records, sequences)
    assert list(zip(checked.prompt_index, checked.sample_index, strict=True)) == sorted(RESPONSES)
    assert report["n_records"].sum() == sum(len(v) + 1 for v in RESPONSES.values())


def test_missing_shard_is_named(tmp_path):
    _records, sequences = write_shards(tmp_path, shard_tables(RESPONSES, 2))
    with pytest.raises(InputDataError) as exc:
        check_sequences(prompts_frame(), GENERATION, sequences[0])
    assert "missing shard(s) r.step_0.shard_1.sequences" in one_line(exc)


def test_missing_responses_are_named_with_their_shard(tmp_path):
    tables = shard_tables(RESPONSES, 2)
    tables[1] = (tables[1][0].slice(0, 0), tables[1][1].slice(0, 0))
    records, sequences = write_shards(tmp_path, tables)
    with pytest.raises(InputDataError) as exc:
        run_checks(records, sequences)
    message = one_line(exc)
    assert "missing responses (prompt_index, sample_index) (1, 0), (1, 1) (2 in all)" in message
    assert "shard_1.sequences.parquet" in message


def test_duplicated_prompt_is_named(tmp_path):
    tables = shard_tables(RESPONSES, 2)
    # prompt 1 also written into shard 0
    extra = shard_tables({k: v for k, v in RESPONSES.items() if k[0] == 1}, 1)[0]
    tables[0] = (
        pa.concat_tables([tables[0][0], extra[0]]),
        pa.concat_tables([tables[0][1], extra[1]]),
    )
    records, sequences = write_shards(tmp_path, tables)
    with pytest.raises(InputDataError) as exc:
        run_checks(records, sequences)
    message = one_line(exc)
    assert "duplicated prompt: prompt_index 1 appears in shard 0" in message
    assert "shard_0.sequences.parquet" in message and "shard_1.sequences.parquet" in message


def test_unexpected_extra_shard_is_named(tmp_path):
    tables = shard_tables(RESPONSES, 3)
    _records, sequences = write_shards(tmp_path, tables)
    # three shard files but the configuration says two
    with pytest.raises(InputDataError) as exc:
        check_sequences(prompts_frame(), GENERATION, *sequences)
    message = one_line(exc)
    assert (
        "unexpected extra sequences shard 2" in message and "shard_2.sequences.parquet" in message
    )
    # shard files of a 3-shard generation read as 2 shards: their metadata says so
    with pytest.raises(InputDataError) as exc:
        check_sequences(prompts_frame(), GENERATION, *sequences[:2])
    assert "num_shards=3" in one_line(exc) and "shard 2 would be unexpected" in str(exc.value)


def test_response_in_wrong_shard_is_named(tmp_path):
    tables = shard_tables(RESPONSES, 2)
    _records, sequences = write_shards(tmp_path, tables[::-1])  # shard files swapped
    with pytest.raises(InputDataError) as exc:
        check_sequences(prompts_frame(), GENERATION, *sequences)
    assert "shard_0.sequences.parquet" in one_line(exc)


def test_duplicated_token_records_are_named(tmp_path):
    tables = shard_tables(RESPONSES, 2)
    rec = tables[0][0]
    doubled = pa.concat_tables([rec.slice(0, 3), rec.slice(2, 1), rec.slice(3)])
    tables[0] = (doubled, tables[0][1])
    records, sequences = write_shards(tmp_path, tables)
    with pytest.raises(InputDataError) as exc:
        run_checks(records, sequences)
    message = one_line(exc)
    assert (
        "duplicated token records (prompt_index, sample_index, position) (0, 0, 2) (1 in all)"
        in message
    )
    assert "shard_0.parquet" in message


def test_records_not_matching_responses_are_named(tmp_path):
    tables = shard_tables(RESPONSES, 2)
    rec = tables[1][0]
    tables[1] = (rec.slice(0, rec.num_rows - 1), tables[1][1])  # last token of (1, 1) missing
    records, sequences = write_shards(tmp_path, tables)
    with pytest.raises(InputDataError) as exc:
        run_checks(records, sequences)
    assert "(1, 1) has 4 token records (positions 0–3) but n_tokens = 5" in one_line(exc)


def test_shard_file_with_missing_column_is_named(tmp_path):
    tables = shard_tables(RESPONSES, 2)
    tables[1] = (tables[1][0].drop_columns(["entropy"]), tables[1][1])
    records, sequences = write_shards(tmp_path, tables)
    with pytest.raises(InputDataError) as exc:
        run_checks(records, sequences)
    message = one_line(exc)
    assert "shard_1.parquet: missing column(s) entropy" in message


def test_nan_entropy_is_named(tmp_path):
    tables = shard_tables(RESPONSES, 2)
    rec = tables[1][0]
    entropy = rec.column("entropy").to_numpy().copy()
    entropy[2] = np.nan
    tables[1] = (
        rec.set_column(rec.schema.get_field_index("entropy"), "entropy", pa.array(entropy)),
        tables[1][1],
    )
    records, sequences = write_shards(tmp_path, tables)
    _, report = run_checks(records, sequences)
    with pytest.raises(InputDataError) as exc:
        agg.compute_entropy_threshold(report, AGGREGATION, *records, run="r", step=0)
    message = one_line(exc)
    assert (
        "shard_1.parquet: column entropy is nan at (prompt_index, sample_index, position) (1, 0, 2)"
        in message
    )


def test_step_with_zero_tokens_fails(tmp_path):
    only_special = {(p, s): [] for p in range(3) for s in range(2)}
    records, sequences = write_shards(tmp_path, shard_tables(only_special, 2))
    _, report = run_checks(records, sequences)
    with pytest.raises(InputDataError) as exc:
        agg.compute_entropy_threshold(report, AGGREGATION, *records, run="r", step=0)
    assert "r.step_0: zero non-special token records in" in one_line(exc)


def test_threshold_is_over_the_union_of_shards(tmp_path):
    responses = {
        (0, 0): [("a", 0.0), ("b", 1.0), ("c", 2.0)],
        (1, 0): [("d", 7.0), ("e", 8.0), ("f", 9.0)],
    }
    records, sequences = write_shards(tmp_path, shard_tables(responses, 2, special_end=False))
    generation = {**GENERATION, "num_shards": 2, "samples_per_prompt": 1}
    _, report = run_checks(records, sequences, generation, prompts_frame(2))
    selection = agg.compute_entropy_threshold(
        report, {"top_entropy_frac": 0.2}, *records, run="r", step=0
    )
    # N = 6, ⌈1.2⌉ = 2 tokens: 9 and 8; per shard the threshold would be 2 (shard 0) or 9 (shard 1)
    assert (selection.n_high_entropy, selection.threshold) == (2, 8.0)


# --------------------------------------------------------------------------- staleness


def current_shards(tmp_path, recorded=RECORDED):
    """Shard files whose ``hed.generation`` metadata matches the default configuration."""
    return write_shards(tmp_path, shard_tables(RESPONSES, 2, recorded=recorded))


@pytest.mark.parametrize(
    ("name", "now", "shown_then", "shown_now"),
    [
        ("temperature", 0.7, "1.0", "0.7"),
        ("top_p", 0.95, "1.0", "0.95"),
        ("top_k", 50, "null", "50"),
        ("max_new_tokens", 8, "5", "8"),
        ("seed", 1, "0", "1"),
        ("top_prob_k", 5, "2", "5"),
        ("samples_per_prompt", 3, "2", "3"),
    ],
)
def test_shard_made_with_another_sampling_parameter_is_refused(
    tmp_path, name, now, shown_then, shown_now
):
    records, sequences = current_shards(tmp_path)
    with pytest.raises(InputDataError) as exc:
        run_checks(records, sequences, generation={**GENERATION, name: now})
    message = one_line(exc)
    assert message.startswith(f"{tmp_path}/shard_0.sequences.parquet: stale shard: ")
    assert (
        f"generation.{name} was {shown_then} when it was generated but is {shown_now} now"
        in message
    )
    assert f"delete {tmp_path}/ and run generation with --only-missing-outputs" in message
    assert message.endswith(f"or set generation.{name}: {shown_then}")


def test_shard_made_in_another_dtype_is_refused(tmp_path):
    records, sequences = current_shards(tmp_path)
    run_checks(records, sequences, generation={**GENERATION, "dtype": "float32"})  # = by_device
    with pytest.raises(InputDataError) as exc:
        run_checks(records, sequences, generation={**GENERATION, "dtype": "bfloat16"})
    assert "generation.dtype was float32 when it was generated but is bfloat16 now" in one_line(exc)


def test_shards_of_one_step_in_two_dtypes_are_refused(tmp_path):
    """``by_device`` is bf16 on CUDA, fp32 on this CPU: a step resumed elsewhere mixes them."""
    tables = shard_tables(RESPONSES, 2, recorded=RECORDED)
    on_gpu = shard_tables(
        RESPONSES, 2, recorded={**RECORDED, "dtype": "bfloat16", "device": "cuda"}
    )
    records, sequences = write_shards(tmp_path, [tables[0], on_gpu[1]])
    with pytest.raises(InputDataError) as exc:
        run_checks(records, sequences)
    message = one_line(exc)
    assert f"{tmp_path}/shard_1.sequences.parquet was generated in bfloat16" in message
    assert f"{tmp_path}/shard_0.sequences.parquet in float32" in message


def test_shard_from_another_checkpoint_is_refused(tmp_path):
    records, sequences = current_shards(tmp_path)
    retrained = json.loads(json.dumps(CHECKPOINTS))
    retrained["r"]["steps"]["0"]["weights_index_sha256"] = "0123456789ab" + "0" * 52
    with pytest.raises(InputDataError) as exc:
        run_checks(records, sequences, checkpoints=retrained)
    message = one_line(exc)
    assert (
        "stale shard: checkpoint weights_index_sha256 was wwwwwwwwwwww when it was generated "
        "but is 0123456789ab (checkpoints dataset, ckpt) now" in message
    )
    assert message.endswith("or restore the checkpoint it was generated from")
    # a moved checkpoint folder holds the same model: not stale
    moved = json.loads(json.dumps(CHECKPOINTS))
    moved["r"]["steps"]["0"]["model_dir"] = "/elsewhere/global_step_0/actor_hf"
    run_checks(records, sequences, checkpoints=moved)


def test_checkpoints_without_the_step_are_refused(tmp_path):
    records, sequences = current_shards(tmp_path)
    with pytest.raises(InputDataError) as exc:
        run_checks(records, sequences, checkpoints={"r": {"steps": {"5": {}}}})
    assert "the checkpoints dataset has no entry for r step 0" in one_line(exc)


def test_shard_for_another_prompt_set_is_refused(tmp_path):
    records, sequences = current_shards(tmp_path)
    prompts = prompts_frame().assign(prompt_id=["id0", "other1", "id2"])
    with pytest.raises(InputDataError) as exc:
        run_checks(records, sequences, prompts=prompts)
    message = one_line(exc)
    assert message.startswith(f"{tmp_path}/shard_1.sequences.parquet: stale shard: prompt_ids was ")
    assert (
        "prompt_ids was 1 ids (1 not in the current prompts, e.g. id1) when it was generated "
        "but is 1 ids (1 not in the shard, e.g. other1) now" in message
    )


def test_shard_rendered_with_another_chat_template_setting_is_refused(tmp_path):
    records, sequences = current_shards(tmp_path)
    with pytest.raises(InputDataError) as exc:
        run_checks(
            records, sequences, prompt_params={**PROMPT_PARAMS, "system_prompt": "Be brief."}
        )
    assert (
        "prompts.system_prompt was null when it was generated but is 'Be brief.' now"
        in one_line(exc)
    )
    # not set = the default (true); an empty system prompt = none
    run_checks(records, sequences, prompt_params={"system_prompt": ""})
    with pytest.raises(InputDataError, match=r"prompts\.apply_chat_template was true"):
        run_checks(records, sequences, prompt_params={"apply_chat_template": False})


def test_the_parsed_prompts_section_checks_as_its_dict_does(tmp_path):
    from hed.config.prompt_params import prompts_params

    records, sequences = current_shards(tmp_path)
    raw = {**PROMPT_PARAMS, "seed": 4, "instruction_suffix": "!"}
    checked, report = run_checks(records, sequences, prompt_params=raw)
    typed = run_checks(records, sequences, prompt_params=prompts_params(raw))
    assert checked.equals(typed[0])
    pd.testing.assert_frame_equal(report, typed[1])
    with pytest.raises(InputDataError, match=r"prompts\.enable_thinking was null"):
        run_checks(records, sequences, prompt_params=prompts_params({"enable_thinking": True}))


def test_stale_token_records_next_to_current_sequences_are_refused(tmp_path):
    tables = shard_tables(RESPONSES, 2, recorded=RECORDED)
    hot = {**RECORDED, "sampling": {**RECORDED["sampling"], "temperature": 1.3}}
    tables[1] = (shard_tables(RESPONSES, 2, recorded=hot)[1][0], tables[1][1])
    records, sequences = write_shards(tmp_path, tables)
    with pytest.raises(InputDataError) as exc:
        run_checks(records, sequences)
    assert one_line(exc).startswith(
        f"{tmp_path}/shard_1.parquet: stale shard: generation.temperature was 1.3"
    )


@pytest.mark.parametrize(("then", "now"), [("hf", "vllm"), ("vllm", "hf")])
def test_shard_made_with_another_backend_is_refused(tmp_path, then, now):
    recorded = {**RECORDED, "backend": {"name": then, "version": "0.32.0"}}
    records, sequences = current_shards(tmp_path, recorded=recorded)
    run_checks(records, sequences, generation={**GENERATION, "backend": then})  # current
    with pytest.raises(InputDataError) as exc:
        run_checks(records, sequences, generation={**GENERATION, "backend": now})
    message = one_line(exc)
    assert f"generation.backend was '{then}' when it was generated but is '{now}' now" in message
    assert message.endswith(f"or set generation.backend: '{then}'")


def test_backend_version_and_engine_settings_are_not_compared(tmp_path):
    recorded = {
        **RECORDED,
        "backend": {"name": "vllm", "version": "0.31.0", "settings": {"max_num_seqs": 8}},
    }
    records, sequences = current_shards(tmp_path, recorded=recorded)
    generation = {**GENERATION, "backend": "vllm", "vllm": {"max_num_seqs": 256}}
    checked, _ = run_checks(records, sequences, generation=generation)
    assert len(checked) == len(RESPONSES)


def test_parameters_that_do_not_shape_the_records_are_not_compared(tmp_path):
    records, sequences = current_shards(tmp_path)
    unchanged = run_checks(records, sequences)
    changed = {**GENERATION, "batch_size": 1, "torch_threads": 3, "log_every_s": 1}
    checked, report = run_checks(records, sequences, generation=changed)
    pd.testing.assert_frame_equal(checked, unchanged[0])
    pd.testing.assert_frame_equal(report, unchanged[1])


# --------------------------------------------------------------------------- merge and tables


def merged_step(tmp_path, responses=RESPONSES, aggregation=AGGREGATION):
    records, sequences = write_shards(tmp_path, shard_tables(responses, 2))
    checked, report = run_checks(records, sequences)
    selection = agg.compute_entropy_threshold(report, aggregation, *records, run="r", step=0)
    lexicon = agg.read_lexicon(report, aggregation)
    merged = agg.merge_token_records(checked, selection, lexicon, aggregation, *records)
    write_parquet_atomically(
        tmp_path / "merged.parquet", merged.token_records, schema=MERGED_TOKEN_RECORD_SCHEMA
    )
    write_parquet_atomically(
        tmp_path / "high.parquet", agg.select_high_entropy_positions(merged.high_entropy_rows)
    )
    assert not Path(
        merged.high_entropy_rows.directory
    ).exists()  # the spill is read once, then removed
    words = agg.map_candidate_words(report, *records)
    return selection, ds.dataset(str(tmp_path / "merged.parquet")), merged.sequences, words


def test_merged_records_are_ordered_and_marked(tmp_path):
    selection, merged, _, _ = merged_step(tmp_path)
    table = merged.to_table()
    assert table.schema.remove_metadata() == MERGED_TOKEN_RECORD_SCHEMA
    columns = (table.column(c).to_pylist() for c in ("prompt_index", "sample_index", "position"))
    keys = list(zip(*columns, strict=True))
    assert keys == sorted(keys) and len(keys) == len(set(keys)) == 30
    frame = table.to_pandas()
    # N = 24 non-special tokens, ⌈0.2·24⌉ = ⌈4.8⌉ = 5: 3.0, 2.5 ×3, then one of the three 2.0s
    assert (selection.n_tokens, selection.n_high_entropy, selection.threshold) == (24, 5, 2.0)
    high = frame[frame.is_high_entropy]
    assert len(high) == 5 and not high.is_special.any()
    # ties at 2.0 are (0,0,0) " Wait" and (2,0,2) " check": the first in key order is taken
    high_keys = set(zip(high.prompt_index, high.sample_index, high.position, strict=True))
    assert (0, 0, 0) in high_keys and (2, 0, 2) not in high_keys
    keys = zip(frame.prompt_index, frame.sample_index, frame.position, strict=True)
    word = dict(zip(keys, frame.word, strict=True))
    assert word[(0, 1, 0)] == word[(0, 1, 1)] == "alternatively"  # one word over two tokens
    assert word[(0, 0, 0)] == "wait"  # " Wait" + "," → wait
    assert (
        word[(0, 0, 1)] == "" and word[(0, 0, 3)] == "" and word[(0, 0, 4)] == ""
    )  # ",", " 2", special
    category = dict(zip(frame.word, frame.category, strict=True))
    assert category["wait"] == "anthropomorphic"  # listed under both: the first category wins
    assert (
        category["alternatively"] == "reasoning"
        and category["answer"] == "other"
        and category[""] == "other"
    )


def test_tables_and_shares(tmp_path):
    selection, merged, sequences, words = merged_step(tmp_path)
    positions = ds.dataset(str(tmp_path / "high.parquet"))
    assert positions.schema.remove_metadata() == HIGH_ENTROPY_POSITION_SCHEMA
    # the positions are exactly the merged rows marked high-entropy
    marked = merged.to_table(filter=ds.field("is_high_entropy")).select(
        HIGH_ENTROPY_POSITION_SCHEMA.names
    )
    assert positions.to_table().equals(marked.cast(HIGH_ENTROPY_POSITION_SCHEMA))
    assert positions.count_rows() == selection.n_high_entropy
    word_table = agg.tabulate_token_probability_mass(selection, positions, words, PARSED)
    category_table = agg.tabulate_category_probability_mass(word_table, selection, PARSED)
    for table in (word_table, category_table):
        for share in ("count_share", "sampled_prob_share", "topk_mass_share"):
            assert abs(table[share].sum() - 1) < 1e-6
    high = positions.to_table().to_pandas()
    named = high[high.word != ""]
    expected = named.groupby("word")["prob"].sum() / named["prob"].sum()
    got = word_table.set_index("word")["sampled_prob_share"]
    assert np.allclose(got[expected.index], expected)
    assert (
        word_table.set_index("word").loc["ok", "count"] == 0
    )  # sampled, but only as a top-k candidate here
    assert list(category_table.category) == ["anthropomorphic", "reasoning", "other"]
    sequences_path = tmp_path / "seq.parquet"
    write_parquet_atomically(sequences_path, sequences, schema=SEQUENCE_SCHEMA)
    thresholds = agg.tabulate_entropy_threshold(selection)
    summary = agg.summarise_step(thresholds, ds.dataset(str(sequences_path)), merged, PARSED)
    row = summary.iloc[0]
    assert row.n_high_entropy == 5
    # the category counts are those of the merged file's marked rows, i.e. of the positions
    for name, n in high["category"].value_counts().items():
        assert row[f"n_high_entropy_{name}"] == n
    assert (
        row.n_high_entropy_anthropomorphic + row.n_high_entropy_reasoning + row.n_high_entropy_other
        == 5
    )
    assert row.threshold == selection.threshold and row.n_tokens == selection.n_tokens
    assert row.pass1_generated == pytest.approx(0.5) and row.mean_response_length == 5
    # a threshold row of another aggregation does not match the merged file: refused
    other = thresholds.assign(n_high_entropy=6)
    with pytest.raises(InputDataError) as exc:
        agg.summarise_step(other, ds.dataset(str(sequences_path)), merged, PARSED)
    assert "marks 5 high-entropy tokens" in one_line(exc) and "says 6" in one_line(exc)


def test_lexicon_entry_not_a_string_fails(tmp_path):
    aggregation = {**AGGREGATION, "lexicon": {"anthropomorphic": ["wait", 42]}}
    with pytest.raises(ConfigError) as exc:
        merged_step(tmp_path, aggregation=aggregation)
    assert "aggregation.lexicon.anthropomorphic[1] = 42" in one_line(exc)


# ------------------------------------------------------------------ the pipeline on a catalog


def tmp_catalog(tmp_path: Path) -> DataCatalog:
    """The project's catalog with every file path moved under ``tmp_path``."""
    config = OmegaConfigLoader(str(REPO / "conf"), base_env="base", default_run_env="local")[
        "catalog"
    ]
    for entry in config.values():
        if isinstance(entry, dict) and "filepath" in entry:
            entry["filepath"] = str(tmp_path / entry["filepath"])
    return DataCatalog.from_config(config)


def layout(steps=(0, 5)) -> StudyLayout:
    return StudyLayout(
        runs=(RunSpec(name="r", role="single", checkpoint_root="unused", steps=tuple(steps)),),
        num_shards=2,
    )


def seed_catalog(catalog: DataCatalog, steps=(0, 5), broken_step=None) -> None:
    catalog["prompts"] = MemoryDataset(prompts_frame())
    catalog["params:generation"] = MemoryDataset(GENERATION)
    catalog["params:prompts"] = MemoryDataset(PROMPT_PARAMS)
    catalog["checkpoints"] = MemoryDataset(CHECKPOINTS)
    catalog["params:aggregation"] = MemoryDataset(AGGREGATION)
    for step in steps:
        for k, (rec, seq) in enumerate(shard_tables(RESPONSES, 2, step=step, recorded=RECORDED)):
            catalog.save(f"r.step_{step}.shard_{k}.token_records", rec)
            catalog.save(f"r.step_{step}.shard_{k}.sequences", seq)
            if step == broken_step and k == 1:  # overwrite with a file that lacks a column
                path = catalog.get(f"r.step_{step}.shard_{k}.token_records").load_path
                pq.write_table(rec.drop_columns(["prob"]), path)


def test_pipeline_runs_on_catalog(tmp_path):
    catalog = tmp_catalog(tmp_path)
    seed_catalog(catalog)
    SequentialRunner().run(create_pipeline(layout()), catalog)

    merged = catalog.load("r.step_5.token_records").to_table()
    assert merged.num_rows == 30 and merged.column("step").to_pylist() == [5] * 30
    assert sum(merged.column("is_high_entropy").to_pylist()) == 5
    thresholds = catalog.load("entropy_thresholds")
    assert list(thresholds.columns) == [
        "run",
        "step",
        "n_tokens",
        "top_entropy_frac",
        "n_high_entropy",
        "threshold",
        "p50",
        "p80",
        "p90",
        "p95",
        "frac_below_0_01",
        "mean_entropy",
    ]
    assert thresholds[["step", "n_high_entropy", "threshold"]].values.tolist() == [
        [0, 5, 2.0],
        [5, 5, 2.0],
    ]
    summary = catalog.load("summary_by_step")
    assert list(summary.columns) == [
        "run",
        "step",
        "n_sequences",
        "n_tokens",
        "mean_response_length",
        "mean_entropy",
        "threshold",
        "n_high_entropy",
        "n_high_entropy_anthropomorphic",
        "n_high_entropy_reasoning",
        "n_high_entropy_other",
        "pass1_generated",
    ]
    words = catalog.load("token_probability_mass_high_entropy")
    assert set(words.step) == {0, 5}
    assert words.groupby("step")["sampled_prob_share"].sum().tolist() == pytest.approx(
        [1, 1], abs=1e-6
    )
    categories = catalog.load("category_probability_mass_high_entropy")
    assert len(categories) == 6
    positions = catalog.load("high_entropy_positions").to_table()
    assert positions.num_rows == 10 and sorted(set(positions.column("step").to_pylist())) == [0, 5]
    per_step = catalog.load("r.step_0.summary_by_step")  # per-step tables load on their own
    assert per_step.iloc[0].n_high_entropy == 5


def test_pipeline_leaves_no_merged_file_on_bad_input(tmp_path):
    catalog = tmp_catalog(tmp_path)
    seed_catalog(catalog, steps=(0,), broken_step=0)
    with pytest.raises(Exception, match="missing column"):
        SequentialRunner().run(create_pipeline(layout(steps=(0,))), catalog)
    assert not (tmp_path / "data" / "03_primary").exists()


def test_pipeline_refuses_a_step_generated_with_other_parameters(tmp_path):
    catalog = tmp_catalog(tmp_path)
    seed_catalog(catalog, steps=(0,))
    catalog["params:generation"] = MemoryDataset({**GENERATION, "max_new_tokens": 64})
    with pytest.raises(InputDataError) as exc:
        SequentialRunner().run(create_pipeline(layout(steps=(0,))), catalog)
    message = one_line(exc)
    step_folder = tmp_path / "data/02_intermediate/token_records/r/step_0"
    assert message.startswith(f"{step_folder}/shard_0.sequences.parquet/")
    assert "generation.max_new_tokens was 5 when it was generated but is 64 now" in message
    assert f"delete {step_folder}/ and run generation with --only-missing-outputs" in message
    assert not (tmp_path / "data" / "03_primary").exists()


def test_merge_stream_failure_leaves_no_file(tmp_path):
    records, sequences = write_shards(tmp_path, shard_tables(RESPONSES, 2))
    checked, report = run_checks(records, sequences)
    selection = agg.compute_entropy_threshold(report, AGGREGATION, *records, run="r", step=0)
    # the shard files change between the threshold and the merge: the stream fails, no file
    tables = shard_tables(
        {k: v for k, v in RESPONSES.items() if k != (1, 0)} | {(1, 0): [(" x", 9.0)] * 4}, 2
    )
    changed, _ = write_shards(tmp_path, tables)
    merged = agg.merge_token_records(checked, selection, PARSED, AGGREGATION, *changed)
    target = tmp_path / "merged.parquet"
    with pytest.raises(InputDataError, match="changed during aggregation"):
        write_parquet_atomically(target, merged.token_records, schema=MERGED_TOKEN_RECORD_SCHEMA)
    assert not target.exists() and not list(tmp_path.glob(".merged*"))
    assert not Path(merged.high_entropy_rows.directory).exists()
    with pytest.raises(InputDataError, match="rerun merge_token_records"):
        agg.select_high_entropy_positions(merged.high_entropy_rows)


def test_pipeline_shape():
    pipeline = create_pipeline(layout(steps=(0, 5, 10)))
    names = {n.name for n in pipeline.nodes}
    assert "r.step_5.merge_token_records" in names and "combine_high_entropy_positions" in names
    assert pipeline.inputs() == {
        "prompts",
        "checkpoints",  # with params:prompts: what the shards' metadata is compared with
        "params:prompts",
        "params:generation",
        "params:aggregation",
        *(
            f"r.step_{s}.shard_{k}.{kind}"
            for s in (0, 5, 10)
            for k in (0, 1)
            for kind in ("token_records", "sequences")
        ),
    }


def with_mass(records: pa.Table, seed: int) -> pa.Table:
    """``records`` with planted word-start mass columns (as a recorder writes them)."""
    rng = np.random.default_rng(seed)
    for name in MASS_COLUMNS:
        index = records.schema.get_field_index(name)
        values = pa.array(rng.uniform(0, 1, records.num_rows).astype(np.float32))
        records = records.set_column(index, name, values)
    return records


def test_a_shard_without_the_mass_columns_merges_with_null_mass(tmp_path):
    """An old shard (written before the columns existed) next to a new one: the old one's
    records read as null, the new one's carry their values into the merged records."""
    tables = shard_tables(RESPONSES, 2)
    old = tables[0][0].drop_columns(list(MASS_COLUMNS))
    new = with_mass(tables[1][0], seed=1)
    records, sequences = write_shards(tmp_path, [(old, tables[0][1]), (new, tables[1][1])])
    checked, report = run_checks(records, sequences)  # the old shard passes the column check
    selection = agg.compute_entropy_threshold(report, AGGREGATION, *records, run="r", step=0)
    merged = agg.merge_token_records(checked, selection, PARSED, AGGREGATION, *records)
    table = pa.concat_tables(list(merged.token_records))
    assert table.schema == MERGED_TOKEN_RECORD_SCHEMA
    frame = table.to_pandas()
    for name in MASS_COLUMNS:
        assert frame.loc[frame.shard == 0, name].isna().all()
        planted = new.to_pandas().set_index(["prompt_index", "sample_index", "position"])[name]
        got = frame[frame.shard == 1].set_index(["prompt_index", "sample_index", "position"])
        np.testing.assert_array_equal(got[name].to_numpy(), planted.loc[got.index].to_numpy())
    for _ in agg.select_high_entropy_positions(merged.high_entropy_rows):
        pass  # drain the spill


def test_a_shard_whose_mass_used_another_lexicon_merges_with_the_current_words(tmp_path):
    """Words and categories are post-hoc: shards whose mass columns were summed over another
    lexicon are merged (not stale), categorised with the current lexicon, and the merged
    records carry the shards' lexicon digest for what reads the mass columns."""
    import json

    from hed.records.shard_metadata import WORD_MASS_METADATA_KEY, lexicon_sha256

    other = parse_lexicon({"anthropomorphic": ["wait"], "reasoning": ["so"]})
    recorded = {"word_mass": {"lexicon_sha256": lexicon_sha256(other)}}
    records, sequences = write_shards(tmp_path, shard_tables(RESPONSES, 2, recorded=recorded))
    checked, report = run_checks(records, sequences)
    selection = agg.compute_entropy_threshold(report, AGGREGATION, *records, run="r", step=0)
    merged = agg.merge_token_records(checked, selection, PARSED, AGGREGATION, *records)
    tables = list(merged.token_records)
    assert sum(t.num_rows for t in tables) == 30
    carried = json.loads(tables[0].schema.metadata[WORD_MASS_METADATA_KEY])
    assert carried == {"word_mass": {"lexicon_sha256": lexicon_sha256(other)}}
    frame = pa.concat_tables(tables).to_pandas()
    expected = [PARSED.category_of(w) if w else "other" for w in frame["word"]]
    assert frame["category"].tolist() == expected
    for _ in agg.select_high_entropy_positions(merged.high_entropy_rows):
        pass
