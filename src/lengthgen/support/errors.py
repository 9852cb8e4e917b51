"""Errors a user can cause. The CLI prints them as one line, without a traceback."""


class UserError(Exception):
    """A mistake in the config or the inputs; the message names the key or file."""


class TrainingDiverged(UserError):
    """The loss became NaN or infinite."""


class CorruptIntermediate(UserError):
    """A file the workflow wrote, and can write again, fails to read (see fileio.read_intermediate)."""


class WriteFailed(UserError):
    """The operating system refused a write: a full disk, a read-only or forbidden folder."""
