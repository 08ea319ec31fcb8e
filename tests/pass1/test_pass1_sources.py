"""pass@1 sources: W&B online (a fake ``wandb.Api``), W&B offline (a real run), CSV, generated."""

from __future__ import annotations

import contextlib
import logging
import math
import os
from pathlib import Path

import pandas as pd
import pytest

from hed.errors import ConfigError, HEDError, InputDataError
from hed.pass1.sources import (
    DEFAULT_METRIC_KEY,
    DEFAULT_STEP_KEY,
    export_wandb_api_key,
    find_offline_run_file,
    missing_steps,
    parse_run_config,
    pass1_from_summary,
    read_pass1_csv,
    read_wandb_history,
    read_wandb_offline_history,
    select_pass1,
    to_pass1_rows,
    warn_missing_steps,
)

METRIC = DEFAULT_METRIC_KEY  # "val-core/aime2025/acc/mean@1": keys with '/' and '@'
STEP = DEFAULT_STEP_KEY  # "training/global_step"


def _one_line(exc_info: pytest.ExceptionInfo) -> str:
    message = str(exc_info.value)
    assert isinstance(exc_info.value, HEDError)
    assert "\n" not in message
    return message


# ------------------------------------------------------------------ W&B offline (real run)


def _accuracy(step: int) -> float:
    return round(0.1 + step / 100, 4)


@contextlib.contextmanager
def offline_wandb_run(root: Path, project: str, **init):
    """A real ``wandb.init(mode="offline")`` run under ``root`` (no network, no key, no git).

    ``init``: more ``wandb.init`` arguments (``id=``, ``resume="allow"``).
    """
    import wandb

    with pytest.MonkeyPatch.context() as mp:
        for name, value in {
            "WANDB_MODE": "offline",
            "WANDB_SILENT": "true",
            "WANDB_DIR": str(root),
            "WANDB_CONFIG_DIR": str(root / "config"),
            "WANDB_CACHE_DIR": str(root / "cache"),
            "WANDB_DATA_DIR": str(root / "data"),
            "WANDB_ERROR_REPORTING": "false",
            "WANDB_DISABLE_GIT": "true",
            "WANDB_DISABLE_CODE": "true",
        }.items():
            mp.setenv(name, value)
        mp.delenv("WANDB_API_KEY", raising=False)
        yield wandb.init(
            mode="offline",
            dir=root,
            project=project,
            settings=wandb.Settings(x_disable_stats=True, console="off", save_code=False),
            **init,
        )


@pytest.fixture(scope="module")
def offline_run(tmp_path_factory) -> Path:
    """A real offline W&B run: entropy every step, pass@1 every 5 steps, global_step on both.

    Validation is logged in its own ``log`` call (as many trainers do), so W&B's ``_step``
    (one per call) differs from ``training/global_step``.
    """
    import wandb

    root = tmp_path_factory.mktemp("wandb_offline")
    with offline_wandb_run(root, "hed-test") as run:
        for step in range(1, 21):
            run.log({"actor/entropy": 1.0 / step, STEP: step})
            if step % 5 == 0:
                run.log({METRIC: _accuracy(step), STEP: step})
        run_dir = Path(run.dir).parent
        run.finish()
        wandb.teardown()
    return run_dir


def test_offline_run_reads_exactly_the_logged_steps(offline_run):
    history = read_wandb_offline_history(offline_run)

    assert history["step"].tolist() == [5, 10, 15, 20]
    assert history["pass1"].tolist() == [_accuracy(s) for s in (5, 10, 15, 20)]
    assert not history["pass1"].isna().any()
    assert (history["step_key"] == STEP).all() and (history["metric_key"] == METRIC).all()
    # the step comes from the metric's own row, not from W&B's per-call counter
    assert history["wandb_step"].tolist() != history["step"].tolist()


def test_offline_run_falls_back_to_wandb_step_when_step_key_is_absent(offline_run, caplog):
    with caplog.at_level(logging.WARNING, logger="hed.pass1"):
        history = read_wandb_offline_history(offline_run, step_key="trainer/step")

    assert "'trainer/step' is absent" in caplog.text and "_step" in caplog.text
    assert (history["step_key"] == "_step").all()
    assert history["step"].tolist() == history["wandb_step"].tolist()
    assert len(history) == 4


def test_offline_run_accepts_the_wandb_file_and_the_wandb_folder(offline_run):
    wandb_file = find_offline_run_file(offline_run)
    assert wandb_file.name.startswith("run-") and wandb_file.suffix == ".wandb"
    assert find_offline_run_file(wandb_file) == wandb_file
    assert find_offline_run_file(offline_run.parent) == wandb_file


def test_offline_run_metric_key_absent_lists_the_run_keys(offline_run):
    with pytest.raises(InputDataError) as exc_info:
        read_wandb_offline_history(offline_run, metric_key="val-core/aime2024/acc/mean@1")
    message = _one_line(exc_info)
    assert "val-core/aime2024/acc/mean@1" in message
    assert "actor/entropy" in message and METRIC in message


