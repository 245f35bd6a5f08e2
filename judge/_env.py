"""Process-wide settings that must be in place before deepeval is imported.

deepeval 4.x phones home on exit (up to 10 s) unless telemetry is opted out, writes a
``.deepeval`` folder into the working directory unless its file system is read-only, and
reads ``.env`` files unless told not to. Every module that imports deepeval imports this
module first.
"""

from __future__ import annotations

import os

_DEEPEVAL_DEFAULTS = {
    "DEEPEVAL_TELEMETRY_OPT_OUT": "1",
    "DEEPEVAL_FILE_SYSTEM": "READ_ONLY",
    "DEEPEVAL_DISABLE_DOTENV": "1",
    "DEEPEVAL_UPDATE_WARNING_OPT_IN": "0",
    "DEEPEVAL_GRPC_LOGGING": "0",
}


def configure_deepeval_env() -> None:
    """Set deepeval's opt-outs unless the user already chose otherwise."""
    for key, value in _DEEPEVAL_DEFAULTS.items():
        os.environ.setdefault(key, value)


configure_deepeval_env()
