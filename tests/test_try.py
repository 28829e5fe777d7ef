"""The README's quick start, as written, on a fresh clone (issue 27): `make try`, then the
sample request, the founder's OK from the try-out's inbox, and the recap in the sink with its
screenshot; `make test` as written; and without keys, one line naming them while the request
waits with that reason.

The scripted Mistral and Anthropic APIs stand in for the keys, their URLs set as a user sets
them (SYNEDRE_MISTRAL_SERVER_URL, SYNEDRE_ANTHROPIC_BASE_URL). The clone's `.venv` is this
run's packages (a virtualenv whose site-packages are the running one's, the clone's code first)
rather than a fresh install from the network: `make` finds it up to date, as after `make venv`."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import pytest

from tests.services import stack
from tests.services.claude_api import ScriptedModel, bash, start_claude_api, text
from tests.services.llm_server import start_llm_server

pytestmark = [pytest.mark.integration, pytest.mark.slow]

HOURS = "<p>Horaires : du mardi au samedi de 7h à 19h30, le dimanche de 7h à 13h, fermé le lundi.</p>"
DRAFT = "Bonjour Marie, vos horaires sont sur la page contact. Bien à vous, Julien"
CONTRACT = {"ok": True, "tenant": "boulangerie-dupont", "routes_to_qa": ["/contact"], "commits": ["__SHA__"],
            "summary_md": "Les horaires sont sur la page contact.", "draft_reply_for_user": DRAFT}


def quick_start() -> list[str]:
    """The README's first code block, line by line, comments left out."""
    block = re.search(r"```sh\n(.*?)```", (stack.ROOT / "README.md").read_text(), re.S)
    assert block is not None
    return [line.split("#")[0].strip() for line in block.group(1).splitlines() if line.split("#")[0].strip()]


@pytest.fixture
def clone(tmp_path, redis_db):
    """A fresh clone of the committed tree; its `.venv` as `make venv` leaves it, with this run's
    packages. The environment is a newcomer's: no SYNEDRE_* but the test Redis database."""
    where = tmp_path / "synedre"
    subprocess.run(["git", "clone", "-q", str(stack.ROOT), str(where)], check=True, timeout=120)
    venv = where / ".venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    site = next((venv / "lib").glob("python3*/site-packages"))
    # the clone's code first, then the packages installed here (their own .pth files processed)
    (site / "synedre-try.pth").write_text(f"{where}\nimport site; site.addsitedir({sysconfig.get_path('purelib')!r})\n")
    for name, entry in (("synedre", "from synedre.cli import main"),
                        ("pytest", "from pytest import console_main as main")):
        script = venv / "bin" / name
        script.write_text(f"#!{venv}/bin/python\nimport sys\n{entry}\nsys.exit(main())\n")
        script.chmod(0o755)
    (venv / ".installed").touch()  # newer than the lock and pyproject.toml: up to date
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SYNEDRE_", "PYTEST_", "PYTHON"))}
    env.update(SYNEDRE_BROKER_URL=stack.TEST_REDIS_URL, COLUMNS="200")
    yield where, env
    subprocess.run([str(venv / "bin" / "synedre"), "db", "stop"], cwd=where, env=env, capture_output=True, timeout=60)


