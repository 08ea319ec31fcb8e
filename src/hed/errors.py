"""HED's error types.

Every error HED raises on bad input is a :class:`HEDError` whose message is one line that
names the offending file, field or value and says what to do. ``docs/errors.md`` lists them.
"""

import os
import sys

from kedro.io.core import DatasetError


class HEDError(Exception):
    """Base class: bad input or configuration, reported in one actionable line."""


class ConfigError(HEDError, ValueError):
    """A parameter or configuration value is missing or invalid."""


class InputDataError(HEDError, DatasetError, ValueError):
    """An input file (prompts, records, metrics) is missing, empty or malformed.

    It is also a Kedro ``DatasetError`` so that Kedro re-raises it from a dataset's ``load()``
    unchanged instead of wrapping it in a multi-line message.
    """


class CredentialsError(ConfigError, DatasetError):
    """A credential (W&B API key, Hugging Face token) is missing, or refused by its server.

    A ``ConfigError`` that is also a Kedro ``DatasetError``: publishing checks credentials in
    a dataset's ``save()``, and Kedro passes a ``DatasetError`` on as one line.
    """


class CheckpointError(HEDError, FileNotFoundError):
    """A checkpoint folder is missing, incomplete or of an unsupported layout."""


class OutputWriteError(HEDError, DatasetError, OSError):
    """An output cannot be written (disk full, unwritable folder); nothing partial is left."""


class NodeFailuresError(HEDError, RuntimeError):
    """A runner's summary of the nodes that failed (:class:`hed.runners.executor.FailedNodesError`).

    Unlike the other HED errors its message has one line per failed node; it is shown as it
    is, since it already names every failure and the command to resume.
    """


#: Length at which :func:`one_line` cuts a message.
ONE_LINE_LIMIT = 300


def one_line(exc: BaseException | str, limit: int | None = ONE_LINE_LIMIT) -> str:
    """``exc``'s message (or a message) as one line, to quote inside a HED message.

    The first non-blank line of ``str(exc)`` with runs of white space collapsed, or the
    exception's type name when the message is empty; cut to ``limit`` characters (ending
    ``…``) unless ``limit`` is None. Used wherever HED wraps another library's error
    (a tokenizer, W&B, pyarrow, a runner's node) in its own one-line message.
    """
    lines = [line for line in str(exc).splitlines() if line.strip()]
    text = " ".join(lines[0].split()) if lines else type(exc).__name__
    if limit is None or len(text) <= limit:
        return text
    return text[: limit - 1] + "…"


#: Set to 1 to get Python's full traceback for HED's errors at the command line.
TRACEBACK_VARIABLE = "HED_TRACEBACK"


def hed_error_in(exc: BaseException | None) -> HEDError | None:
    """The first :class:`HEDError` in ``exc``'s chain, as Python prints it.

    Follows ``__cause__``, else ``__context__`` unless suppressed (``raise ... from None``).
    """
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, HEDError):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or (None if exc.__suppress_context__ else exc.__context__)
    return None


def short_message(exc: BaseException) -> str | None:
    """What the command line shows for ``exc`` instead of a traceback, or ``None``.

    An exception with a :class:`HEDError` in its chain shows the outermost message that holds
    the HED message (Kedro prefixes a dataset's name to its load errors), as
    ``<ErrorType>: <message>``; a runner's :class:`NodeFailuresError` shows its own summary
    (it already names every failed node and the command to resume). Anything else: ``None``.
    """
    if isinstance(exc, NodeFailuresError):
        return f"{type(exc).__name__}: {exc}"
    found = hed_error_in(exc)
    if found is None:
        return None
    shown = exc if str(found) in str(exc) else found
    return f"{type(found).__name__}: {shown}"


def install_short_tracebacks() -> None:
    """Show HED's one-line errors at the command line without Python's traceback.

    Replaces ``sys.excepthook`` so that an uncaught exception carrying a :class:`HEDError`
    (or a ``FailedNodesError``) prints :func:`short_message` and a hint on
    ``HED_TRACEBACK=1``; every other exception, and every exception when ``HED_TRACEBACK``
    is set, goes to the previous hook (the full traceback).
    """
    if getattr(sys.excepthook, "hed_short_tracebacks", False):
        return  # already installed (settings are imported again in runner subprocesses)
    previous = sys.excepthook

    def excepthook(exc_type, exc, tb):
        message = None if os.environ.get(TRACEBACK_VARIABLE) else short_message(exc)
        if message is None:
            previous(exc_type, exc, tb)
            return
        print(f"{message} [{TRACEBACK_VARIABLE}=1 shows the traceback]", file=sys.stderr)

    excepthook.hed_short_tracebacks = True
    sys.excepthook = excepthook
