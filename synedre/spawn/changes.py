"""What a launch changed (issue 28, SPEC §9.8): the files its commits touched with the lines
added and removed in each, its branch and commits, and the patch, for the recap.

Taken by the fleet after the merge, from the branch `workspace.collect` brought back into the
client's repository (the trunk, or this host's mirror of a remote): `git diff <base> <head>`,
`base` where the agent started (`Workspace.base_sha`), `head` the branch as it came back. No
hook, external diff driver nor textconv filter runs: nothing of the agent's. The patch is the
whole change as one diff, so it applies on `base` with `git apply`. A binary file shows as
`Binary files … differ`: its bytes cannot be redacted, so they are not sent (`binary`).

The patch goes through the launch's own redactor (its stream's), hunk by hunk: each line
alone and the hunk's lines joined (a key block spans lines); what the joined text hid across
lines is hidden on every line it touched (`redact.merge_pieces`), each line keeping its prefix
and its end. So a redacted patch has the same lines and hunks: a redacted added line still
applies; a redacted line of the base (context, removed, a header) no longer matches, and the
patch says so (`altered`). It is cut to `max_bytes` at a hunk boundary (a file's header goes
with its first hunk): what is kept applies as far as it goes; the files it left out, in part
or whole, are named (`left_out`). Only what is kept is redacted: the rest is never sent.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from synedre.redact import Redactor
from synedre.redact.pieces import merge_pieces
from synedre.spawn import git, workspace

DIFF_OPTS = ("--no-color", "--no-ext-diff", "--no-textconv", "--no-renames", "--src-prefix=a/", "--dst-prefix=b/")
_HUNK = re.compile(r"(@@ -[0-9,]+ \+[0-9,]+ @@)(.*)", re.DOTALL)
_BODY = (b" ", b"+", b"-")


@dataclass(frozen=True)
class Changes:
    branch: str
    base: str
    head: str
    commits: list[tuple[str, str]]  # (sha, subject), oldest first
    files: list[dict[str, Any]]  # {"path", "added", "removed"}; None counts: a binary file
    patch: bytes  # redacted, cut at a hunk boundary
    patch_bytes: int  # the whole patch's size, as git wrote it
    left_out: list[str] = field(default_factory=list)
    altered: bool = False  # a line of the base was redacted: the patch no longer applies as is
    binary: bool = False

    def as_record(self) -> dict[str, Any]:
        return {"branch": self.branch, "base_sha": self.base, "head_sha": self.head,
                "commits": [list(c) for c in self.commits], "files": self.files, "patch": self.patch,
                "patch_bytes": self.patch_bytes, "left_out": self.left_out, "altered": self.altered,
                "has_binary": self.binary}


def _git(repo: Path, *args: str) -> bytes:
    proc = git.completed(["git", "-C", str(repo), "-c", "diff.suppressBlankEmpty=false", *args], f"git {args[0]}",
                         workspace.GIT_TIMEOUT_S)
    if proc.returncode != 0:
        raise workspace.WorkspaceError(f"git {args[0]}: exit {proc.returncode}: "
                                       f"{proc.stderr.decode(errors='replace').strip()[-500:]}")
    return proc.stdout


def of_branch(ws: workspace.Workspace, redactor: Redactor, max_bytes: int) -> Changes | None:
    """The changes of the agent's branch since it started, as the fleet's repository holds it;
    None when it holds no commit of the agent's."""
    if ws.base_sha is None:
        return None
    head = _git(ws.repo, "rev-parse", "--verify", f"refs/heads/{ws.branch}^{{commit}}").decode().strip()
    log = _git(ws.repo, "log", "--reverse", "-z", "--format=%H %s", f"{ws.base_sha}..{head}")
    commits = [(sha, redactor.redact_text(subject)) for sha, _, subject in
               (c.decode(errors="replace").partition(" ") for c in log.split(b"\0") if c.strip())]
    if not commits:
        return None
    files = [{"path": redactor.redact_text(p.decode(errors="replace")), "added": None if a == b"-" else int(a),
              "removed": None if r == b"-" else int(r)}
             for a, r, p in (rec.split(b"\t", 2) for rec in
                             _git(ws.repo, "diff", "--numstat", "-z", "--no-renames", ws.base_sha, head).split(b"\0")
                             if rec.strip())]
    raw = _git(ws.repo, "diff", *DIFF_OPTS, ws.base_sha, head)
    patch, left_out, altered = cut(units(raw), redactor, max_bytes)
    return Changes(ws.branch, ws.base_sha, head, commits, files, patch, len(raw), left_out, altered,
                   any(f["added"] is None for f in files))


