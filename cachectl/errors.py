"""The one exception type commands raise for errors the user can fix, and the exit codes.

docs/operations.md, "Exit codes", is the table for users; ``cachectl --help`` repeats it.
"""

USAGE_OR_REFUSED = 2  # a CliError: a bad flag or file, or the server refused the request
REFUSED_BY_GATE = 1  # a valid move the rollout gates refused (or plan shadow --strict, no pass)
INTERRUPTED = 130
EXIT_CODES = (
    "exit status: 0 done; 1 a rollout or rollback the gates refused, or plan shadow --strict "
    "without a pass; 2 a usage error or any other refusal (bad flag or file, unknown version, the "
    "server's INVALID_ARGUMENT, NOT_FOUND, FAILED_PRECONDITION, UNAUTHENTICATED, unreachable); "
    "130 interrupted"
)


class CliError(Exception):
    """A one-line message naming the flag, file line or server answer that is wrong (exit
    status :data:`USAGE_OR_REFUSED`)."""
