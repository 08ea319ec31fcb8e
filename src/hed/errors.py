"""HED's error types.

Every error HED raises on bad input is a :class:`HEDError` whose message is one line that
names the offending file, field or value and says what to do. ``docs/errors.md`` lists them.
"""

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


class CheckpointError(HEDError, FileNotFoundError):
    """A checkpoint folder is missing, incomplete or of an unsupported layout."""


class OutputWriteError(HEDError, DatasetError, OSError):
    """An output cannot be written (disk full, unwritable folder); nothing partial is left."""