def test_offline_folder_that_does_not_exist(tmp_path):
    with pytest.raises(InputDataError) as exc_info:
        read_wandb_offline_history(tmp_path / "wandb" / "offline-run-missing")
    assert "does not exist" in _one_line(exc_info)


def test_offline_folder_without_a_log(tmp_path):
    with pytest.raises(InputDataError) as exc_info:
        find_offline_run_file(tmp_path)
    assert "no run-*.wandb" in _one_line(exc_info)


@pytest.fixture(scope="module")
def resumed_offline_run(tmp_path_factory) -> Path:
    """A real offline run resumed under its id: two ``offline-run-<time>-resumed1`` folders.

    The first attempt logs steps 0, 10, 20 (0.30); the second, resumed, re-logs step 20 with
    0.33 and goes on to 30 — it lacks step 0 and 10. Returns the ``wandb/`` folder.
    """
    import time

    import wandb

    root = tmp_path_factory.mktemp("wandb_resumed")
    for values in ({0: 0.1, 10: 0.2, 20: 0.30}, {20: 0.33, 30: 0.4}):
        with offline_wandb_run(root, "hed-resume", id="resumed1", resume="allow") as run:
            for step, value in values.items():
                run.log({METRIC: value, STEP: step}, step=step)
            wandb_dir = Path(run.dir).parent.parent
            run.finish()
            wandb.teardown()
        time.sleep(1.1)  # the folder name holds the start time to the second
    return wandb_dir


def test_resumed_offline_run_is_read_whole_the_later_value_winning(resumed_offline_run, caplog):
    folders = sorted(p.name for p in resumed_offline_run.glob("offline-run-*"))
    assert len(folders) == 2 and all(name.endswith("-resumed1") for name in folders)
    with caplog.at_level(logging.WARNING, logger="hed.pass1"):
        history = read_wandb_offline_history(resumed_offline_run)
    assert history.set_index("step")["pass1"].to_dict() == {0: 0.1, 10: 0.2, 20: 0.33, 30: 0.4}
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings
    assert "step(s) 20 logged more than once" in warnings[0]
    assert "2 attempts of run id resumed1" in warnings[0]
    # the newer attempt alone is what it logged (no step 0)
    newer = read_wandb_offline_history(resumed_offline_run / folders[1])
    assert newer.set_index("step")["pass1"].to_dict() == {20: 0.33, 30: 0.4}


def test_a_killed_attempt_before_the_resume_gives_its_readable_rows(resumed_offline_run, tmp_path):
    import shutil

    copy = shutil.copytree(resumed_offline_run, tmp_path / "wandb")
    older = sorted(copy.glob("offline-run-*"))[0] / "run-resumed1.wandb"
    older.write_bytes(older.read_bytes()[:-40])  # cut inside the last record
    history = read_wandb_offline_history(copy)
    assert history.set_index("step")["pass1"].to_dict()[30] == 0.4
    assert history.set_index("step")["pass1"].to_dict()[20] == 0.33
    # the newest attempt must be whole
    newest = sorted(copy.glob("offline-run-*"))[1] / "run-resumed1.wandb"
    newest.write_bytes(newest.read_bytes()[:-40])
    with pytest.raises(InputDataError, match="truncated or incomplete"):
        read_wandb_offline_history(copy)


def test_offline_runs_of_two_ids_in_one_folder_are_refused(resumed_offline_run, tmp_path):
    import shutil

    copy = shutil.copytree(resumed_offline_run, tmp_path / "wandb")
    other = copy / "offline-run-20260101_000000-other2"
    other.mkdir()
    (other / "run-other2.wandb").write_bytes(b"\0")
    with pytest.raises(InputDataError) as info:
        read_wandb_offline_history(copy)
    message = _one_line(info)
    assert "W&B runs of 2 run ids" in message and "offline-run-20260101_000000-other2" in message


# ------------------------------------------------------------------ W&B online (fake Api)


class FakeRun:
    """The public ``wandb.apis.public.Run`` interface over recorded history rows.

    ``scan_history(keys=...)`` returns, like W&B, only the rows holding every requested key,
    restricted to those keys. ``history()`` (sampled) must never be used.
    """

    def __init__(self, rows: list[dict], summary: dict | None = None):
        self._rows = rows
        self.summary_metrics = (
            summary if summary is not None else {k: v for r in rows for k, v in r.items()}
        )
        self.scan_calls: list[list[str] | None] = []

    def scan_history(self, keys=None, page_size=1000, min_step=0, max_step=None, use_cache=True):
        self.scan_calls.append(keys)
        for row in self._rows:
            if keys is None:
                yield dict(row)
            elif all(key in row for key in keys):
                yield {key: row[key] for key in keys}

    def history(self, *args, **kwargs):
        raise AssertionError("history() samples the run: use scan_history()")


