"""Log lines made safe to show: terminal escapes removed, control characters blanked, cut.

A handler's output may come from a child process that paints a terminal; a reader of the
event stream (a browser, an agent) must get plain text of bounded size.
"""

from __future__ import annotations

import re

from majordomus.config import LIMITS

_OSC = re.compile(r"\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?")
_CSI = re.compile(r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]")
_OTHER_ESC = re.compile(r"\x1b[@-Z\\-_]?")
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f]")


def sanitize_log_line(message: str, limit: int = LIMITS.log_line_chars) -> str:
    """CSI and OSC escapes removed, other control characters (but TAB) as a space, cut."""
    text = _OSC.sub("", message)
    text = _CSI.sub("", text)
    text = _OTHER_ESC.sub("", text)
    text = _CONTROL.sub(" ", text)
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    return text
