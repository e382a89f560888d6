"""The only two ways text from outside pt2c reaches generated source.

Module paths, source lines, version strings and file names come from the ``.pt2`` (untrusted)
or the command line.  Identifiers are never copied from them (``frontend.lower.c_name`` makes
new ones); any other text goes through :func:`c_comment` (inside ``/* ... */`` and ``#``
comments of the build files) or :func:`c_string` (a C string literal).
"""

from __future__ import annotations

import re

COMMENT_MAX = 240  # characters of outside text per comment line

_OPENERS = re.compile(r"\*/|/\*")


def c_comment(text: str, limit: int = COMMENT_MAX) -> str:
    """`text` made safe inside a C block comment and on one line of a shell, CMake or Make comment:
    printable ASCII only (other characters as <U+XXXX>, line breaks as spaces), no sequence that ends
    or opens a comment (``*/``, ``/*``), no trigraph (``??``), no trailing backslash, at most `limit`
    characters."""
    out = []
    for ch in str(text):
        o = ord(ch)
        if 32 <= o < 127:
            out.append(ch)
        elif ch in "\t\n\r\v\f":
            out.append(" ")
        else:
            out.append(f"<U+{o:04X}>")
    s = "".join(out)
    if len(s) > limit:
        s = s[:limit - 3] + "..."
    while _OPENERS.search(s) or "??" in s:
        s = _OPENERS.sub(lambda m: m.group(0)[0] + " " + m.group(0)[1], s).replace("??", "? ?")
    if s.endswith("\\"):  # a Make or C line would continue into the next one
        s += " "
    return s


def c_string(text: str) -> str:
    """`text` as a C string literal (with its quotes): printable ASCII as is, except ``"``, ``\\``
    and ``?`` (trigraphs) escaped; every other byte of its UTF-8 as a three-digit octal escape."""
    out = ['"']
    for b in str(text).encode("utf-8", "replace"):
        ch = chr(b)
        if ch in '"\\?':
            out.append("\\" + ch)
        elif 32 <= b < 127:
            out.append(ch)
        else:
            out.append(f"\\{b:03o}")
    out.append('"')
    return "".join(out)