class FakeApi:
    """The public ``wandb.Api`` interface: ``run("<entity>/<project>/<run_id>")`` and
    ``runs("<entity>/<project>", filters={"display_name": name})``."""

    def __init__(self, runs: dict[str, FakeRun]):
        self._runs = runs
        self.paths: list[str] = []
        for path, run in runs.items():
            run.id = path.rsplit("/", 1)[1]
            run.name = getattr(run, "name", None) or run.id

    def run(self, path: str) -> FakeRun:
        self.paths.append(path)
        if path not in self._runs:
            raise ValueError(f"Could not find run {path}")
        return self._runs[path]

    def runs(self, path: str, filters: dict | None = None) -> list[FakeRun]:
        found = [run for p, run in self._runs.items() if p.rsplit("/", 1)[0] == path]
        if filters:
            assert set(filters) == {"display_name"}, filters
            found = [run for run in found if run.name == filters["display_name"]]
        return found


def _factory(api: FakeApi):
    def make(**kwargs):
        return api

    return make


def _resumed_rows() -> list[dict]:
    """A run resumed from its step-100 checkpoint: global step 100..130, validation every 10."""
    rows = []
    for i, step in enumerate(range(100, 131)):
        row = {"_step": 1000 + i, "actor/entropy": 0.5, STEP: step}
        if step % 10 == 0:
            row[METRIC] = step / 1000
        rows.append(row)
    rows.insert(3, {"_step": 999, "actor/kl": 0.01})  # a row with neither key
    return rows


def test_online_reads_only_rows_with_the_metric_and_their_own_step():
    run = FakeRun(_resumed_rows())
    api = FakeApi({"ent/proj/abc123": run})

    history = read_wandb_history("ent/proj/abc123", api_factory=_factory(api))

    assert api.paths == ["ent/proj/abc123"]
    assert history["step"].tolist() == [100, 110, 120, 130]
    assert history["pass1"].tolist() == [0.1, 0.11, 0.12, 0.13]
    assert history["wandb_step"].tolist() == [1000, 1010, 1020, 1030]
    assert not history["pass1"].isna().any()
    # scan_history with the metric key (keys containing '/'), never a full scan nor history()
    assert run.scan_calls and all(keys is not None and METRIC in keys for keys in run.scan_calls)


def test_online_resumed_run_keeps_the_later_value_of_a_relogged_step(caplog):
    # killed after step 20, resumed from the step-10 checkpoint: steps 20 is logged again,
    # W&B's _step goes on counting (3, 4), the step key repeats
    rows = [
        {"_step": 0, METRIC: 0.1, STEP: 0},
        {"_step": 1, METRIC: 0.2, STEP: 10},
        {"_step": 2, METRIC: 0.30, STEP: 20},
        {"_step": 3, METRIC: 0.33, STEP: 20},
        {"_step": 4, METRIC: 0.4, STEP: 30},
    ]
    api = FakeApi({"e/p/r": FakeRun(rows)})
    with caplog.at_level(logging.WARNING, logger="hed.pass1"):
        history = read_wandb_history("e/p/r", api_factory=_factory(api))
    assert history["step"].tolist() == [0, 10, 20, 30]
    assert history["pass1"].tolist() == [0.1, 0.2, 0.33, 0.4]
    assert history["wandb_step"].tolist() == [0, 1, 3, 4]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [
        "W&B run e/p/r: step(s) 20 logged more than once (a resumed run re-logs the steps "
        "after its checkpoint); the value logged last is kept"
    ]


def test_online_never_calls_history(monkeypatch):
    run = FakeRun(_resumed_rows())
    calls = []
    monkeypatch.setattr(run, "history", lambda *a, **k: calls.append(a) or pd.DataFrame())

    read_wandb_history("ent/proj/abc123", api_factory=_factory(FakeApi({"ent/proj/abc123": run})))

    assert calls == []


def test_online_step_key_absent_falls_back_to_wandb_step(caplog):
    rows = [{"_step": s, METRIC: s / 10} for s in (3, 6, 9)] + [{"_step": 10, "actor/entropy": 1.0}]
    api = FakeApi({"e/p/r": FakeRun(rows)})
    with caplog.at_level(logging.WARNING, logger="hed.pass1"):
        history = read_wandb_history("e/p/r", api_factory=_factory(api))

    assert history["step"].tolist() == [3, 6, 9]
    assert (history["step_key"] == "_step").all()
    assert "training/global_step" in caplog.text and "_step" in caplog.text


def test_online_nan_values_are_left_out_not_filled():
    rows = [
        {"_step": 0, METRIC: 0.2, STEP: 10},
        {"_step": 1, METRIC: float("nan"), STEP: 20},
        {"_step": 2, STEP: 25, "actor/entropy": 1.0},
        {"_step": 3, METRIC: 0.4, STEP: 30},
    ]
    history = read_wandb_history("e/p/r", api_factory=_factory(FakeApi({"e/p/r": FakeRun(rows)})))
    assert history["step"].tolist() == [10, 30]
    assert history["pass1"].tolist() == [0.2, 0.4]


