"""The one exception type the command line turns into a clean message and exit code 2."""

from __future__ import annotations


class BundleError(Exception):
    """A problem with the user's input: one sentence that names it and says what to do next. The CLI
    prints it on stderr and exits with status 2; anything else that escapes is a bug and keeps its
    traceback.
    """

    exit_code = 2

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message
