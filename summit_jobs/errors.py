"""The one exception type the CLI turns into a clean message and a non-zero exit."""


class UserError(Exception):
    """A mistake the user can fix: bad input, a broken profile, a policy limit.

    The message must name the limit that was hit and the way out; the CLI prints
    it as one paragraph without a traceback.
    """

    exit_code = 2
