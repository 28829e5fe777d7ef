"""The baseline for classify_throughput: the same hops as the real stages from scan to
materialize, on the same queues, doing nothing."""
from synedre.pipeline import STAGES
from tasks.app import app

HOPS = [s.queue for s in STAGES if s.group in ("read", "classify")]  # scan, ocr, classify, materialize
DONE_KEY = "bench:noop:done"


@app.task(name="bench.noop", ignore_result=True)
def noop(message_id: int, hop: int = 0) -> None:
    if hop + 1 < len(HOPS):
        noop.apply_async(args=[message_id, hop + 1], queue=HOPS[hop + 1])
    else:
        from synedre import kv
        kv.client().incr(DONE_KEY)