def test_online_metric_key_absent_lists_up_to_20_keys():
    summary = {f"actor/metric_{i:02d}": 1.0 for i in range(30)} | {
        "val-core/aime2024/acc/mean@1": 0.3
    }
    rows = [{"_step": 0, "actor/metric_00": 1.0, STEP: 1}]
    api = FakeApi({"e/p/r": FakeRun(rows, summary=summary)})

    with pytest.raises(InputDataError) as exc_info:
        read_wandb_history("e/p/r", api_factory=_factory(api))

    message = _one_line(exc_info)
    assert METRIC in message
    listed = message.split("the run has: ", 1)[1]
    assert listed.startswith("val-core/aime2024/acc/mean@1")  # same prefix listed first
    assert listed.count(",") == 19 and "(31 in all)" in listed


def test_online_run_not_found_is_one_line():
    with pytest.raises(InputDataError) as exc_info:
        read_wandb_history("e/p/nope", api_factory=_factory(FakeApi({})))
    assert "e/p/nope" in _one_line(exc_info)


def test_online_without_api_key_says_where_to_put_it(monkeypatch):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    with pytest.raises(ConfigError) as exc_info:
        read_wandb_history("e/p/r")
    message = _one_line(exc_info)
    assert "conf/local/credentials.yml" in message and "WANDB_API_KEY" in message


def test_export_wandb_api_key_from_credentials(monkeypatch):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    assert export_wandb_api_key({}) is False
    assert export_wandb_api_key({"wandb": {"api_key": "k1"}}) is True
    assert os.environ["WANDB_API_KEY"] == "k1"
    assert export_wandb_api_key({"wandb": {"api_key": "k2"}}) is False  # never overrides
    assert os.environ["WANDB_API_KEY"] == "k1"


# ------------------------------------------------------------------ CSV and generated


def test_csv_with_custom_column_names(tmp_path):
    path = tmp_path / "acc.csv"
    path.write_text("global_step,acc,other\n20,0.25,x\n40,,y\n80,0.5,z\n")

    table = read_pass1_csv(path, step_column="global_step", pass1_column="acc")

    assert table["step"].tolist() == [20, 80]
    assert table["pass1"].tolist() == [0.25, 0.5]


def test_csv_without_the_step_column(tmp_path):
    path = tmp_path / "acc.csv"
    path.write_text("global_step,pass1\n20,0.25\n")
    with pytest.raises(InputDataError) as exc_info:
        read_pass1_csv(path)
    message = _one_line(exc_info)
    assert "'step'" in message and "global_step" in message


def test_csv_missing_file(tmp_path):
    with pytest.raises(InputDataError) as exc_info:
        read_pass1_csv(tmp_path / "absent.csv")
    assert "does not exist" in _one_line(exc_info)


def test_generated_is_the_mean_of_correct_per_step():
    sequences = pd.DataFrame(
        {
            "run": ["r"] * 6 + ["other"] * 2,
            "step": [0, 0, 0, 10, 10, 20, 0, 0],
            "correct": [True, False, True, None, None, False, True, True],
        }
    )
    graded = sequences.dropna(subset=["correct"])
    summary = (
        graded.assign(correct=graded["correct"].astype(float))
        .groupby(["run", "step"], as_index=False)["correct"]
        .mean()
        .rename(columns={"correct": "pass1_generated"})
    )
    summary = pd.concat(
        [summary, pd.DataFrame({"run": ["r"], "step": [10], "pass1_generated": [None]})]
    )

    table = pass1_from_summary(summary, "r")

    assert table.sort_values("step")["step"].tolist() == [0, 20]
    assert table.set_index("step")["pass1"].to_dict() == {0: pytest.approx(2 / 3), 20: 0.0}


# ------------------------------------------------------------------ rows, selection, config


def test_repeated_steps_keep_the_last_value(caplog):
    table = pd.DataFrame({"step": [10, 20, 20, 30], "pass1": [0.1, 0.2, 0.25, 0.3]})
    with caplog.at_level(logging.WARNING, logger="hed.pass1"):
        rows = to_pass1_rows(table, run="r", source="wandb", metric_key=METRIC)
    assert rows["step"].tolist() == [10, 20, 30]
    assert rows["pass1"].tolist() == [0.1, 0.25, 0.3]
    assert "20" in caplog.text


def test_missing_checkpoint_steps_are_warned_and_extra_steps_kept(caplog):
    rows = to_pass1_rows(
        pd.DataFrame({"step": [20, 25, 40], "pass1": [0.1, 0.15, 0.2]}),
        run="r",
        source="csv",
        metric_key="pass1",
    )
    with caplog.at_level(logging.WARNING, logger="hed.pass1"):
        missing = warn_missing_steps(rows, run="r", source="csv", checkpoint_steps=[20, 30, 40, 60])
    assert missing == [30, 60] == missing_steps(rows, [20, 30, 40, 60])
    assert "30, 60" in caplog.text


