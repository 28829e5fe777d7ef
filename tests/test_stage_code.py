"""A worker loads the stage code of the queues it consumes, and only that (tasks/_common.StageCode):
the classify worker carries no browser, no DKIM and no agent code, so it starts sooner and smaller."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from synedre.pipeline import STAGES
from tests.services import stack

pytestmark = pytest.mark.unit

PROBE = """
import gc, json, sys
from types import SimpleNamespace
from tasks.app import app
app.loader.import_default_modules()
from tasks import _common
before = sorted(m for m in sys.modules if m.startswith(("synedre.stages.", "playwright", "dkim")))
consumed = None if sys.argv[1] == "-" else dict.fromkeys(sys.argv[1].split(","))
_common._load_stage_code(SimpleNamespace(app=SimpleNamespace(conf=app.conf, amqp=SimpleNamespace(
    queues=SimpleNamespace(consume_from=consumed)))))
after = sorted(m for m in sys.modules if m.startswith(("synedre.stages.", "playwright", "dkim")))
print(json.dumps({"tasks": sorted(t for t in app.tasks if t.startswith("synedre.")), "before": before,
                  "frozen": gc.get_freeze_count(), "after": after, "routes": sorted(app.conf.task_routes),
                  "code": {c.name: c.tasks for c in _common.StageCode.registered}}))
"""


def loaded(queues: str) -> dict:
    out = subprocess.run([sys.executable, "-c", PROBE, queues], cwd=stack.ROOT, capture_output=True, text=True,
                         timeout=60, check=True)
    return json.loads(out.stdout)


def test_every_task_is_registered_without_any_stage_s_code_and_a_worker_loads_its_own_only():
    classify = loaded("classify,materialize")
    assert {"synedre.classify", "synedre.qa_route", "synedre.spawn", "synedre.poll", "synedre.recap"} \
        <= set(classify["tasks"])  # beat, Flower and `celery call` see every task
    assert classify["before"] == []
    assert classify["frozen"] > 10_000  # what the pool's children inherit, out of the collector's reach
    assert {f"synedre.{s.name}" for s in STAGES} <= set(classify["tasks"])  # every group the fleet starts has its tasks
    for module, tasks in classify["code"].items():  # each names tasks that exist and are routed
        assert tasks and set(tasks) <= set(classify["tasks"]) & set(classify["routes"]), module
    assert {"synedre.stages.classify", "synedre.stages.materialize"} <= set(classify["after"])
    assert not [m for m in classify["after"] if m.startswith(("playwright", "dkim", "synedre.stages.spawn",
                                                              "synedre.stages.qa"))]
    qa = loaded("qa")
    assert "synedre.stages.qa" in qa["after"] and any(m.startswith("playwright") for m in qa["after"])
    assert "synedre.stages.spawn" not in qa["after"] and "synedre.stages.classify" not in qa["after"]
    everything = loaded("-")  # a worker started without -Q consumes every queue: all of it, at start
    assert {"synedre.stages.spawn", "synedre.stages.qa", "synedre.stages.poll", "synedre.stages.recap"} \
        <= set(everything["after"])


def test_the_fleet_starts_beat_and_its_workers_without_celery_s_command_line():
    from synedre import fleet

    argvs = {c.name: c.argv for c in fleet.children()}
    # the supervisor reads the groups without loading the tasks (a worker's memory it would hold idle)
    probe = ("import sys; from synedre import fleet; fleet.children();"
             " print(any(m.startswith('tasks') for m in sys.modules))")
    assert subprocess.run([sys.executable, "-c", probe], cwd=stack.ROOT, capture_output=True, text=True, timeout=60,
                          check=True).stdout.strip() == "False"
    assert argvs["beat"][1:4] == ["-m", "tasks", "beat"]
    assert all(argv[1:4] == ["-m", "tasks", "worker"] for name, argv in argvs.items() if name not in ("beat", "idle"))
