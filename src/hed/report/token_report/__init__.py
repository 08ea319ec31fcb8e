"""The token report: responses drawn token by token, coloured by entropy, as one HTML file.

One self-contained page (inline CSS and JavaScript, no network) for every run and step of a
study: a run selector, the steps shown side by side for the same (prompt_index,
sample_index), filters by prompt and by correctness, a legend in nats, and a tooltip per token
(entropy, probability, the top-k alternatives with their probabilities, word, category,
position). docs/token_report.md describes the page for users.

Size is bounded: per (run, step) at most ``responses_per_step`` responses, the same
(prompt_index, sample_index) keys at every step of a run, chosen by a seeded shuffle
(:func:`choose_keys`), and at most ``max_tokens_per_response`` tokens of each; the page says
what it left out. Only the chosen responses' rows are read from the merged records
(:func:`read_response_records`: a pyarrow filter on prompt_index, sample_index, position).

Text of the alternatives. A record holds the top-k *ids*; their text is decoded with the
tokenizer of the step's checkpoint (``model_dir`` in ``checkpoints``; only the tokenizer files
are read, no weights), one id at a time with HED's decode settings. Where no tokenizer can be
loaded (``kedro run --pipelines reporting`` on a machine without the checkpoints), ids that
were sampled somewhere in the shown responses take their recorded ``token_text`` and the others
show as ``#<id>``; the page says which source it used (:func:`vocabulary_texts`).

Escaping. Every text from the data (responses, prompts, words, alternatives) travels in one
JSON blob inside ``<script type="application/json">`` with ``<``, ``>``, ``&``, U+2028 and
U+2029 written as ``\\uXXXX`` (:func:`script_json`), and the page builds its DOM with
``textContent`` only, so a response containing ``<script>`` or ``</span>`` shows as text and
never runs.
"""

from hed.report.token_report.inputs import (
    RECORD_COLUMNS,
    SEQUENCE_COLUMNS,
    StepInput,
    load_tokenizer,
    read_response_records,
    read_response_table,
    step_inputs,
    vocabulary_texts,
)
from hed.report.token_report.options import TokenReportOptions, token_report_options
from hed.report.token_report.page import notebook_view, render_html, script_json
from hed.report.token_report.payload import (
    CATEGORY_CODES,
    ENTROPY_FLOOR,
    FORMAT,
    PROMPT_PREVIEW_CHARS,
    build_report,
    choose_keys,
)

__all__ = [
    "CATEGORY_CODES",
    "ENTROPY_FLOOR",
    "FORMAT",
    "PROMPT_PREVIEW_CHARS",
    "RECORD_COLUMNS",
    "SEQUENCE_COLUMNS",
    "StepInput",
    "TokenReportOptions",
    "build_report",
    "choose_keys",
    "load_tokenizer",
    "notebook_view",
    "read_response_records",
    "read_response_table",
    "render_html",
    "script_json",
    "step_inputs",
    "token_report_options",
    "vocabulary_texts",
]
