"""The one exception type commands raise for errors the user can fix (exit status 2)."""


class CliError(Exception):
    """A one-line message naming the flag, file line or server answer that is wrong."""
