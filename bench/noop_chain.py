"""The baseline for classify_throughput: the same four hops as the real stages, doing nothing."""
from tasks.app import app

HOPS = ["scan", "ocr", "classify", "materialize"]


@app.task(name="bench.noop", ignore_result=True)
def noop(message_id: int, hop: int = 0) -> None:
    if hop + 1 < len(HOPS):
        noop.apply_async(args=[message_id, hop + 1], queue=HOPS[hop + 1])
    else:
        from synedre import kv
        kv.client().incr("bench:noop:done")
