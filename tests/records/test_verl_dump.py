"""Reading verl's <step>.jsonl dumps: the fields, and one line per bad input."""

from __future__ import annotations

import json

import pytest

from hed.errors import InputDataError
from hed.records.verl_dump import dump_steps, read_dump_step


def write(folder, step, lines):
    folder.mkdir(exist_ok=True)
    text = "\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines)
    (folder / f"{step}.jsonl").write_text(text + ("\n" if lines else ""), encoding="utf-8")


def test_reads_fields_extras_and_ids(tmp_path):
    write(
        tmp_path,
        3,
        [
            {"input": "q1", "output": "a", "gts": "4", "score": 1.0, "step": 3, "acc": True},
            {
                "input": "q2",
                "output": "b",
                "score": -1,
                "step": 3,
                "acc": False,
                "response_ids": [5, 6],
            },
        ],
    )
    write(tmp_path, 10, [{"input": "q", "output": "", "score": 0.0, "step": 10}])
    assert dump_steps(tmp_path) == [3, 10]
    frame = read_dump_step(tmp_path, 3)
    assert frame["line"].tolist() == [1, 2]
    assert frame["score"].tolist() == [1.0, -1.0]
    assert frame["gts"].tolist() == ["4", None]
    assert frame["acc"].tolist() == [True, False]
    assert frame["response_ids"].tolist() == [None, [5, 6]]


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        ([], "is empty"),
        (
            ['{"input": "q", "output": "a", "score": 1, "step": 3}', "{not json"],
            "line 2: not valid JSON",
        ),
        ([{"input": "q", "output": "a", "step": 3}], "line 1: field 'score' is absent"),
        ([{"input": "q", "output": "a", "score": "high", "step": 3}], "'score' must be a finite"),
        (
            [{"input": "q", "output": "a", "score": 1, "step": 4}],
            "'step' is 4 but the file is step 3",
        ),
        (
            [{"input": "q", "output": "", "score": 1, "response_ids": [-2]}],
            "'response_ids' must",
        ),
        (["[1, 2]"], "must be a JSON object"),
    ],
)
def test_bad_dump_is_one_line_naming_file_line_and_field(tmp_path, lines, message):
    write(tmp_path, 3, lines)
    with pytest.raises(InputDataError, match=message) as caught:
        read_dump_step(tmp_path, 3)
    assert "\n" not in str(caught.value)
    assert str(tmp_path / "3.jsonl") in str(caught.value)


def test_missing_folder_and_step(tmp_path):
    with pytest.raises(InputDataError, match="does not exist"):
        dump_steps(tmp_path / "nope")
    with pytest.raises(InputDataError, match=r"holds no <step>\.jsonl"):
        dump_steps(tmp_path)
    write(tmp_path, 1, [{"input": "q", "output": "a", "score": 1}])
    with pytest.raises(
        InputDataError, match=r"2.jsonl does not exist \(the folder has steps \[1\]\)"
    ):
        read_dump_step(tmp_path, 2)