def test_select_pass1_uses_the_figure_source():
    pass1 = pd.concat(
        [
            to_pass1_rows(
                pd.DataFrame({"step": [20, 25], "pass1": [0.1, 0.2]}),
                run="a",
                source="wandb",
                metric_key=METRIC,
            ),
            to_pass1_rows(
                pd.DataFrame({"step": [20], "pass1": [0.9]}),
                run="a",
                source="generated",
                metric_key="mean(correct)",
            ),
            to_pass1_rows(
                pd.DataFrame({"step": [0], "pass1": [0.5]}),
                run="b",
                source="generated",
                metric_key="mean(correct)",
            ),
        ]
    )
    params = {
        "runs": {
            "a": {
                "sources": {
                    "wandb": {"entity": "e", "project": "p", "run_id": "r"},
                    "generated": {},
                }
            },
            "b": {
                "figure_source": "generated",
                "sources": {"csv": {"path": "x.csv"}, "generated": {}},
            },
        }
    }

    chosen = select_pass1(pass1, params, {"a": [20, 40], "b": [0]})

    a = chosen[chosen["run"] == "a"]
    assert a["step"].tolist() == [20, 25, 40]
    assert a["pass1"].tolist()[:2] == [0.1, 0.2] and math.isnan(a["pass1"].tolist()[2])
    assert a["has_checkpoint"].tolist() == [True, False, True]
    assert set(a["pass1_source"]) == {"wandb"}
    b = chosen[chosen["run"] == "b"]
    assert b[["step", "pass1", "pass1_source"]].values.tolist() == [[0, 0.5, "generated"]]


def test_config_defaults_and_first_source_for_figures():
    config = parse_run_config(
        {
            "wandb_defaults": {"step_key": "_step"},
            "runs": {"r": {"sources": {"wandb_offline": {"path": "w"}, "generated": None}}},
        },
        "r",
    )
    assert config.figure_source == "wandb_offline"
    assert config.wandb_source.options == {"path": "w", "metric_key": METRIC, "step_key": "_step"}
    assert parse_run_config({}, "r").sources == ()


@pytest.mark.parametrize(
    ("run_cfg", "expected"),
    [
        ({"sources": {"tensorboard": {}}}, "unknown source 'tensorboard'"),
        ({"sources": {"wandb": {"entity": "e", "project": "p"}}}, "wandb names no run"),
        ({"sources": {"csv": {"path": "a.csv", "column": "x"}}}, "unknown option(s) column"),
        (
            {
                "sources": {
                    "wandb": {"entity": "e", "project": "p", "run_id": "r"},
                    "wandb_offline": {"path": "w"},
                }
            },
            "keep one",
        ),
        ({"figure_source": "csv", "sources": {"generated": {}}}, "figure_source is 'csv'"),
    ],
)
def test_bad_config_is_one_line(run_cfg, expected):
    with pytest.raises(ConfigError) as exc_info:
        parse_run_config({"runs": {"r": run_cfg}}, "r")
    assert expected in _one_line(exc_info)


# ------------------------------------------------------------------ verl's logging (step 0)

VERL_METRIC = "val-core/aime24/acc/mean@32"


def _verl_rows(test_freq: int = 5, last: int = 15) -> list[dict]:
    """History rows as verl's RayPPOTrainer logs them with ``wandb.log(data, step=global_steps)``.

    ``val_before_train`` logs the initial validation at step 0 without
    ``training/global_step``; every training step logs its metrics with
    ``training/global_step``; every ``test_freq`` steps the validation metrics are merged
    into that step's row.
    """
    rows = [{"_step": 0, VERL_METRIC: 0.1, "val-core/aime24/reward/mean@32": 0.1}]
    for step in range(1, last + 1):
        row = {"_step": step, STEP: step, "actor/entropy": 1.0 / step, "training/epoch": 0}
        if step % test_freq == 0:
            row[VERL_METRIC] = round(0.1 + step / 100, 4)
        rows.append(row)
    return rows


def test_verl_step_zero_validation_is_kept_online(caplog):
    api = FakeApi({"team/dapo/r1": FakeRun(_verl_rows())})
    with caplog.at_level(logging.INFO, logger="hed.pass1"):
        history = read_wandb_history(
            "team/dapo/r1", metric_key=VERL_METRIC, api_factory=_factory(api)
        )

    assert history["step"].tolist() == [0, 5, 10, 15]
    assert history["pass1"].tolist() == [0.1, 0.15, 0.2, 0.25]
    assert history["wandb_step"].tolist() == [0, 5, 10, 15]
    assert "their step is _step" in caplog.text
    rows = to_pass1_rows(history, run="dapo", source="wandb", metric_key=VERL_METRIC)
    figure = select_pass1(rows, {}, {"dapo": [0, 5, 10, 12, 15]})
    by_step = dict(zip(figure["step"], figure["pass1"], strict=True))
    assert by_step[0] == 0.1  # global_step_0's checkpoint gets the step-0 baseline
    assert math.isnan(by_step[12])  # a checkpoint between validations: empty, not forward-filled
    assert figure["has_checkpoint"].all()


