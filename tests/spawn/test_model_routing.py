"""Model routing from data, with its precedence and the proxy health check."""
import psycopg
import pytest
from psycopg.rows import dict_row

from synedre.spawn import routing

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def conn(db):
    with psycopg.connect(db, row_factory=dict_row, autocommit=True) as c:
        c.execute("DELETE FROM synedre.model_routes WHERE client_id IS NOT NULL OR chantier_id IS NOT NULL")
        cid = c.execute("INSERT INTO synedre.clients (codename, name) VALUES ('glm-client', 'G') RETURNING id"
                        ).fetchone()["id"]
        c.execute("INSERT INTO synedre.tenant_topology (client_id, deploy_target, config) VALUES (%s, 'g', %s)",
                  (cid, '{"glm_allowed": true}'))
        c.execute("INSERT INTO synedre.model_routes (client_id, model, via_proxy, glm)"
                  " VALUES (%s, 'glm-4.6', 'http://127.0.0.1:9', true)", (cid,))
        ch = c.execute("INSERT INTO synedre.chantiers (codename, client_id, title) VALUES ('ch', %s, 't') RETURNING id",
                       (cid,)).fetchone()["id"]
        yield c, cid, ch


def test_default_when_nothing_applies(conn):
    c, _, _ = conn
    assert routing.resolve(c, None, None, lambda u: True) == routing.ModelRoute("sonnet", "default")


def test_client_glm_wins_when_its_proxy_is_healthy_else_native_with_reason(conn):
    c, cid, _ = conn
    assert routing.resolve(c, cid, None, lambda u: True).model == "glm-4.6"
    r = routing.resolve(c, cid, None, lambda u: False)
    assert (r.model, r.source) == ("sonnet", "default") and r.fallback_reason.startswith("proxy_unhealthy")
    assert routing.http_healthy("http://127.0.0.1:9", timeout_s=1) is False


def test_a_chantier_doctrine_vetoes_glm(conn):
    c, cid, ch = conn
    c.execute("INSERT INTO synedre.doctrines (chantier_id, title, body, veto_glm)"
              " VALUES (%s, 'no glm', 'x', true)", (ch,))
    r = routing.resolve(c, cid, ch, lambda u: True)
    assert r.model == "sonnet" and r.fallback_reason == "glm_vetoed_by_chantier_doctrine"


def test_a_client_without_authorisation_never_gets_glm(conn):
    c, cid, _ = conn
    c.execute("UPDATE synedre.tenant_topology SET config = '{\"glm_allowed\": false}' WHERE client_id = %s", (cid,))
    assert routing.resolve(c, cid, None, lambda u: True).model == "sonnet"
