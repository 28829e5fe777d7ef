"""The agent roster (SPEC §2): one function maps families to rings, `synedre agents` shows
the stored orbit next to it, `--check` finds where they drifted, domains route to agents."""
from __future__ import annotations

import json

import psycopg
import pytest
from typer.testing import CliRunner

from synedre.agents import FAMILY_RING, RosterAgent, RosterError, display_ring
from synedre.cli import app
from synedre.config import get_settings
from synedre.log import configure

PLANTED = "planted-auditrice"


def agent(family: str, orbite: int, codename: str = "x") -> RosterAgent:
    return RosterAgent(codename, "X", "rôle", family, orbite, True, ())


def test_the_family_ring_mapping_is_the_spec_s():
    assert FAMILY_RING == {"direction": 1, "cadrage": 2, "execution": 2, "validation": 3}
    assert [display_ring(f) for f in ("direction", "cadrage", "execution", "validation")] == [1, 2, 2, 3]
    with pytest.raises(RosterError):
        display_ring("marketing")


def test_orbit_zero_agrees_only_in_direction_and_other_orbits_must_equal_the_ring():
    assert agent("direction", 0).orbit_agrees
    assert not agent("validation", 0).orbit_agrees
    assert agent("execution", 2).orbit_agrees
    assert not agent("execution", 3).orbit_agrees
    assert agent("validation", 3).as_record()["ring"] == 3


@pytest.fixture
def planted(db):
    """A validation agent stored on orbit 1: the drift `--check` must find."""
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("DELETE FROM synedre.agents WHERE codename = %s", (PLANTED,))
        conn.execute("INSERT INTO synedre.agents (codename, nickname, role, group_name, orbite, active,"
                     " prompt_domains) VALUES (%s, 'Auditrice', 'Audit planté', 'validation', 1, false,"
                     " ARRAY['faq'])", (PLANTED,))
    yield db
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("DELETE FROM synedre.agents WHERE codename = %s", (PLANTED,))


def run(*args: str):
    try:
        return CliRunner().invoke(app, ["agents", *args], catch_exceptions=False)
    finally:  # the command configured logging onto CliRunner's stderr, closed by now
        s = get_settings()
        configure(s.log_format, s.log_level)


def test_roster_lists_every_agent_with_stored_orbit_and_display_ring(db):
    result = run("--json")
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    by = {r["codename"]: r for r in rows}
    assert (by["atlas"]["orbite"], by["atlas"]["ring"], by["atlas"]["family"]) == (0, 1, "direction")
    assert rows[0]["codename"] == "atlas"  # orbit 0 first, then by ring
    assert set(by["contenu"]) >= {"nickname", "role", "family", "orbite", "ring", "active", "prompt_domains"}
    assert by["contenu"]["prompt_domains"] == ["content", "faq"]
    assert all(r["ring"] == FAMILY_RING[r["family"]] for r in rows)


def test_roster_table_shows_codename_nickname_and_both_orbits(db):
    result = run("--family", "validation")
    assert result.exit_code == 0, result.output
    assert "Pasteur" in result.stdout and "qa-audio" in result.stdout
    assert "backend" not in result.stdout


def test_check_finds_a_planted_orbit_family_disagreement_and_exits_non_zero(planted):
    result = run("--check", "--family", "validation", "--json")
    assert result.exit_code == 1
    flagged = {r["codename"]: r for r in json.loads(result.stdout)}
    assert PLANTED in flagged
    assert (flagged[PLANTED]["orbite"], flagged[PLANTED]["ring"], flagged[PLANTED]["orbit_agrees"]) == (1, 3, False)
    assert "qa-audio" not in flagged  # validation on orbit 3 agrees
    assert PLANTED in result.stderr


def test_check_exits_zero_on_the_seeded_roster_whose_orbits_follow_their_family(db):
    result = run("--check", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == []
    agents = json.loads(run("--json").stdout)
    assert len(agents) >= 15 and all(a["orbit_agrees"] for a in agents)
    assert all(a["orbite"] == display_ring(a["family"]) for a in agents if a["codename"] != "atlas")


def test_check_exits_zero_when_every_orbit_agrees(db):
    result = run("--check", "--family", "direction")
    assert result.exit_code == 0, result.output
    assert "agrees" in result.stdout


def test_domain_faq_resolves_to_the_configured_active_agent(planted):
    from synedre import db as database
    from synedre.agents import route_domain

    with database.transaction() as conn:
        routed = route_domain(conn, "faq")
    assert routed is not None and routed.codename == "contenu"  # the planted one is inactive
    result = run("--domain", "faq", "--json")
    assert result.exit_code == 0, result.output
    rows = {r["codename"]: r for r in json.loads(result.stdout)}
    assert set(rows) == {"contenu", PLANTED}
    assert rows["contenu"]["routed"] is True and rows[PLANTED]["routed"] is False
    table = run("--domain", "faq")
    assert "domain faq -> contenu (Colette)" in table.stdout


def test_unknown_domain_or_family_is_refused(db):
    assert run("--domain", "blog").exit_code == 2
    assert run("--family", "marketing").exit_code == 2
