"""Errors that the CLI turns into exit codes.

`BadInput` (exit 2) is bad usage or bad input: the message names the file,
row or flag and says what would be right. `WorkFailed` (exit 1) is work that
failed for another reason.
"""


class RagError(Exception):
    """Base class; `exit_code` is what the CLI exits with."""

    exit_code = 1


class BadInput(RagError):
    """Bad usage or bad input (exit code 2)."""

    exit_code = 2


class WorkFailed(RagError):
    """The work failed (exit code 1)."""

    exit_code = 1


class Interrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM after some files were already replaced: the message
    says which, and what the next command does about them (the CLI prints it
    instead of "the previous files are intact", exit 130)."""


def one_of(a_name: str, a: object, b_name: str, b: object) -> None:
    """BadInput unless exactly one of two alternative inputs is given (the message says which case)."""
    if a is None and b is None:
        raise BadInput(f"give {a_name} or {b_name}; neither was given")
    if a is not None and b is not None:
        raise BadInput(f"give either {a_name} or {b_name}, not both")
