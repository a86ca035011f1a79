"""rlvr's one error vocabulary, shared by every library module and command.

Library code raises these (never click's exceptions); ``rlvr.cli.run`` is the one place
that turns them into a one-line message and the documented exit status:

    UsageError  -> 2  a bad option, configuration value or path given by the user
    BadInput    -> 3  malformed input; the message names FILE:LINE and the field
    Failure     -> 1  a runtime failure: a model, engine, server or file could not be used

``ConfigError`` is another name for ``UsageError`` (a configuration is usage). ``S3Error`` (a
Failure) and ``S3UsageError`` (a UsageError and an S3Error) are raised by rlvr.s3. ``RowError``
(a ValueError) is what a dataset's row converter raises (rlvr.data.catalog, rlvr.data.allenai);
rlvr.data turns it into BadInput naming the file, line and field.
"""

from __future__ import annotations

# Named exit codes, documented in every man page (EXIT STATUS).
EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_BAD_INPUT = 3
EXIT_INTERRUPTED = 130

EXIT_CODES = {
    EXIT_OK: "success (a wrong answer is data, never an exit code)",
    EXIT_FAILURE: "runtime failure (a model, engine, server or file could not be used)",
    EXIT_USAGE: "usage or configuration error",
    EXIT_BAD_INPUT: "malformed input; the message names FILE:LINE and the field",
    EXIT_INTERRUPTED: "interrupted (Ctrl-C or SIGTERM)",
}


class RlvrError(Exception):
    """Base of rlvr's errors: a message for one line, and the exit status it maps to."""

    exit_code = EXIT_FAILURE

    def __init__(self, message: str, code: int | None = None):
        super().__init__(message)
        self.message = message
        if code is not None:
            self.exit_code = code

    def __str__(self) -> str:
        return self.message


class Failure(RlvrError):
    """A runtime failure (exit 1 unless another code is given, e.g. 4 for too few GPUs)."""

    exit_code = EXIT_FAILURE


class UsageError(RlvrError):
    """A bad option, configuration value or path given by the user (exit 2)."""

    exit_code = EXIT_USAGE


ConfigError = UsageError


class BadInput(RlvrError):
    """Malformed input; the message names FILE:LINE and the field (exit 3)."""

    exit_code = EXIT_BAD_INPUT


class S3Error(Failure):
    """A failed S3 operation (exit 1), as one line that names the object and never a credential.

    ``code`` is the S3 error code (``NoSuchKey``, ``AccessDenied``, ...) when there is one and
    ``transient`` says whether a retry may succeed; neither is an exit status.
    """

    def __init__(self, message: str, code: str | None = None, transient: bool = False):
        super().__init__(message)
        self.code = code
        self.transient = transient


class S3UsageError(UsageError, S3Error):
    """A bad s3:// URI, bucket or key name, or a bad S3 option value (exit 2; also an S3Error)."""


class RowError(ValueError):
    """A raw row lacks a field the dataset needs (``field`` names it)."""

    def __init__(self, message: str, field: str | None = None):
        super().__init__(message)
        self.field = field
