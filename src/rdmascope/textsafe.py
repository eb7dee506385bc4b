"""Terminal safety: control characters from outside strings never reach the terminal raw.

Strings rdmascope prints come partly from outside: sysfs files (rate strings, firmware versions,
device and netdev names), request logs, NCCL logs, manifests. A control character in one of them
(``ESC ] 52`` writing the clipboard, ``ESC [ 2J`` clearing the screen, a ``\\r`` overwriting a
line) would act on the user's terminal. ``escape_controls`` makes each such character visible
instead (``\\x1b``); ``SafeStream`` applies it to everything written to stdout/stderr (the CLI
installs it, so every printer goes through this one helper). The only sequences let through are
the ones rdmascope itself writes: SGR colours (``ESC [ ... m``, click's styled warnings) and what
``unfiltered`` writes directly (the live status line's ``\\r`` and erase-to-end-of-line).

Depends on nothing beyond the standard library (the lean sampler install uses it too).
"""

from __future__ import annotations

import io
import re
from typing import TextIO

#: C0 controls except newline and tab, DEL, and the C1 controls (U+0080..U+009F)
_CONTROL = re.compile(r"\x1b\[[0-9;]*m|[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def _visible(m: re.Match) -> str:
    s = m.group(0)
    if len(s) > 1:  # an SGR colour sequence: harmless, kept (click.secho)
        return s
    return f"\\x{ord(s):02x}"


#: What ASCII text without a control character is made of: the printable characters, newline, tab
_PLAIN_ASCII = bytes(range(0x20, 0x7F)) + b"\n\t"


def escape_controls(text: str) -> str:
    """Return ``text`` with every control character except ``\\n`` and ``\\t`` shown as
    ``\\xNN`` (ESC as ``\\x1b``, CR as ``\\x0d``); SGR colour sequences are kept. Pure: the
    same string when there is nothing to escape."""
    if text.isascii() and not text.encode("ascii").translate(None, _PLAIN_ASCII):
        return text  # the common case (--json's text), found ~5x faster than by the search
    if not _CONTROL.search(text):
        return text
    return _CONTROL.sub(_visible, text)


def clean(text: object) -> str:
    """``str(text)`` with every control character escaped, colours included: for one outside
    field (a sysfs string, a request-log value) placed in a message."""
    s = str(text)
    return re.sub(r"[\x00-\x1f\x7f-\x9f]", lambda m: f"\\x{ord(m.group(0)):02x}", s)


class SafeStream(io.TextIOBase):
    """A text stream that escapes control characters (``escape_controls``) on the way to
    ``unfiltered``, the real stream (which deliberate terminal sequences use directly)."""

    def __init__(self, stream: TextIO):
        self.unfiltered = stream

    def write(self, s: str) -> int:
        self.unfiltered.write(escape_controls(s))
        return len(s)

    def flush(self) -> None:
        self.unfiltered.flush()

    def isatty(self) -> bool:
        return self.unfiltered.isatty()

    def fileno(self) -> int:
        return self.unfiltered.fileno()

    def writable(self) -> bool:
        return True

    @property
    def encoding(self):  # noqa: D401 - mirrors the wrapped stream
        return getattr(self.unfiltered, "encoding", "utf-8")

    @property
    def errors(self):
        return getattr(self.unfiltered, "errors", "strict")

    @property
    def buffer(self):
        """The binary stream beneath (for machine output such as CSV, written as bytes)."""
        return self.unfiltered.buffer


def unfiltered(stream: TextIO) -> TextIO:
    """The real stream under a ``SafeStream`` (or ``stream`` itself): for rdmascope's own
    terminal sequences (the status line's ``\\r`` and erase)."""
    return getattr(stream, "unfiltered", stream)


def install() -> None:
    """Wrap ``sys.stdout`` and ``sys.stderr`` in ``SafeStream`` (once)."""
    import sys

    if not isinstance(sys.stdout, SafeStream):
        sys.stdout = SafeStream(sys.stdout)
    if not isinstance(sys.stderr, SafeStream):
        sys.stderr = SafeStream(sys.stderr)
