"""Which model a launch uses (SPEC §8): data in synedre.model_routes, resolved per launch.

Precedence: the client's GLM authorisation > the chantier's doctrine (which may veto GLM
on the email path) > the recommended default. A route through a proxy is used only if
the proxy answers its health check; otherwise the native default, with the reason.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass

from synedre.db.types import Conn

DEFAULT_MODEL = "sonnet"


@dataclass(frozen=True)
class ModelRoute:
    model: str
    source: str  # default | client | chantier
    via_proxy: str | None = None
    fallback_reason: str | None = None

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Planned:
    route: ModelRoute
    default_model: str


def resolve(conn: Conn, client_id: int | None, chantier_id: int | None,
            healthy: Callable[[str], bool]) -> ModelRoute:
    return check_proxy(planned_route(conn, client_id, chantier_id), healthy)


def planned_route(conn: Conn, client_id: int | None, chantier_id: int | None) -> Planned:
    """The route the data says, before any network check (runs inside a transaction)."""
    row = conn.execute("SELECT model FROM synedre.model_routes WHERE client_id IS NULL AND chantier_id IS NULL"
                       ).fetchone()
    default = ModelRoute(row["model"] if row else DEFAULT_MODEL, "default")
    route = default
    glm_vetoed = chantier_id is not None and conn.execute(
        "SELECT 1 FROM synedre.doctrines WHERE chantier_id = %s AND veto_glm", (chantier_id,)).fetchone()
    if client_id is not None:
        r = conn.execute(
            """SELECT m.model, m.via_proxy FROM synedre.model_routes m
                 JOIN synedre.tenant_topology t ON t.client_id = m.client_id
                WHERE m.client_id = %s AND m.glm AND (t.config->>'glm_allowed')::boolean""",
            (client_id,)).fetchone()
        if r and not glm_vetoed:
            route = ModelRoute(r["model"], "client", r["via_proxy"])
        elif r:
            route = ModelRoute(default.model, "default", fallback_reason="glm_vetoed_by_chantier_doctrine")
    if route.source == "default" and chantier_id is not None:
        r = conn.execute("SELECT model, via_proxy, glm FROM synedre.model_routes WHERE chantier_id = %s",
                         (chantier_id,)).fetchone()
        if r and not (r["glm"] and glm_vetoed):
            route = ModelRoute(r["model"], "chantier", r["via_proxy"], route.fallback_reason)
    return Planned(route, default.model)


def check_proxy(p: Planned, healthy: Callable[[str], bool]) -> ModelRoute:
    """A proxied route only after its health check (network: never inside a transaction)."""
    if p.route.via_proxy and not healthy(p.route.via_proxy):
        return ModelRoute(p.default_model, "default", fallback_reason=f"proxy_unhealthy:{p.route.via_proxy}")
    return p.route


def http_healthy(url: str, timeout_s: float = 3.0) -> bool:
    import urllib.request

    try:
        with urllib.request.urlopen(url.rstrip("/") + "/health", timeout=timeout_s) as resp:
            return 200 <= resp.status < 300
    except Exception:  # unreachable, refused, timeout, bad status: all mean "not healthy"
        return False
