"""The one error a file parser raises: the reason a file yields no document."""


class UnusableFile(ValueError):
    """Raised by a parser with the reason a file yields no document."""