def test_step_key_less_rows_are_dropped_when_wandb_step_is_another_counter(caplog):
    # validation logged in its own call: _step counts calls, not global steps
    rows = [{"_step": 0, VERL_METRIC: 0.1}]
    for step in range(1, 7):
        rows.append({"_step": 2 * step - 1, STEP: step, "actor/entropy": 1.0})
        if step % 3 == 0:
            rows.append({"_step": 2 * step, STEP: step, VERL_METRIC: step / 10})
    api = FakeApi({"e/p/r": FakeRun(rows)})
    with caplog.at_level(logging.WARNING, logger="hed.pass1"):
        history = read_wandb_history("e/p/r", metric_key=VERL_METRIC, api_factory=_factory(api))

    assert history["step"].tolist() == [3, 6]
    assert "1 row(s) carry" in caplog.text and "_step differs" in caplog.text


@pytest.fixture(scope="module")
def verl_offline_run(tmp_path_factory) -> Path:
    """A real offline W&B run logged the way verl logs (step=global_steps, step 0 without key)."""
    import wandb

    root = tmp_path_factory.mktemp("wandb_verl")
    with offline_wandb_run(root, "hed-verl") as run:
        for row in _verl_rows():
            step = row.pop("_step")
            run.log(row, step=step)
        run_dir = Path(run.dir).parent
        run.finish()
        wandb.teardown()
    return run_dir


def test_verl_step_zero_validation_is_kept_offline(verl_offline_run):
    history = read_wandb_offline_history(verl_offline_run, metric_key=VERL_METRIC)

    assert history["step"].tolist() == [0, 5, 10, 15]
    assert history["pass1"].tolist() == [0.1, 0.15, 0.2, 0.25]


# ------------------------------------------------------------------ W&B: key, run names, network

NETRC_KEY = "a" * 40


@pytest.fixture
def local_server():
    """A TCP listener on 127.0.0.1 standing in for the W&B server (reachability only)."""
    import socket

    server = socket.create_server(("127.0.0.1", 0))
    yield f"http://127.0.0.1:{server.getsockname()[1]}"
    server.close()


def test_key_only_in_netrc_is_used_by_the_online_reader(tmp_path, monkeypatch, local_server):
    import wandb

    host = local_server.removeprefix("http://")
    netrc = tmp_path / "netrc"
    netrc.write_text(f"machine {host}\n  login user\n  password {NETRC_KEY}\n")
    netrc.chmod(0o600)
    monkeypatch.setenv("NETRC", str(netrc))
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    seen = {}

    def fake_api(overrides=None, timeout=None, api_key=None):  # wandb.Api's signature
        seen.update(overrides=overrides, api_key=api_key)
        return FakeApi({"e/p/r": FakeRun(_verl_rows())})

    monkeypatch.setattr(wandb, "Api", fake_api)
    history = read_wandb_history("e/p/r", metric_key=VERL_METRIC, base_url=local_server)

    assert seen == {"overrides": {"base_url": local_server}, "api_key": NETRC_KEY}
    assert history["step"].tolist() == [0, 5, 10, 15]


def test_environment_key_wins_over_netrc(tmp_path, monkeypatch, local_server):
    from hed.pass1.sources import resolve_wandb_api_key

    host = local_server.removeprefix("http://")
    netrc = tmp_path / "netrc"
    netrc.write_text(f"machine {host} login user password {NETRC_KEY}\n")
    netrc.chmod(0o600)
    monkeypatch.setenv("NETRC", str(netrc))
    monkeypatch.setenv("WANDB_API_KEY", "b" * 40)
    assert resolve_wandb_api_key(base_url=local_server) == "b" * 40
    monkeypatch.delenv("WANDB_API_KEY")
    assert resolve_wandb_api_key(base_url=local_server) == NETRC_KEY
    with pytest.raises(ConfigError):  # the netrc entry is for another host
        resolve_wandb_api_key(base_url="http://127.0.0.2:1")


def test_no_key_anywhere_mentions_wandb_login(tmp_path, monkeypatch):
    monkeypatch.setenv("NETRC", str(tmp_path / "missing-netrc"))
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    with pytest.raises(ConfigError) as exc_info:
        read_wandb_history("e/p/r")
    message = _one_line(exc_info)
    assert "wandb login" in message and "WANDB_API_KEY" in message


@pytest.mark.parametrize(
    "spelling",
    [
        "team/dapo/r1",
        "team/dapo/runs/r1",
        "https://wandb.ai/team/dapo/runs/r1",
        "https://wandb.ai/team/dapo/runs/r1/overview?nw=nwuser",
        "https://wandb.example.org/team/dapo/runs/r1/",
    ],
)
def test_run_path_and_url_resolve(spelling):
    from hed.pass1.sources import WandbRunRef, parse_run_path

    assert parse_run_path(spelling) == WandbRunRef("team", "dapo", "r1")


