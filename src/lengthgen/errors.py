"""Errors a user can cause. The CLI prints them as one line, without a traceback."""


class UserError(Exception):
    """A mistake in the config or the inputs; the message names the key or file."""


class TrainingDiverged(UserError):
    """The loss became NaN or infinite."""
