"""The exit codes of every swinkit command (``python -m swinkit ...`` and ``tools/*.py``): one
table, so that the command modules need not import each other for them and every help text
states the same meanings (:func:`describe`).

Standard library only: imported by every command line before anything heavy."""

EXIT_OK = 0            # done: the result or report written
EXIT_FAILED = 1        # the work failed: a rank failed (named), a check failed, bad files found
EXIT_BAD_INPUT = 2     # bad arguments or configuration, refused before anything started
EXIT_NO_DATA = 3       # nothing usable to read (no stored results): the message names the command
EXIT_INTERRUPTED = 130  # Ctrl-C: every process of the run stopped first
EXIT_TERMINATED = 143   # SIGTERM (swinkit.launch.terminate.Terminated): stopped, cleaned up

MEANINGS = {
    EXIT_OK: "success",
    EXIT_FAILED: "the work failed (the failing rank, cell or file is named)",
    EXIT_BAD_INPUT: "bad input, refused before anything started",
    EXIT_NO_DATA: "no usable measurements to read (the message names the command that makes "
                  "them)",
    EXIT_INTERRUPTED: "interrupted (Ctrl-C)",
    EXIT_TERMINATED: "terminated (SIGTERM)",
}


def describe(codes=tuple(MEANINGS)) -> str:
    """``Exit codes: 0 success, 1 ...`` for a help text, for the codes a command uses.

    >>> describe((0, 2))
    'Exit codes: 0 success, 2 bad input, refused before anything started.'
    """
    return "Exit codes: " + ", ".join(f"{c} {MEANINGS[c]}" for c in codes) + "."