@pytest.mark.parametrize(
    "url",
    [
        "https://wandb.ai/team/dapo/workspace?nw=nwuser",
        "https://wandb.ai/team/dapo/workspace",
        "https://wandb.ai/team/dapo/runs",
        "https://wandb.ai/team/dapo/table?nw=nwuser",
        "https://wandb.example.org/team/dapo/overview",
    ],
)
def test_a_project_page_url_is_not_taken_for_a_run(url):
    # a project page's URL has three path parts too: its page name is no run id
    from hed.pass1.sources import parse_run_path

    with pytest.raises(ConfigError) as exc_info:
        parse_run_path(url)
    message = _one_line(exc_info)
    assert f"{url!r} is a W&B project page" in message
    assert "/runs/<run_id>" in message and "`name`" in message


def test_run_given_as_run_option_in_the_config():
    from hed.pass1.sources import WandbRunRef, wandb_run_ref

    cfg = parse_run_config(
        {"runs": {"d": {"sources": {"wandb": {"run": "https://wandb.ai/t/p/runs/x9"}}}}}, "d"
    )
    options = cfg.source("wandb").options
    assert wandb_run_ref(options, "w") == WandbRunRef("t", "p", "x9")
    by_name = parse_run_config(
        {"runs": {"d": {"sources": {"wandb": {"entity": "t", "project": "p", "name": "dapo"}}}}},
        "d",
    )
    assert wandb_run_ref(by_name.source("wandb").options, "w") == WandbRunRef(
        "t", "p", None, "dapo"
    )


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({"run": "t/p/x", "entity": "t"}, "give `run` or entity, not both"),
        ({"entity": "t", "project": "p", "run_id": "x", "name": "n"}, "`run_id` or `name`"),
        ({"entity": "t", "name": "n"}, "names no run"),
        ({"run": "t/x"}, "is not a W&B run path"),
    ],
)
def test_bad_run_reference_is_one_line(options, expected):
    with pytest.raises(ConfigError) as exc_info:
        parse_run_config({"runs": {"d": {"sources": {"wandb": options}}}}, "d")
    assert expected in _one_line(exc_info)


def test_display_name_resolves_through_the_api():
    from hed.pass1.sources import WandbRunRef

    runs = {"t/p/a1": FakeRun(_verl_rows()), "t/p/b2": FakeRun([{"_step": 0, VERL_METRIC: 1.0}])}
    runs["t/p/a1"].name = "dapo_qwen3_8b_clip_higher"
    runs["t/p/b2"].name = "dapo_qwen3_8b_no_clip"
    api = FakeApi(runs)
    history = read_wandb_history(
        WandbRunRef("t", "p", name="dapo_qwen3_8b_clip_higher"),
        metric_key=VERL_METRIC,
        api_factory=_factory(api),
    )
    assert history["step"].tolist() == [0, 5, 10, 15]


def test_ambiguous_or_unknown_display_name_is_one_line():
    from hed.pass1.sources import WandbRunRef

    runs = {"t/p/a1": FakeRun([]), "t/p/b2": FakeRun([]), "t/p/c3": FakeRun([])}
    for run in runs.values():
        run.name = "dapo"
    runs["t/p/c3"].name = "grpo"
    api = FakeApi(runs)
    with pytest.raises(InputDataError) as exc_info:
        read_wandb_history(WandbRunRef("t", "p", name="dapo"), api_factory=_factory(api))
    message = _one_line(exc_info)
    assert "2 runs named 'dapo': dapo (a1), dapo (b2)" in message and "run_id" in message
    with pytest.raises(InputDataError) as exc_info:
        read_wandb_history(WandbRunRef("t", "p", name="ppo"), api_factory=_factory(api))
    message = _one_line(exc_info)
    assert "no run named 'ppo'" in message and "grpo (c3)" in message


def test_unknown_display_name_lists_candidates_without_reading_the_whole_project():
    # W&B pages through a project's runs (50 a request): an error message reads only what it shows
    from hed.pass1.sources import WandbRunRef

    class Project(FakeApi):
        read = 0

        def runs(self, path, filters=None):
            if filters:
                return []
            for i in range(5000):
                Project.read += 1
                run = FakeRun([])
                run.name, run.id = f"exp{i}", f"id{i}"
                yield run

    with pytest.raises(InputDataError) as exc_info:
        read_wandb_history(WandbRunRef("t", "p", name="ppo"), api_factory=_factory(Project({})))
    message = _one_line(exc_info)
    assert "its runs: exp0 (id0), exp1 (id1)," in message and "exp19 (id19) ... (set" in message
    assert "exp20" not in message and Project.read <= 21


