"""`python -m tasks worker -Q <queues> -c <n> -P <pool> -n <name>`: a Celery worker of this app,
as `celery -A tasks worker` starts it, without Celery's command line, which imports every
subcommand and plugin (Flower's web app, the REPL, `celery multi`) before the worker: ~0.4 s
of CPU and ~20 MiB in each worker. `python -m tasks beat -S <scheduler>`: the scheduler, as
`celery -A tasks beat` starts it, with the same saving. `synedre fleet` starts its workers and
beat so; any other Celery command (call, inspect, flower) is `celery -A tasks ...` as usual."""
from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tasks", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    worker = commands.add_parser("worker", help="a worker consuming the queues given")
    worker.add_argument("-Q", "--queues", required=True, help="comma-separated queue names")
    worker.add_argument("-c", "--concurrency", type=int, default=1)
    worker.add_argument("-P", "--pool", default="prefork", choices=["prefork", "threads", "solo"])
    worker.add_argument("-n", "--hostname", default=None, help="node name, %%h for the host (celery's -n)")
    worker.add_argument("-l", "--loglevel", default="INFO")
    worker.add_argument("--without-gossip", action="store_true")
    worker.add_argument("--without-mingle", action="store_true")
    beat = commands.add_parser("beat", help="the periodic task scheduler")
    beat.add_argument("-S", "--scheduler", default=None, help="the scheduler class (celery's -S)")
    beat.add_argument("-l", "--loglevel", default="INFO")
    args = parser.parse_args(argv)

    from tasks.app import app

    if args.command == "beat":
        app.Beat(scheduler=args.scheduler, loglevel=args.loglevel).run()
        return 0

    from celery import concurrency
    from celery.utils.nodenames import default_nodename, host_format

    node = app.Worker(hostname=host_format(default_nodename(args.hostname)),
                      pool_cls=concurrency.get_implementation(args.pool), loglevel=args.loglevel,
                      queues=[q for q in args.queues.split(",") if q], concurrency=args.concurrency,
                      without_gossip=args.without_gossip, without_mingle=args.without_mingle)
    node.start()
    return node.exitcode


if __name__ == "__main__":
    sys.exit(main())
