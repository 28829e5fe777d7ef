"""What the deploy's confinement costs (issue 25): `./deploy <target> --preprod` of the test
site (tests/services/site.py: git archive, a sitemap, a tar uploaded to the pre-production host)
ten times with its sandbox and ten times without, interleaved so that the machine's noise falls
on both. Both runs make the same fresh checkout (synedre/spawn/repos.py `deployable`); "with" is
the deploy stage's own path (synedre/stages/deploy.py `deploy`: the deploy user, srt's
bubblewrap and proxy, the tenant's one host), "without" runs the same script in that checkout
as the same user, with no sandbox around it. Every run must publish, or the bench stops. Target: the medians differ
by under 1 s.
"""
from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from synedre.config import Settings  # noqa: E402
from synedre.log import configure  # noqa: E402
from synedre.orchestrate.deploy import DeployResult  # noqa: E402
from synedre.spawn import launcher, repos  # noqa: E402
from synedre.stages.deploy import Topology, deploy  # noqa: E402
from tests.services.site import start_site  # noqa: E402

RUNS = 10
TARGET_S = 1.0


def confined(site, s: Settings) -> float:
    started = time.monotonic()
    result = deploy(str(site.repo), Topology(site.target, site.url, (site.host,)), s)
    took = time.monotonic() - started
    assert isinstance(result, DeployResult) and result.ok, result
    return took


def bare(site, s: Settings) -> float:
    started = time.monotonic()
    owner = launcher.RunAs.lookup(s.deploy_user)
    with repos.deployable(repos.Repository(site.repo), "main", s.state_dir / "deploys", owner) as checkout:
        proc = subprocess.run(["./deploy", site.target, "--preprod"], cwd=checkout, capture_output=True, text=True,
                              timeout=120, env={"PATH": os.environ["PATH"], "HOME": str(checkout.parent)},
                              user=owner.uid, group=owner.gid, extra_groups=[])
    took = time.monotonic() - started
    assert proc.returncode == 0 and "published" in proc.stdout, proc.stdout + proc.stderr
    return took


def main() -> None:
    if os.geteuid() != 0:
        sys.exit("deploy_overhead: run as root (the deploy switches to its own user)")
    configure(level="WARNING")
    with tempfile.TemporaryDirectory(prefix="bench-deploy-") as tmp:
        root = Path(tmp)
        os.chmod(root, 0o755)
        site = start_site(root / "site")
        s = Settings(state_dir=root / "state", workspace_base_branch="main", deploy_timeout_s=120)
        try:
            confined(site, s)  # warm both paths once: the first srt start reads its node modules cold
            bare(site, s)
            with_sandbox, without = [], []
            for _ in range(RUNS):
                with_sandbox.append(confined(site, s))
                without.append(bare(site, s))
        finally:
            site.stop()
    med_with, med_without = statistics.median(with_sandbox), statistics.median(without)
    diff = med_with - med_without
    print(f"deploy_overhead runs={RUNS} with_sandbox_median_s={med_with:.3f} without_median_s={med_without:.3f} "
          f"difference_s={diff:.3f} ratio={med_with / med_without:.2f} (target: difference < {TARGET_S:g} s) "
          f"{'OK' if diff < TARGET_S else 'MISSED'}")


if __name__ == "__main__":
    main()
