"""HED's error types.

Every error HED raises on bad input is a :class:`HEDError` whose message is one line that
names the offending file, field or value and says what to do. ``docs/errors.md`` lists them.
"""


class HEDError(Exception):
    """Base class: bad input or configuration, reported in one actionable line."""


class ConfigError(HEDError, ValueError):
    """A parameter or configuration value is missing or invalid."""


class InputDataError(HEDError, ValueError):
    """An input file (prompts, records, metrics) is missing, empty or malformed."""


class CheckpointError(HEDError, FileNotFoundError):
    """A checkpoint folder is missing, incomplete or of an unsupported layout."""