@dataclass
class Unit:
    """What the cut keeps or leaves whole: a file's header with its first hunk, or a hunk."""
    path: str
    lines: list[bytes]


def _path(diff_line: bytes) -> str:
    rest = diff_line.rstrip(b"\n").decode(errors="replace").removeprefix("diff --git a/")
    return rest[:(len(rest) - 3) // 2]  # `a/<p> b/<p>`: no renames, both sides are the same path


def units(patch: bytes) -> list[Unit]:
    """The patch cut into `Unit`s, in order; every line keeps its end."""
    lines = [ln + b"\n" for ln in patch.split(b"\n")]
    lines[-1] = lines[-1][:-1]
    out: list[Unit] = []
    header = False  # the current unit is a file's header that no hunk has joined yet
    for line in filter(None, lines):
        if line.startswith(b"diff --git "):
            out.append(Unit(_path(line), [line]))
            header = True
        elif line.startswith(b"@@") and out and not header:
            out.append(Unit(out[-1].path, [line]))
        elif out:
            out[-1].lines.append(line)
            header = header and not line.startswith(b"@@")
    return out


def _decoded(unit: Unit) -> tuple[list[str], str]:
    try:
        return [ln.decode() for ln in unit.lines], "utf-8"
    except UnicodeDecodeError:  # a file in another encoding: every byte as itself, and back
        return [ln.decode("latin-1") for ln in unit.lines], "latin-1"


def redact_unit(unit: Unit, redactor: Redactor) -> tuple[bytes, bool]:
    """The unit redacted, line for line; and whether a line of the base had to change (any
    line but an added one: the patch then no longer applies as is)."""
    lines, encoding = _decoded(unit)
    first_hunk = next((i for i, ln in enumerate(lines) if ln.startswith("@@")), len(lines))
    body = [i for i in range(first_hunk, len(lines)) if lines[i][:1] in (" ", "+", "-")]
    out = list(lines)
    for i in set(range(len(lines))) - set(body):
        ln = lines[i]
        text, end = ln.rstrip("\n"), ln[len(ln.rstrip("\n")):]
        if ln.startswith("\\"):  # `\ No newline at end of file`: git's
            continue
        hunk = _HUNK.match(text)  # its ranges are git's; the section name after them, the file's
        out[i] = (hunk.group(1) + redactor.redact_text(hunk.group(2)) if hunk else redactor.redact_text(text)) + end
    contents = [lines[i][1:].rstrip("\n") for i in body]
    if contents:
        whole = redactor.redact_text("\n".join(contents) + "\n")  # before the pieces: see merge_pieces
        alone = [redactor.redact_text(c) + "\n" for c in contents]
        for i, piece in zip(body, merge_pieces(whole, alone), strict=True):
            out[i] = lines[i][:1] + piece.replace("\n", "") + lines[i][len(lines[i].rstrip("\n")):]
    added = {i for i in body if lines[i].startswith("+")}
    altered = any(o != ln and i not in added for i, (o, ln) in enumerate(zip(out, lines, strict=True)))
    return "".join(out).encode(encoding), altered


def cut(parts: list[Unit], redactor: Redactor, max_bytes: int) -> tuple[bytes, list[str], bool]:
    """(the patch redacted, cut to `max_bytes` at a unit's boundary; the files left out, in
    part or whole; whether a line of the base was redacted in what is kept)."""
    kept: list[bytes] = []
    size, altered, left_out = 0, False, dict[str, None]()
    for unit in parts:
        if left_out:
            left_out[unit.path] = None
            continue
        data, changed = redact_unit(unit, redactor)
        if size + len(data) > max_bytes:
            left_out[unit.path] = None
            continue
        kept.append(data)
        size, altered = size + len(data), altered or changed
    return b"".join(kept), list(left_out), altered
