"""`autorl.backends.cluster.ray_cluster.connect` and the local Ray cluster it starts: without Ray, one error
naming the extra; a cluster as large as the replicas and the trainer ask; the run's SIGTERM handler kept
although `ray.init` replaces it (the CLI cancels its run on SIGTERM); and no process that an actor started
under the vLLM supervisor (`die_with_parent.py --group`) outliving a run stopped by SIGTERM. The Ray tests
run in a subprocess: Ray stays initialised in the process that connected."""

import importlib.util
import signal
import subprocess
import sys
import time

import pytest

from autorl.backends.cluster.config import ClusterConfig
from autorl.backends.cluster.ray_cluster import connect
from autorl.errors import AutoRLError
from autorl.serving.die_with_parent import GRACE_S
from tests.helpers.limits import scaled
from tests.helpers.processes import alive, descendants, wait_gone

needs_ray = pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="needs Ray (the dev extra has it)")

CONNECT = """
import os, signal
from autorl.backends.cluster.config import ClusterConfig
from autorl.backends.cluster.ray_cluster import connect

def cancel(signum, frame):
    pass

signal.signal(signal.SIGTERM, cancel)
connect(ClusterConfig(ray="local", replicas=3, judge_replicas=2, replica_cpus=2, trainer_cpus=1))
import ray
assert signal.getsignal(signal.SIGTERM) is cancel, signal.getsignal(signal.SIGTERM)
print(int(ray.cluster_resources()["CPU"]), max(os.cpu_count(), (3 + 2) * 2 + 1))
ray.shutdown()
"""

STARTS_A_SERVER = """
import subprocess, time
import ray
from autorl.backends.cluster.config import ClusterConfig
from autorl.backends.cluster.ray_cluster import connect
from autorl.serving.die_with_parent import wrapped

connect(ClusterConfig(ray="local"))

@ray.remote
class Replica:  # starts its process tree as VLLMServer does: a supervisor leading a new session
    def start(self):
        command = wrapped(["sh", "-c", "sleep 300 & sleep 300 & wait"], group=True)
        self.server = subprocess.Popen(command, start_new_session=True)
        return self.server.pid

print(ray.get(Replica.options(num_cpus=1).remote().start.remote()), flush=True)
time.sleep(300)
"""


def test_without_ray_installed_the_error_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    with pytest.raises(AutoRLError, match=r'--ray needs Ray: pip install -e "\.\[ray\]"'):
        connect(ClusterConfig(ray="local"))


@needs_ray
@pytest.mark.timeout(120)
def test_connect_sizes_a_local_cluster_and_keeps_the_sigterm_handler():
    result = subprocess.run([sys.executable, "-c", CONNECT], capture_output=True, text=True, timeout=scaled(100))
    assert result.returncode == 0, result.stderr
    cpus, expected = result.stdout.split()
    assert cpus == expected


@needs_ray
@pytest.mark.timeout(120)
def test_nothing_an_actor_started_outlives_a_run_stopped_by_sigterm():
    run = subprocess.Popen([sys.executable, "-c", STARTS_A_SERVER], stdout=subprocess.PIPE, text=True)
    try:
        supervisor = int(run.stdout.readline())
        deadline = time.monotonic() + 20
        while len(tree := alive({supervisor} | descendants(supervisor))) < 4 and time.monotonic() < deadline:
            time.sleep(0.1)  # the supervisor, sh and its two sleeps (which sh's death would not end)
        assert len(tree) == 4, tree
        run.send_signal(signal.SIGTERM)
        run.wait(60)
        assert not wait_gone(tree, GRACE_S + 20)
    finally:
        run.kill()
