"""The founder sees what changed (issue 28): the recap's table of the files a launch changed
with their lines added and removed, its branch and commits, and its patch attached —
redacted, applying with `git apply --check` where the agent started, cut to a size with a
note; and a follow-up's approval request shows what the previous work changed.

End to end on real services: the real `claude` CLI against the scripted Messages API, the
client's git repository, the spawn, deploy and recap workers, the mail facade to Dovecot and
aiosmtpd (tests/orchestrate/test_close_the_loop.py's `loop`); the cap through the recap
stage on a real repository (tests/orchestrate/test_recap_content.py's `env`); the follow-up
through poll, classify, spawn and approval on live workers (tests/approvals/test_steering_e2e.py's
`steer`), the founder's DKIM-signed reply to the real recap.
"""
from __future__ import annotations

import json
import re
import subprocess
from email.message import EmailMessage
from html import unescape
from html.parser import HTMLParser
from pathlib import Path

import psycopg
import pytest
from psycopg.types.json import Jsonb

from tests.approvals.test_steering_e2e import deliver, dkim_key, msgid, reply, steer  # noqa: F401 - fixtures
from tests.orchestrate.test_close_the_loop import loop, q, status  # noqa: F401 - the fixture
from tests.orchestrate.test_recap_content import env, message, plain, the_mail  # noqa: F401 - the fixture
from tests.services import stack
from tests.services.claude_api import ScriptedModel, bash, text
from tests.services.stack import git
from tests.spawn.test_launch_e2e import make_launchable

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

STRIPE = "sk_live_4eC39HqLyjWDarjtT1zdp7dcQ"  # a payment key the agent wrote into an added line
THREE_FILES = ("sed -i 's/Envoyer/Envoyer le message/' site/contact.html && "
               "printf '<p>Depuis 1949.</p>\\n<p>Toujours.</p>\\n' >> site/about.html && mkdir -p site/js && "
               f"printf \"const stripe = '%s';\\nexport default stripe;\\n\" '{STRIPE}' > site/js/pay.js && "
               "git add site/contact.html site/about.html site/js/pay.js && git commit -qm 'contact, about, payment'")


