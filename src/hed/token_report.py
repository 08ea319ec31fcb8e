"""Former home of the token report, kept so that ``from hed.token_report import notebook_view``
(as earlier docs and notebooks wrote it) keeps working; it lives in
:mod:`hed.report.token_report`."""

from hed.report.token_report import (
    TokenReportOptions,
    build_report,
    choose_keys,
    notebook_view,
)

__all__ = ["TokenReportOptions", "build_report", "choose_keys", "notebook_view"]
