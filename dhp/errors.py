"""User-facing errors: one clear message naming the problem and the fix."""


class DHPError(ValueError):
    """An error the user can fix (bad file, bad parameter, unreachable server, ...).

    The message always names the problem and, after "Fix:", what to do about it.
    """

    def __init__(self, problem: str, fix: str):
        self.problem = problem
        self.fix = fix
        super().__init__(f"{problem} Fix: {fix}")
