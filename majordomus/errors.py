"""The one error type of majordomus and its projections.

Every failure a client can see is a `MajordomusError` with a code from a closed
vocabulary, a sentence for a person and, where there is one, a suggestion. Its mapping to
an HTTP status, to a CLI exit code and to an MCP error result is written here once; the
surfaces only look it up. It deliberately carries no traceback: those stay in the log of
the process that saw them.
"""

from __future__ import annotations

from typing import Literal

import msgspec

ErrorCode = Literal[
    "invalid_input",
    "not_found",
    "refused",
    "forbidden",
    "internal",
    "cancelled",
    "unavailable",
    "timed_out",
]

HTTP_STATUS: dict[str, int] = {
    "invalid_input": 400,
    "forbidden": 403,
    "not_found": 404,
    "refused": 422,
    "internal": 500,
    "cancelled": 409,
    "unavailable": 503,
    "timed_out": 504,
}

# Exit codes of the CLI: 0 is success, 1 is an execution that failed; the rest name why a
# command could not even do what it was asked.
EXIT_CODE: dict[str, int] = {
    "internal": 1,
    "invalid_input": 2,
    "cancelled": 3,
    "not_found": 4,
    "refused": 5,
    "forbidden": 6,
    "unavailable": 7,
    "timed_out": 8,
}


class ExecutionError(msgspec.Struct, omit_defaults=True):
    """Why an execution ended badly: a code, a sentence, where to look, and whose it is."""

    code: str
    message: str
    correlation_id: str
    suggestion: str | None = None


class ErrorBody(msgspec.Struct, omit_defaults=True):
    """The error as a surface shows it (HTTP envelope member, MCP `_meta`, CLI `--format json`)."""

    code: str
    message: str
    suggestion: str | None = None
    correlation_id: str | None = None


class MajordomusError(Exception):
    """A failure with a code a program branches on and a sentence a person reads."""

    def __init__(
        self,
        code: ErrorCode,
        message: str,
        suggestion: str | None = None,
        correlation_id: str | None = None,
    ) -> None:
        super().__init__(message)
        self.code: ErrorCode = code
        self.message = message
        self.suggestion = suggestion
        self.correlation_id = correlation_id

    @property
    def http_status(self) -> int:
        return HTTP_STATUS[self.code]

    @property
    def exit_code(self) -> int:
        return EXIT_CODE[self.code]

    def body(self) -> ErrorBody:
        return ErrorBody(self.code, self.message, self.suggestion, self.correlation_id)

    def for_execution(self, execution_id: str) -> ExecutionError:
        return ExecutionError(self.code, self.message, execution_id, self.suggestion)

    def __repr__(self) -> str:
        return f"MajordomusError({self.code!r}, {self.message!r})"


def invalid_input(message: str, suggestion: str | None = None) -> MajordomusError:
    return MajordomusError("invalid_input", message, suggestion)


def not_found(message: str, suggestion: str | None = None) -> MajordomusError:
    return MajordomusError("not_found", message, suggestion)


def refused(message: str, suggestion: str | None = None) -> MajordomusError:
    return MajordomusError("refused", message, suggestion)


def unavailable(message: str, suggestion: str | None = None) -> MajordomusError:
    return MajordomusError("unavailable", message, suggestion)
