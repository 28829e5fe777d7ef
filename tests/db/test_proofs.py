"""Proofs in PostgreSQL (issue 16, item 7): written once, keyed by their bytes; a host's
file is a cache that a missing or altered copy refills from the database."""
from __future__ import annotations

import io
import os
import stat

import psycopg
import pytest
from PIL import Image

from synedre import db as database
from synedre.db import proofs

pytestmark = [pytest.mark.timeout(60)]


def png(colour: str = "red") -> bytes:
    buf = io.BytesIO()
    # random pixels in a corner: every test's proof is new to the shared database
    im = Image.new("RGB", (16, 16), colour)
    for x in range(4):
        im.putpixel((x, 0), tuple(os.urandom(3)))
    im.save(buf, format="PNG")
    return buf.getvalue()


def rows(url: str, key: str) -> list[tuple]:
    with psycopg.connect(url) as conn:
        return conn.execute("SELECT kind, mime, size, content FROM synedre.proofs WHERE sha256 = %s",
                            (key,)).fetchall()


def test_the_same_bytes_stored_twice_make_one_row_under_one_key(db):
    data = png()
    with database.transaction() as conn:
        first = proofs.store(conn, data, "screenshot")
    with database.transaction() as conn:
        second = proofs.store(conn, data, "diff")  # another writer, the same bytes: written once
    assert first == second == proofs.key_of(data)
    assert rows(db, first) == [("screenshot", "image/png", len(data), data)]


def test_a_missing_cache_file_is_fetched_from_the_database(db, tmp_path):
    data = png("blue")
    with database.transaction() as conn:
        key = proofs.store(conn, data, "mockup")
    qa_host, recap_host = tmp_path / "qa-state", tmp_path / "recap-state"
    with database.transaction() as conn:
        path = proofs.local(conn, key, "check-7.png", state_dir=recap_host)
    assert path == recap_host.resolve() / "proofs" / key / "check-7.png"
    assert path.read_bytes() == data and not (qa_host / "proofs").exists()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert all(stat.S_IMODE(d.stat().st_mode) == 0o700 for d in (path.parent, path.parent.parent))
    assert [p.name for p in path.parent.iterdir()] == ["check-7.png"]  # no temporary file left behind


def test_a_cached_copy_is_read_without_the_database_and_an_altered_one_is_fetched_again(db, tmp_path):
    data = png("green")
    with database.transaction() as conn:
        key = proofs.store(conn, data, "screenshot")
        path = proofs.local(conn, key, "shot.png", state_dir=tmp_path)
    with psycopg.connect(db, autocommit=True) as conn:  # the row gone: only the cache can answer
        conn.execute("DELETE FROM synedre.proofs WHERE sha256 = %s", (key,))
    with database.transaction() as conn:
        assert proofs.local(conn, key, "shot.png", state_dir=tmp_path).read_bytes() == data
        path.write_bytes(b"not the proof")
        with pytest.raises(proofs.ProofError, match="not in the database"):
            proofs.local(conn, key, "shot.png", state_dir=tmp_path)
        proofs.store(conn, data, "screenshot")
        assert proofs.local(conn, key, "shot.png", state_dir=tmp_path).read_bytes() == data


def test_a_row_whose_key_is_not_its_content_hash_is_refused(db):
    data = png()
    with psycopg.connect(db) as conn, pytest.raises(psycopg.errors.CheckViolation, match="content_addressed"):
        conn.execute("INSERT INTO synedre.proofs (sha256, kind, mime, size, content) VALUES (%s, 'diff',"
                     " 'image/png', %s, %s)", ("0" * 64, len(data), data))


def test_a_key_is_checked_before_it_becomes_a_path_and_names_are_tamed(tmp_path):
    with pytest.raises(proofs.ProofError):
        proofs.cache_path("../../etc/passwd", "x.png", tmp_path)
    key = "a" * 64
    assert proofs.cache_path(key, "../../.hidden name.png", tmp_path).name == "hidden-name.png"
    assert proofs.cache_path(key, "", tmp_path).name == "proof"
    assert proofs.mime_of(b"\xff\xd8\xff\xe0rest") == "image/jpeg"
