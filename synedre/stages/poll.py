"""One poll of one mailbox: UNSEEN -> stored rows -> next stage -> \\Seen, in that order."""
from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import psycopg
from imapclient import SEEN

from synedre import db, runner
from synedre.config import Settings, get_settings
from synedre.db import messages
from synedre.ingest import dkim_verify, mime
from synedre.log import log
from synedre.mailboxes import Mailbox
from synedre.pipeline import Status

# Bytes fetched per IMAP round trip, so a backlog of large messages stays flat in memory.
FETCH_BYTES = 32 * 1024 * 1024


@dataclass
class PollReport:
    mailbox: str
    uidvalidity: int = 0
    unseen: int = 0
    inserted: list[int] = field(default_factory=list)
    duplicates: int = 0
    failed_uids: list[int] = field(default_factory=list)



def _dnsfunc(settings: Settings):
    return dkim_verify.keys_file_lookup(settings.dkim_keys_file) if settings.dkim_keys_file else None


def _write_attachments(parsed: mime.ParsedMime, settings: Settings, label: str) -> str | None:
    if not parsed.attachments:
        return None
    root = settings.attachments_root.resolve()
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    directory = Path(tempfile.mkdtemp(prefix=f"{label}-", dir=root))  # mkdtemp: mode 0700
    for a in parsed.attachments:
        fd = os.open(directory / a.stored_name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(a.payload)
    return str(directory)


def _parse_failed(raw: bytes, base: dict[str, Any], origin: dict[str, Any], reason: mime.Reason,
                  error: str) -> messages.NewMessage:
    """Bytes nothing could be parsed from (too large, the parser raised, refused by the
    database): stored raw, with what a plain regex finds in the head."""
    mid, synthetic, sender, subject = mime.fallback_headers(raw)
    return messages.NewMessage(
        **base, message_id=mid, synthetic_id=synthetic, envelope_from=sender, subject=subject,
        headers=[], dkim_pass=False, status=Status.PARSE_FAILED, attachments_dir=None, attachments=[],
        audits=[("poll_inserted", origin), (str(Status.PARSE_FAILED), {"reason": reason, "error": error})])


def build(raw: bytes, mailbox: str, uidvalidity: int, uid: int, settings: Settings) -> messages.NewMessage:
    """The rows for one delivery. Never raises on bad input: it becomes `parse_failed`.

    A message one of `mime.REJECTIONS` refuses (no header block, no From:, a binary body)
    is stored with what was parsed but with no attachment files, no DKIM check and no
    next stage: `parse_failed` is terminal, so it never reaches the LLM.
    """
    base: dict[str, Any] = dict(mailbox=mailbox, uidvalidity=uidvalidity, uid=uid, raw=raw)
    origin: dict[str, Any] = {"uid": uid, "uidvalidity": uidvalidity, "size": len(raw)}
    if len(raw) > settings.max_message_bytes:
        return _parse_failed(raw, base, origin, mime.Reason.TOO_LARGE,
                             f"message larger than {settings.max_message_bytes} bytes")
    try:
        parsed = mime.parse(raw)
    except mime.MessageParseError as exc:
        return _parse_failed(raw, base, origin, mime.Reason.UNPARSEABLE, str(exc))
    origin = {**origin, "attachments": len(parsed.attachments), "synthetic_message_id": parsed.synthetic_id}
    defects: list[tuple[str, dict[str, Any]]] = []
    if parsed.defects or parsed.unknown_charsets:
        detail: dict[str, Any] = {"defects": parsed.defects}
        if parsed.unknown_charsets:
            detail["unknown_charsets"] = parsed.unknown_charsets
        defects.append(("parse_defects", detail))
    fields: dict[str, Any] = dict(
        message_id=parsed.message_id, synthetic_id=parsed.synthetic_id, envelope_from=parsed.envelope_from,
        subject=parsed.subject, headers=parsed.headers)
    refused = mime.rejection(parsed)
    if refused is not None:
        return messages.NewMessage(
            **base, **fields, dkim_pass=False, status=Status.PARSE_FAILED, attachments_dir=None,
            attachments=[], audits=[("poll_inserted", origin), *defects,
                                    (str(Status.PARSE_FAILED), {"reason": refused.reason, "error": refused.error})])
    dkim = dkim_verify.verify(raw, parsed.from_values, _dnsfunc(settings), settings.dns_timeout_s)
    return messages.NewMessage(
        **base, **fields, dkim_pass=dkim.passed, status=Status.RECEIVED,
        attachments_dir=_write_attachments(parsed, settings, f"{mailbox}-{uidvalidity}-{uid}"),
        attachments=[{"idx": a.idx, "filename": a.filename, "content_type": a.content_type,
                      "size": len(a.payload), "sha256": a.sha256, "stored_name": a.stored_name}
                     for a in parsed.attachments],
        audits=[("poll_inserted", {**origin, "dkim": dkim.reason}), *defects])


def _store(new: messages.NewMessage) -> int | None:
    try:
        with db.transaction() as conn:
            mid = messages.insert_raw(conn, new)
            if mid is not None:
                runner.admit(conn, mid, new.status, new.attachments_dir)
                messages.insert_parts(conn, mid, new)
            return mid
    except Exception:
        if new.attachments_dir:
            shutil.rmtree(new.attachments_dir, ignore_errors=True)
        raise


def ingest_one(raw: bytes, mailbox: str, uidvalidity: int, uid: int, settings: Settings,
               enqueue: Callable[[int], None]) -> int | None:
    """Store one delivery exactly once and hand it to the next stage. Returns the new id."""
    with db.transaction() as conn:
        existing = messages.find_existing(conn, mailbox, uidvalidity, uid,
                                     mime.fallback_headers(raw)[0])
    new = None
    if existing is None:
        new = build(raw, mailbox, uidvalidity, uid, settings)
        try:
            new_id = _store(new)
        except psycopg.DataError as exc:
            # Something in the parsed fields PostgreSQL refuses: keep the bytes anyway.
            log.warning("store_parsed_failed", uid=uid, error=type(exc).__name__)
            new = _parse_failed(raw, dict(mailbox=mailbox, uidvalidity=uidvalidity, uid=uid, raw=raw),
                                {"uid": uid, "uidvalidity": uidvalidity, "size": len(raw)},
                                mime.Reason.STORAGE_REFUSED,
                                f"storage refused parsed fields: {type(exc).__name__}")
            new = replace(new, envelope_from=None, subject=None)
            new_id = _store(new)
        if new_id is not None:
            log.info("poll_inserted", message=new_id, uid=uid, status=new.status)
            if new.status == Status.RECEIVED:
                enqueue(new_id)
            return new_id
        with db.transaction() as conn:  # lost a race: the other poll stored it first
            existing = messages.find_existing(conn, mailbox, uidvalidity, uid, new.message_id)
    if existing is None:
        raise RuntimeError(f"uid {uid}: insert refused but no existing row found")
    if existing.same_uid:
        # The same delivery again: a poll died after commit. The next stage is
        # idempotent, so re-enqueueing a message still at `received` loses nothing.
        if existing.status == Status.RECEIVED:
            enqueue(existing.id)
    else:
        with db.transaction() as conn:
            messages.audit(conn, existing.id, "poll_duplicate",
                      uid=uid, uidvalidity=uidvalidity, mailbox=mailbox)
    log.info("poll_duplicate", message=existing.id, uid=uid, same_uid=existing.same_uid)
    return None


def _chunks(sizes: dict[int, int], batch: int) -> Iterator[list[int]]:
    chunk: list[int] = []
    total = 0
    for uid in sorted(sizes):
        if chunk and (len(chunk) >= batch or total + sizes[uid] > FETCH_BYTES):
            yield chunk
            chunk, total = [], 0
        chunk.append(uid)
        total += sizes[uid]
    if chunk:
        yield chunk


def poll(mailbox: Mailbox, enqueue: Callable[[int], None], settings: Settings | None = None,
         heartbeat: Callable[[], object] = lambda: None) -> PollReport:
    settings = settings or get_settings()
    report = PollReport(mailbox.id)
    with mailbox.session(settings.imap_timeout_s) as client:
        info = client.select_folder(mailbox.folder)
        report.uidvalidity = uidvalidity = int(info[b"UIDVALIDITY"])
        uids = client.search(["UNSEEN"])
        report.unseen = len(uids)
        if not uids:
            return report
        sizes = {uid: int(d.get(b"RFC822.SIZE", 0))
                 for uid, d in client.fetch(uids, ["RFC822.SIZE"]).items()}
        for chunk in _chunks(sizes, settings.poll_batch):
            done = []
            for uid, data in client.fetch(chunk, ["BODY.PEEK[]"]).items():
                heartbeat()
                raw = data.get(b"BODY[]")
                if raw is None:
                    continue  # expunged meanwhile
                try:
                    new_id = ingest_one(raw, mailbox.id, uidvalidity, uid, settings, enqueue)
                except psycopg.OperationalError:
                    raise  # the database is down: retry the whole poll later
                except Exception as exc:
                    # Never let one message block the ones after it; it stays UNSEEN and
                    # is retried by the next poll.
                    log.error("poll_uid_failed", uid=uid, error=f"{type(exc).__name__}: {exc}"[:300])
                    report.failed_uids.append(uid)
                    continue
                if new_id is None:
                    report.duplicates += 1
                else:
                    report.inserted.append(new_id)
                done.append(uid)
            if done:
                heartbeat()
                client.add_flags(done, [SEEN])  # only after the rows are committed
    return report


def run_coalesced(mailbox: Mailbox, enqueue: Callable[[int], None],
                  settings: Settings | None = None) -> PollReport | None:
    """Poll under a per-mailbox Redis lock; a poll asked for meanwhile runs right after.

    Concurrent triggers (beat, IDLE, `celery call`) therefore never poll one mailbox
    twice at once, and none is lost: a trigger that finds the lock taken leaves a flag
    the holder honours before it leaves (and, should the holder be killed first, looks again
    once the lock's time is over: tasks/poll.py, `still_asked`, `lock_left_s`). Returns None
    when another poll holds the lock.
    """
    from synedre import kv

    settings = settings or get_settings()
    r = kv.client()
    key, asked = _lock_key(mailbox), _asked_key(mailbox)
    r.set(asked, 1, ex=600)
    # A short TTL renewed after every message: a killed poller blocks others briefly.
    lock = r.lock(key, timeout=settings.poll_lock_ttl_s, blocking=False, thread_local=False)
    report = None
    while lock.acquire(token=uuid.uuid4().hex):
        try:
            r.delete(asked)
            report = poll(mailbox, enqueue, settings, heartbeat=lock.reacquire)
        finally:
            try:
                lock.release()
            except Exception:  # expired while we worked: the next holder owns it now
                pass
        if not r.delete(asked):
            break
    return report


def _lock_key(mailbox: Mailbox) -> str:
    return f"synedre:poll:{mailbox.id}"


def _asked_key(mailbox: Mailbox) -> str:
    return f"{_lock_key(mailbox)}:again"


def still_asked(mailbox: Mailbox) -> bool:
    """Whether a poll asked for while the lock was held is still waiting (`run_coalesced`'s
    flag): its holder deletes the flag when it polls again for it."""
    from synedre import kv

    return bool(kv.client().exists(_asked_key(mailbox)))


def lock_left_s(mailbox: Mailbox) -> float:
    """How long the mailbox's poll lock has left (0 when free): a holder killed mid-poll keeps
    it this long."""
    from synedre import kv

    left: int = kv.client().pttl(_lock_key(mailbox))  # type: ignore[assignment]  # sync client
    return max(0.0, left / 1000)
