"""Keep stdout for swinkit's own results: libraries' chatter goes to stderr.

DeepSpeed creates its logger ("DeepSpeed") when first imported, with a handler on stdout, and
warns on a machine without a GPU ("Setting accelerator to CPU"). MMEngine imports DeepSpeed
whenever it is installed, so without this the warning lands in the middle of
``swinkit describe --json`` and breaks the JSON. Importing the logger under
``redirect_stdout(sys.stderr)`` keeps the import-time warning off stdout, and pointing the
logger's handlers at stderr does the same for everything it says later; the messages are
still shown, only on the other stream.
"""
from __future__ import annotations

import contextlib
import importlib.util
import logging
import sys


def send_library_logs_to_stderr() -> None:
    """Point DeepSpeed's logger at stderr (a no-op when DeepSpeed is not installed)."""
    if importlib.util.find_spec("deepspeed") is None:
        return
    try:
        with contextlib.redirect_stdout(sys.stderr):
            import deepspeed.utils.logging  # noqa: F401  (creates the logger; warns at import)
    except Exception:  # a broken DeepSpeed install is the DeepSpeed engine's error, not ours
        return
    for handler in logging.getLogger("DeepSpeed").handlers:
        if isinstance(handler, logging.StreamHandler) and handler.stream in (
                sys.stdout, sys.__stdout__):
            handler.setStream(sys.stderr)