class _Rows(HTMLParser):
    """Each table row of an HTML part as the texts of its cells."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.rows: list[list[str]] = []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        if tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None and self.rows:
            self.rows[-1].append("".join(self._cell).strip())
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def rows(msg: EmailMessage) -> list[list[str]]:
    found = _Rows()
    found.feed(msg.get_body(("html",)).get_content())
    return found.rows


def patches(msg: EmailMessage) -> dict[str, bytes]:
    return {p.get_filename(): p.get_payload(decode=True) for p in msg.iter_attachments()
            if (p.get_filename() or "").endswith(".patch")}


def applies_at(repo: Path, sha: str, patch: bytes, tmp: Path) -> subprocess.CompletedProcess:
    """`git apply --check` of `patch` in a fresh checkout of `repo` at `sha`."""
    where = tmp / f"check-{sha[:8]}"
    subprocess.run(["git", "clone", "-q", str(repo), str(where)], check=True, capture_output=True, timeout=60)
    git(where, "checkout", "-q", sha)
    (tmp / "the.patch").write_bytes(patch)
    return subprocess.run(["git", "-C", str(where), "apply", "--check", str(tmp / "the.patch")], capture_output=True,
                          text=True, timeout=30)


# ---- acceptance 4: three files, their counts, the patch attached, applying, redacted ----------

def lean_contract() -> dict:
    body = {"ok": True, "tenant": "acme", "commits": ["__SHA__"], "summary_md": "Contact, à propos et paiement."}
    js = json.dumps(body).replace('"__SHA__"', '"\'"$(git rev-parse --short HEAD)"\'"')
    return bash(f"printf '%s' '{js}' > \"$SYNEDRE_CONTRACT_PATH\"")


@pytest.mark.skipif(not Path("/usr/bin/git").exists(), reason="git is missing")
def test_a_three_file_change_shows_its_counts_attaches_a_patch_that_applies_and_hides_the_secret(loop):  # noqa: F811
    url, repo = loop["url"], loop["site"].repo
    before = git(repo, "rev-parse", "main")
    mid, = make_launchable(url, loop["tmp"], complexity="leger", tag="changes")
    loop["start"](ScriptedModel([[bash(THREE_FILES)], [lean_contract()], [text("Done.")]]))
    from tasks.app import app
    app.send_task("synedre.spawn", args=[mid])
    stack.wait_for(lambda: status(url, mid) in ("actioned", "spawn_failed", "merge_failed", "orchestration_failed"),
                   240, "the launch and its recap", interval=0.5)
    assert status(url, mid) == "actioned", q(url, "SELECT event, detail FROM synedre.audit_log"
                                                  " WHERE message_id = %s ORDER BY id", mid)
    msg = loop["smtp"].wait_for(1, timeout=30)[0].message
    head = git(repo, "rev-list", "--reverse", f"{before}..main").splitlines()  # what the merge brought: its commit
    counts = {p: (a, r) for a, r, p in (ln.split("\t") for ln in git(repo, "diff", "--numstat", before,
                                                                     "main").splitlines())}
    assert counts == {"site/about.html": ("2", "0"), "site/contact.html": ("1", "1"), "site/js/pay.js": ("2", "0")}

    # the HTML's table: each file with its lines added and removed; the branch and the commit
    table = rows(msg)
    for path, (added, removed) in counts.items():
        assert [path, f"+{added}", f"−{removed}"] in table, table
    html = msg.get_body(("html",)).get_content()
    branch = f"synedre/msg-{mid}-a1"
    assert branch in html and head[-1][:12] in html and "contact, about, payment" in html
    body = plain(msg)
    assert f"Branche {branch} (itération 1), 1 commit(s) : {head[-1][:12]} « contact, about, payment »" in body
    assert "+1 −1  site/contact.html" in body and "3 fichier(s) : +5 −1" in body, body

    # the patch: attached, applying where the agent started, the secret hidden, line for line
    patch = patches(msg)[f"msg-{mid}-a1.patch"]
    assert applies_at(repo, before, patch, loop["tmp"]).returncode == 0
    raw = git(repo, "diff", before, "main")
    assert len(patch.decode().splitlines()) == len(raw.splitlines())
    assert "+const stripe = '[REDACTED:" in patch.decode(), patch.decode()
    assert STRIPE.encode() not in msg.as_bytes() and STRIPE in raw  # in the repository, never in the mail
    (base, head_sha, stored), = q(url, "SELECT c.base_sha, c.head_sha, c.patch FROM synedre.launch_changes c"
                                       " JOIN synedre.launches l ON l.id = c.launch_id WHERE l.message_id = %s", mid)
    assert (base, head_sha, bytes(stored)) == (before, head[-1], patch)


# ---- the cap: a note in the recap, the patch cut at a hunk boundary -------------------------

def test_a_patch_over_the_cap_is_cut_at_a_hunk_boundary_and_the_recap_says_so(env, monkeypatch):  # noqa: F811
    from synedre import db, secrets
    from synedre.config import get_settings
    from synedre.db import changes as stored
    from synedre.spawn import workspace
    from synedre.spawn.changes import of_branch
    from synedre.stages import recap
    from tests.orchestrate.test_recap_content import client

    repo = env["tmp"] / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    big = "".join(f"ligne {i}\n" for i in range(300))
    for name, content in (("a.txt", big), ("b.txt", "b\n"), ("c.txt", "c\n")):
        (repo / name).write_text(content)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "base")
    base = git(repo, "rev-parse", "HEAD")
    git(repo, "checkout", "-qb", "synedre/msg-cap-a1")
    (repo / "a.txt").write_text(big.replace("ligne 5\n", "ligne cinq\n").replace("ligne 250\n", "ligne 250 bis\n"))
    (repo / "b.txt").write_text("b\nbb\n")
    (repo / "c.txt").write_text("c\ncc\n")
    git(repo, "commit", "-qam", "three files")
    from synedre.spawn.changes import units
    parts = units(subprocess.run(["git", "-C", str(repo), "diff", base, "HEAD"], capture_output=True, check=True,
                                 timeout=30).stdout)
    assert [u.path for u in parts] == ["a.txt", "a.txt", "b.txt", "c.txt"]
    first_hunk = len(b"".join(parts[0].lines)) + 20  # a.txt's header and first hunk fit; nothing after them
    monkeypatch.setenv("SYNEDRE_RECAP_PATCH_MAX_BYTES", str(first_hunk))
    get_settings.cache_clear()
    ws = workspace.Workspace(path=repo, branch="synedre/msg-cap-a1", repo=repo, base_branch="main", base_sha=base)
    taken = of_branch(ws, secrets.redactor(), get_settings().recap_patch_max_bytes)
    assert taken is not None

    client(env["url"], "http://127.0.0.1:9")
    mid = message(env, "report_due", [])
    with db.transaction() as conn:
        launch = conn.execute("SELECT id FROM synedre.launches WHERE message_id = %s", (mid,)).fetchone()["id"]
        conn.execute("UPDATE synedre.launches SET branch = %s WHERE id = %s", (ws.branch, launch))
        stored.record(conn, launch, taken.as_record())
    assert recap.run(mid).status == "actioned"
    msg = the_mail(env)
    body = plain(msg)
    whole = len(git(repo, "diff", base, "synedre/msg-cap-a1").encode()) + 1
    note = (f"Correctif coupé à {len(taken.patch)} octets sur {whole} (limite de taille) : laissé(s) de côté en tout "
            "ou partie : a.txt, b.txt, c.txt.")
    assert note in body, body
    assert note in re.sub(r"\s+", " ", unescape(msg.get_body(("html",)).get_content()))
    assert [["a.txt", "+2", "−2"], ["b.txt", "+1", "−0"], ["c.txt", "+1", "−0"]] == \
        [r for r in rows(msg) if r and r[0].endswith(".txt")]  # the table stays whole
    patch = patches(msg)["msg-cap-a1.patch"]
    assert 0 < len(patch) <= first_hunk and b"+ligne cinq" in patch and b"250 bis" not in patch
    assert applies_at(repo, base, patch, env["tmp"]).returncode == 0  # what is kept applies as far as it goes


# ---- a follow-up's approval request shows what the previous work changed -----------------------

def test_a_follow_up_waiting_for_approval_shows_the_previous_work_s_changes(steer):  # noqa: F811
    from synedre import db, secrets
    from synedre.config import Settings
    from synedre.db import changes as stored
    from synedre.spawn import workspace
    from synedre.spawn.changes import of_branch
    from synedre.stages import recap
    from synedre.stages.poll import ingest_one
    from tests.conftest import CORPUS

    s, url, repo = steer, steer["url"], steer["repo"]
    raw = (CORPUS / "cases" / "P02-client-direct-question.eml").read_bytes()
    raw = raw.replace(b"Message-ID: <", b"Message-ID: <recap-changes.", 1)
    first = ingest_one(raw, "atlas", 1, 4242, Settings(state_dir=s["tmp"]), lambda _: None)
    base = git(repo, "rev-parse", "preprod")
    branch = f"synedre/msg-{first}-a1"
    git(repo, "checkout", "-qb", branch)
    for name, content in (("README", "site\nplus\n"), ("contact.html", "<form></form>\n"), ("tel.js", "t\n")):
        (repo / name).write_text(content)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "formulaire de contact")
    git(repo, "checkout", "-q", "preprod")
    git(repo, "merge", "-q", "--ff-only", branch)
    taken = of_branch(workspace.Workspace(path=repo, branch=branch, repo=repo, base_branch="preprod", base_sha=base),
                      secrets.redactor(), 200_000)
    assert taken is not None
    contract = {"ok": True, "tenant": None, "routes_to_qa": [], "commits": [taken.head[:7]],
                "summary_md": "Le formulaire de contact est réparé.", "draft_reply_for_user": "Bonjour, c'est fait."}
    with psycopg.connect(url, autocommit=True) as conn:
        run = conn.execute("INSERT INTO synedre.runs (ref_type, ref_id, title, complexity) VALUES"
                           " ('atlas_inbox', %s, 't', 'leger') RETURNING id", (str(first),)).fetchone()[0]
        conn.execute("UPDATE synedre.email_states SET status = 'report_due', intent = 'run', complexity = 'leger',"
                     " confidence = 0.9, run_id = %s WHERE message_id = %s", (run, first))
        conn.execute("INSERT INTO synedre.launches (message_id, attempt, iteration, status, contract, branch,"
                     " system_prompt) VALUES (%s, 1, 1, 'succeeded', %s, %s, 'rich')", (first, Jsonb(contract), branch))
    with db.transaction() as conn:
        launch = conn.execute("SELECT id FROM synedre.launches WHERE message_id = %s", (first,)).fetchone()["id"]
        stored.record(conn, launch, taken.as_record())
    assert recap.run(first).status == "actioned"  # the real recap, that the founder answers
    recapped = s["smtp"].wait_for(1)[-1].message
    assert "formulaire de contact" in plain(recapped)

    more = reply(s, recapped, "Pouvez-vous aussi ajouter un champ téléphone ? SYN-CASE-P21")
    deliver(s, more)
    follow = stack.wait_for(lambda: q(url, "SELECT s.message_id FROM synedre.email_states s JOIN synedre.raw_messages"
                                           " r ON r.id = s.message_id WHERE r.message_id = %s", msgid(more)),
                            30, "the follow-up ingested")[0][0]
    stack.wait_for(lambda: q(url, "SELECT 1 FROM synedre.outbound_mail WHERE message_id = %s AND kind = 'approval'"
                                  " AND status = 'sent'", follow), 120, "the follow-up's request", interval=0.5)
    assert q(url, "SELECT follows_message_id, status FROM synedre.email_states WHERE message_id = %s", follow) == \
        [(first, "awaiting_approval")]
    request = next(m.message for m in s["smtp"].messages() if m.message["X-Synedre-Kind"] == "approval")
    body = request.get_body(("plain",)).get_content()
    fence = re.search(r"Ce que son travail a changé \(écrit par l'agent, entre les marques (\w+)\)", body)
    assert fence, body
    shown = body[fence.end():].split(f"----- début {fence[1]} -----", 1)[1].split(f"----- fin {fence[1]} -----", 1)[0]
    assert f"Cette demande fait suite à une précédente (message {first})" in body
    assert f"Branche {branch} (itération 1), 1 commit(s) : {taken.head[:12]} « formulaire de contact »" in shown
    for line in ("+1 −0  README", "+1 −0  contact.html", "+1 −0  tel.js", "3 fichier(s) : +3 −0"):
        assert line in shown, shown
    assert ".patch" not in body and not list(request.iter_attachments())  # the summary, not the patch
