"""A tool's terminal output as the next run reads it (SPEC §11): what the terminal finally
showed (`clean_terminal`), cut head and tail (`truncate_lines`), or, for a command that
succeeded without a warning word, one sentinel line (`compact_output`). Each is a projection:
applied twice, it changes nothing more."""
from __future__ import annotations

import re

TRUNCATE_OVER_LINES = 20
HEAD_LINES = 5
TAIL_LINES = 10
# A cut output must itself stay under the threshold, or a second pass would cut again.
assert HEAD_LINES + 1 + TAIL_LINES <= TRUNCATE_OVER_LINES
# Minified bundles and base64 blobs are one huge line: cut those too.
MAX_LINE_CHARS = 400
LINE_HEAD_CHARS = 200
LINE_TAIL_CHARS = 100
OK_SENTINEL = "status: ok (exit 0)"
OMITTED = "omitted ...]"  # shared tail of both truncation markers

_CRLF = re.compile(r"\r+\n")
# "cursor to column 1" and "erase line" redraw a line just as a bare \r does
_REDRAW = re.compile(r"\x1b\[(?:[012]?K|[01]?G)")
# CSI (colours, cursor moves), OSC (titles, hyperlinks), charset selection, 2-byte codes
_ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b\n]*(?:\x07|\x1b\\)?|[ -/]+[0-~]|[0-Z\\-_])")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
# braille spinner frames (⠋⠙⠹⠸…): a line holding one is a spinner's, never real output
_SPINNER = re.compile(r"[\u2800-\u28ff]")
_PERCENT = re.compile(r"\d{1,3}(?:\.\d+)?\s?%")
_BAR = re.compile(r"[█▓▒░■━#=▏▎▍▌▋▊▉]{5}")
WARNING = re.compile(r"\b(?:warn(?:ing)?s?|err(?:or)?s?|fail(?:s|ed|ure|ures|ing)?|exception|"
                      r"traceback|fatal|panic|deprecat\w*|denied|refused|abort(?:ed)?|"
                      r"vulnerabilit\w*|critical)\b", re.IGNORECASE)


def clean_terminal(text: str) -> str:
    """What the terminal finally showed: no escapes, only the last state of each redrawn
    line, no spinner frame, one line per run of progress-bar updates."""
    text = _ANSI.sub("", _REDRAW.sub("\r", _CRLF.sub("\n", text)))
    lines: list[str] = []
    for raw in text.split("\n"):
        line = next((seg for seg in reversed(raw.split("\r")) if seg.strip()), "")
        line = _CONTROL.sub("", line).rstrip()
        if _SPINNER.search(line):
            continue
        if _is_progress(line) and lines and _is_progress(lines[-1]):
            lines[-1] = line  # keep only the bar's final state
            continue
        lines.append(line)
    while lines and not lines[-1]:
        lines.pop()
    while lines and not lines[0]:
        lines.pop(0)
    return "\n".join(lines)


def _is_progress(line: str) -> bool:
    return bool(_PERCENT.search(line) and _BAR.search(line))


def truncate_lines(text: str) -> str:
    """Head/tail cut: the first lines show what started, the last ones how it ended."""
    lines = text.split("\n")
    if len(lines) <= TRUNCATE_OVER_LINES:
        return text
    omitted = len(lines) - HEAD_LINES - TAIL_LINES
    return "\n".join([*lines[:HEAD_LINES], f"[... {omitted} lines omitted ...]", *lines[-TAIL_LINES:]])


def _cut_long_line(line: str) -> str:
    if len(line) <= MAX_LINE_CHARS:
        return line
    omitted = len(line) - LINE_HEAD_CHARS - LINE_TAIL_CHARS
    return f"{line[:LINE_HEAD_CHARS]} [... {omitted} chars {OMITTED} {line[-LINE_TAIL_CHARS:]}"


def compact_output(text: str, *, command: bool, failed: bool) -> str:
    text = clean_terminal(text)
    # A text already carrying a marker was kept on purpose by an earlier pass (its
    # warning may sit in the part that was cut): never turn it into the sentinel.
    if command and not failed and OMITTED not in text and not WARNING.search(text):
        return OK_SENTINEL
    return truncate_lines("\n".join(_cut_long_line(line) for line in text.split("\n")))