def test_unreachable_server_fails_in_seconds_with_one_line(monkeypatch):
    import socket
    import time

    # a port nobody listens on: the connection is refused at once
    probe = socket.create_server(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    monkeypatch.setenv("WANDB_API_KEY", "c" * 40)
    started = time.monotonic()
    with pytest.raises(InputDataError) as exc_info:
        read_wandb_history("e/p/r", base_url=f"http://127.0.0.1:{port}")
    assert time.monotonic() - started < 6
    message = _one_line(exc_info)
    assert f"cannot reach W&B at 127.0.0.1:{port}" in message and "wandb_offline" in message


def test_behind_a_proxy_the_proxy_is_what_must_answer(monkeypatch, local_server):
    # clusters reach W&B through HTTPS_PROXY (which wandb's requests session uses): the
    # server itself need not resolve or answer from here, the proxy must
    import socket

    from hed.pass1.sources import check_reachable

    for name in ("NO_PROXY", "no_proxy", "HTTP_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTPS_PROXY", local_server)
    check_reachable("https://wandb.invalid", timeout_s=2)  # the proxy answers: no error

    probe = socket.create_server(("127.0.0.1", 0))  # a port nobody listens on
    port = probe.getsockname()[1]
    probe.close()
    monkeypatch.setenv("HTTPS_PROXY", f"http://127.0.0.1:{port}")
    with pytest.raises(InputDataError) as exc_info:
        check_reachable("https://wandb.invalid", timeout_s=2)
    message = _one_line(exc_info)
    assert f"cannot reach the proxy 127.0.0.1:{port} (HTTPS_PROXY) for W&B" in message

    monkeypatch.setenv("NO_PROXY", "wandb.invalid")  # bypassed: the server itself is tried
    with pytest.raises(InputDataError) as exc_info:
        check_reachable("https://wandb.invalid", timeout_s=2)
    assert "cannot reach W&B at wandb.invalid:443" in _one_line(exc_info)


def test_missing_mean_at_1_key_lists_the_runs_val_core_keys_closest_first():
    rows = [
        {
            "_step": 5,
            STEP: 5,
            "actor/entropy": 0.3,
            "val-aux/aime24/acc/std@32": 0.1,
            "val-core/amc23/acc/mean@32": 0.4,
            "val-core/aime24/acc/best@32/mean": 0.6,
            "val-core/aime24/acc/mean@32": 0.2,
        }
    ]
    api = FakeApi({"e/p/r": FakeRun(rows, summary=rows[0])})
    with pytest.raises(InputDataError) as exc_info:
        read_wandb_history(
            "e/p/r", metric_key="val-core/aime24/acc/mean@1", api_factory=_factory(api)
        )
    listed = _one_line(exc_info).split("the run has: ", 1)[1].split(", ")
    assert listed[0] == "val-core/aime24/acc/mean@32"
    assert listed[:3] == sorted(listed[:3], key=lambda k: k != "val-core/aime24/acc/mean@32")
    assert (
        set(listed[:3])
        == {
            "val-core/aime24/acc/mean@32",
            "val-core/aime24/acc/best@32/mean",
            "val-core/amc23/acc/mean@32",
        }
        and listed.index("val-core/amc23/acc/mean@32") == 2
    )


def test_a_runs_wandb_source_is_read_online_or_offline_with_its_own_or_another_key(
    offline_run, monkeypatch
):
    """:func:`read_wandb_source`: the source's pass@1 key, or another (the trainer's entropy)."""
    from hed.pass1 import wandb_online
    from hed.pass1.config import metrics_params
    from hed.pass1.wandb_source import read_wandb_source

    rows = [{"_step": s, STEP: s, "actor/entropy": 1.0 / s, METRIC: _accuracy(s)} for s in (5, 10)]
    monkeypatch.setattr(
        wandb_online, "default_api_factory", _factory(FakeApi({"e/p/r1": FakeRun(rows)}))
    )
    raw = {
        "wandb_defaults": {"step_key": STEP},
        "runs": {
            "online": {"sources": {"wandb": {"run": "e/p/r1", "metric_key": METRIC}}},
            "offline": {
                "sources": {"wandb_offline": {"path": str(offline_run), "metric_key": METRIC}}
            },
        },
    }
    params = metrics_params(raw)
    online = read_wandb_source(params.run("online").wandb_source, "online")
    assert online["step"].tolist() == [5, 10]
    assert online["pass1"].tolist() == [_accuracy(5), _accuracy(10)]
    entropy = read_wandb_source(params.run("online").wandb_source, "online", "actor/entropy")
    assert entropy["pass1"].tolist() == [0.2, 0.1]
    offline = read_wandb_source(params.run("offline").wandb_source, "offline")
    assert offline["step"].tolist() == [5, 10, 15, 20]
    assert offline["pass1"].tolist() == [_accuracy(s) for s in (5, 10, 15, 20)]
    entropy = read_wandb_source(params.run("offline").wandb_source, "offline", "actor/entropy")
    assert entropy["step"].tolist() == list(range(1, 21))
    assert entropy["pass1"].tolist() == [1.0 / s for s in range(1, 21)]