class Try:
    """`make try` in the background, as in a terminal: Ctrl-C goes to its process group."""

    def __init__(self, where: Path, env: dict[str, str], argv: list[str]):
        self.where, self.env = where, env
        self.out = where.parent / "make-try.log"
        self.proc = subprocess.Popen(argv, cwd=where, env=env, stdout=open(self.out, "wb"),
                                     stderr=subprocess.STDOUT, start_new_session=True)

    def output(self) -> str:
        return self.out.read_text(errors="replace")

    def wait_for(self, needle: str, timeout: float) -> None:
        def seen() -> bool:
            if self.proc.poll() is not None:
                raise AssertionError(f"make try exited {self.proc.returncode}:\n{self.output()[-4000:]}")
            return needle in self.output()
        stack.wait_for(seen, timeout, f"{needle!r} from make try", interval=0.5)

    def synedre(self, *argv: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(self.where / ".venv" / "bin" / "synedre"), *argv], cwd=self.where, env=self.env,
                              capture_output=True, text=True, timeout=120)

    def ctrl_c(self) -> None:
        """What a terminal's Ctrl-C does: SIGINT to make and to `synedre try run`; make then dies
        of it (as it does in a terminal), once the try-out stopped everything it started."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGINT)
            try:
                self.proc.wait(120)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(30)

    def stopped_cleanly(self) -> bool:
        out = self.output()
        return self.proc.returncode in (0, -signal.SIGINT) and "fleet_stopped" in out and \
            "embedded database stopped" in out and "Traceback" not in out


def inbox(t: Try) -> list[tuple[int, str]]:
    """(number, kind) of each mail `synedre try inbox` lists."""
    listed = t.synedre("try", "inbox")
    assert listed.returncode == 0, listed.stderr
    return [(int(m[1]), m[2]) for m in re.finditer(r"^\s*(\d+)\s.*?\s(recap|alert|approval\S*|mail)\s+message",
                                                    listed.stdout, re.M)]


@pytest.mark.timeout(600)
def test_the_quick_start_on_a_fresh_clone_ends_in_a_recap_with_its_screenshot(clone):
    where, env = clone
    steps = quick_start()
    assert steps[:2] == ["make try", "make test"]
    mistral = start_llm_server(lambda body, path: json.dumps(
        {"intent": "run", "complexity": "plan", "confidence": 0.93, "rationale": "a change to the contact page"})
        if path.endswith("/chat/completions") else None)
    sha = '"\'"$(git rev-parse --short HEAD)"\'"'
    agent = start_claude_api(ScriptedModel([
        [bash(f"sed -i 's|</form>|</form>{HOURS}|' site/contact.html && git commit -qam 'contact: opening hours'")],
        [bash(f"printf '%s' '{json.dumps(CONTRACT).replace(chr(34) + '__SHA__' + chr(34), sha)}'"
              " > \"$SYNEDRE_CONTRACT_PATH\"")],
        [text("Done.")]]))
    env = {**env, "SYNEDRE_MISTRAL_API_KEY": "try-key", "SYNEDRE_MISTRAL_SERVER_URL": mistral.url,
           "SYNEDRE_ANTHROPIC_API_KEY": "try-key", "SYNEDRE_ANTHROPIC_BASE_URL": agent.url}
    t = Try(where, env, steps[0].split())
    try:
        t.wait_for("send the sample request", 240)
        t.wait_for("idle_watching", 120)
        assert "no LLM key" not in t.output()
        assert re.search(r"scanner +clamd on 127\.0\.0\.1:\d+, ", t.output())  # attachments are scanned
        sent = t.synedre("try", "send")
        started = time.monotonic()
        assert sent.returncode == 0 and "delivered the sample request" in sent.stdout, sent.stderr

        # the client's first launch waits for the founder's OK: he gives it from the try-out's inbox
        approval = stack.wait_for(lambda: next((n for n, kind in inbox(t) if kind == "approval"), None), 90,
                                  "the approval request in the sink", interval=1)
        approved = t.synedre("try", "inbox", str(approval), "--approve")
        assert approved.returncode == 0 and "approved, handed to spawn" in approved.stdout, approved.stderr

        recap = stack.wait_for(lambda: next((n for n, kind in inbox(t) if kind == "recap"), None), 150,
                               "the recap in the sink", interval=1)
        took = time.monotonic() - started
        assert took < 120, took
        shown = t.synedre("try", "inbox", str(recap))
        assert shown.returncode == 0 and "/contact : OK" in shown.stdout and DRAFT in shown.stdout, shown.stdout
        images = re.search(r"^images: (.+)$", shown.stdout, re.M)
        assert images is not None, shown.stdout
        shot = Path(images[1].split(", ")[0])
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"  # its screenshot, saved beside the mail
        assert (where / ".synedre" / "try" / "sink" / f"{recap:04d}.eml").is_file()  # the mail as a file
        # the agent's work is on the client's pre-production branch, and served
        log = subprocess.run(["git", "-C", str(where / ".synedre/try/client/repo"), "log", "--format=%s", "preprod"],
                             capture_output=True, text=True, check=True).stdout
        assert "contact: opening hours" in log
    finally:
        t.ctrl_c()
        mistral.stop()
        agent.stop()
    assert t.stopped_cleanly(), t.output()[-3000:]

    # `make test`, as written (narrowed to one file through pytest's own variable)
    # (--basetemp: without one pytest makes /tmp/pytest-of-root 0700 again, and the PostgreSQL
    # servers of this run, whose user walks through it, would lose their data directories)
    narrowed = f"tests/test_readme.py --basetemp={where.parent / 'nested-basetemp'}"
    tested = subprocess.run(steps[1].split(), cwd=where, env={**env, "PYTEST_ADDOPTS": narrowed},
                            capture_output=True, text=True, timeout=300)
    assert tested.returncode == 0 and " passed" in tested.stdout, tested.stdout[-3000:] + tested.stderr[-3000:]


@pytest.mark.timeout(400)
def test_without_keys_one_line_names_both_and_the_request_waits_with_that_reason(clone):
    where, env = clone
    t = Try(where, env, quick_start()[0].split())
    try:
        t.wait_for("send the sample request", 240)
        t.wait_for("idle_watching", 120)
        named = [line for line in t.output().splitlines()
                 if "SYNEDRE_MISTRAL_API_KEY" in line and "SYNEDRE_ANTHROPIC_API_KEY" in line]
        assert len(named) == 1 and named[0].startswith("warning: no LLM key: set SYNEDRE_MISTRAL_API_KEY"), named
        sent = t.synedre("try", "send")
        assert sent.returncode == 0, sent.stderr
        assert "SYNEDRE_MISTRAL_API_KEY" in sent.stderr and "SYNEDRE_ANTHROPIC_API_KEY" in sent.stderr

        def waiting() -> str | None:
            rows = json.loads(t.synedre("inspect", "--all", "--json").stdout or "[]")
            return rows[0]["waiting_reason"] if rows and rows[0]["waiting_reason"] else None
        reason = stack.wait_for(waiting, 60, "the request to wait", interval=1)
        assert "LLM unavailable" in reason and "no key (SYNEDRE_MISTRAL_API_KEY)" in reason, reason
        shown = t.synedre("inspect", "1").stdout
        # the attempt it shows depends on how long the calls above took: that it counts them is the point
        assert re.search(r"waiting: retry \d+/", shown) and "SYNEDRE_MISTRAL_API_KEY" in shown, shown
    finally:
        t.ctrl_c()
    assert t.stopped_cleanly(), t.output()[-3000:]
