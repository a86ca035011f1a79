"""Which Ray rlvr-train runs on (rlvr.train.ray_cluster): Ray's convention on fake process
tables and temp folders, then a real `ray start --head` that rlvr-train joins.

The real cluster runs in its own PID namespace (bubblewrap) with everything that talks to
it, because `ray stop` stops every Ray process it can see: there it sees only the test's.
tests/conftest.py sets RAY_ADDRESS=local so that no other test joins a cluster a user left
running; these tests clear it where they need to.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys

import pytest

from helpers import REPO
import machine_time  # hang guards in machine seconds
from rlvr.errors import ConfigError
from rlvr.train import ray_cluster
from rlvr.train.ray_cluster import Choice, choose, raylets, temp_dir_note

TINY = os.path.join(REPO, "configs", "tiny-cpu.yaml")
RAYLET = "/venv/lib/python3.11/site-packages/ray/core/src/ray/raylet/raylet"


def raylet(gcs: str, temp: str) -> list[str]:
    return [RAYLET, "--node_ip_address=10.0.0.5", f"--temp_dir={temp}", f"--gcs-address={gcs}", "--head"]


def started(folder, address: str) -> str:
    """A temp folder in which `ray start` wrote its address."""
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "ray_current_cluster"), "w") as fh:
        fh.write(address)
    return str(folder)


def test_the_cluster_ray_start_left_is_joined_and_a_private_ray_never(tmp_path):
    env = {"RAY_TMPDIR": str(tmp_path)}           # Ray's default temp folder: tmp_path/ray
    default = str(tmp_path / "ray")
    assert choose(None, None, env, []) == Choice(None, "none running") and choose(None, None, env, []).line() is None
    # `ray start --head`: its address in the default folder, its raylet running
    started(default, "10.0.0.5:6379")
    procs = [raylet("10.0.0.5:6379", default), ["/usr/bin/python3", "train.py"]]
    c = choose(None, None, env, procs)
    assert c == Choice("10.0.0.5:6379", "ray start", default)
    assert c.line().startswith("joining the Ray cluster at 10.0.0.5:6379 that `ray start` left running")
    assert choose(None, None, env, [raylet("10.0.0.5:6380", default)]).address is None  # a stale file: stopped
    # a private Ray (some program's ray.init()) writes no file: never joined
    assert choose(None, None, env, [raylet("10.0.0.9:7000", str(tmp_path / "private"))]).address is None
    # `ray start --temp-dir /nvme/...`: found through its raylet's temp folder, without being told
    (tmp_path / "ray" / "ray_current_cluster").unlink()
    nvme = started(tmp_path / "nvme" / "ray", "10.0.0.5:6400")
    assert choose(None, None, env, [raylet("10.0.0.5:6400", nvme)]) == Choice("10.0.0.5:6400", "ray start", nvme)
    # two of them: ray.temp_dir chooses; the default folder's is Ray's ray.init() choice; else an error
    other = started(tmp_path / "other", "10.0.0.5:6500")
    two = [raylet("10.0.0.5:6400", nvme), raylet("10.0.0.5:6500", other)]
    with pytest.raises(ConfigError, match=r"2 Ray clusters started with `ray start` are running here: .*6400.*6500"):
        choose(None, None, env, two)
    assert choose(None, other, env, two).address == "10.0.0.5:6500"
    started(default, "10.0.0.5:6379")
    assert choose(None, None, env, [*two, raylet("10.0.0.5:6379", default)]).address == "10.0.0.5:6379"
    # an address given, or RAY_ADDRESS, is joined as it is; local always starts a Ray of its own
    assert choose("10.1.1.1:6379", None, env, two) == Choice("10.1.1.1:6379", "ray.address")
    assert choose(None, None, dict(env, RAY_ADDRESS="10.2.2.2:6379"), two) == Choice("10.2.2.2:6379", "RAY_ADDRESS")
    assert choose("10.1.1.1:6379", None, dict(env, RAY_ADDRESS="10.2.2.2:6379"), two).address == "10.1.1.1:6379"
    c = choose("local", nvme, env, two)
    assert c.address is None and c.line() == ("starting a Ray of its own (ray.address: local, beside the `ray start` "
                                              "cluster at 10.0.0.5:6400)")
    assert choose(None, None, dict(env, RAY_ADDRESS="local"), []) == Choice(None, "RAY_ADDRESS=local")
    assert choose(None, None, dict(env, RAY_ADDRESS="local"), []).line() is None
    # auto: the `ray start` cluster when there is one, else Ray's own search
    assert choose("auto", nvme, env, two).address == "10.0.0.5:6400"
    assert choose("auto", None, {"RAY_TMPDIR": str(tmp_path / "none")}, []) == Choice("auto", "ray.address")
    # a joined cluster keeps its folder: a warning when ray.temp_dir names another
    assert "ray.temp_dir /nvme/ray is not used" in temp_dir_note("/nvme/ray", "/tmp/ray")
    assert temp_dir_note(nvme, nvme + "/") is None and temp_dir_note(None, "/tmp/ray") is None
    assert raylets([["/bin/raylet", "--gcs_address=1.2.3.4:5"], ["raylet.sh", "--gcs-address=x"], []]) == \
        [("1.2.3.4:5", None)]
    assert ray_cluster.default_temp_dir({}) == "/tmp/ray"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


SNIPPET = """
import json, os, sys
import ray
from rlvr.config_loader import load_config
from rlvr.train.config import TrainConfig
from rlvr.train.cluster import Cluster

out = {}
for name, sets in (("local", ["ray.address=local", "ray.num_cpus=1"]),
                   ("other_temp", ["ray.address=" + sys.argv[2], "ray.temp_dir=" + sys.argv[3]])):
    cluster = Cluster(load_config(TrainConfig, sys.argv[1], sets), os.path.join(sys.argv[4], name), "")
    cluster.init()
    out[name] = cluster.info
    ray.shutdown()
print(json.dumps(out))
"""


@pytest.mark.skipif(not shutil.which("bwrap"), reason="needs bubblewrap for a PID namespace (scripts/install.sh)")
def test_rlvr_train_joins_a_ray_start_cluster_and_local_starts_its_own(tmp_path):
    import pathlib
    import tempfile

    short = tempfile.mkdtemp(prefix="rlvr-ray-")  # Ray's socket paths must stay under 108 bytes
    try:
        joined(tmp_path, pathlib.Path(short) / "ray")
    finally:
        shutil.rmtree(short, ignore_errors=True)


def joined(tmp_path, temp) -> None:
    home, run = tmp_path / "home", tmp_path / "run"
    home.mkdir()
    ray_cli = f"{sys.executable} -m ray.scripts.scripts"
    port, client_port, agent_port = free_port(), free_port(), free_port()
    train = [sys.executable, "-m", "rlvr.commands.train", TINY, "--run-dir", str(run), "--set", "train.steps=1",
             "--set", "rollout.engine=hf", "--set", "rollout.prompts_per_step=2", "--set", "rollout.n=2",
             "--set", "rollout.max_tokens=4", "--set", "checkpoint.every=0", "--ray-temp-dir", str(temp)]
    script = f"""
set -u
trap 'timeout 120 {ray_cli} stop >/dev/null 2>&1' EXIT
{ray_cli} start --head --port={port} --ray-client-server-port={client_port} --dashboard-agent-listen-port={agent_port} \\
    --temp-dir={temp} --num-cpus=4 --include-dashboard=false --disable-usage-stats > {tmp_path}/start.log 2>&1 || exit 90
cat {temp}/ray_current_cluster > {tmp_path}/address
{" ".join(train)} > {tmp_path}/train.out 2> {tmp_path}/train.err; echo $? > {tmp_path}/train.rc
{sys.executable} -c '{SNIPPET}' {TINY} "$(cat {tmp_path}/address)" {tmp_path}/elsewhere {tmp_path}/snippet \\
    > {tmp_path}/snippet.out 2> {tmp_path}/snippet.err
"""
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_AUTH_MODE", "RAY_AUTH_TOKEN")}
    env.update(HOME=str(home), OMP_NUM_THREADS="1", RAY_USAGE_STATS_ENABLED="0", TOKENIZERS_PARALLELISM="false")
    # own PID namespace and /proc: `ray stop` sees, and rlvr-train finds, only this cluster;
    # when bwrap ends (or is killed) every process in it ends too
    p = machine_time.run(["bwrap", "--dev-bind", "/", "/", "--unshare-pid", "--proc", "/proc", "--die-with-parent",
                        "bash", "-c", script], env=env, cwd=str(tmp_path), timeout=600,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    start_log = (tmp_path / "start.log").read_text() if (tmp_path / "start.log").exists() else ""
    assert p.returncode == 0, (p.stdout.decode(errors="replace")[-2000:], start_log[-3000:])
    address = (tmp_path / "address").read_text().strip()
    err = (tmp_path / "train.err").read_text()
    assert (tmp_path / "train.rc").read_text().strip() == "0", err[-3000:]
    # rlvr-train joined the cluster, said so in one line and in run.json, and trained on it
    said = [ln for ln in err.splitlines() if "Ray cluster" in ln]
    assert said == [f"rlvr-train: joining the Ray cluster at {address} that `ray start` left running (temp dir {temp}); "
                    "ray.address: local starts a Ray of its own instead"], err[-3000:]
    man = json.loads((run / "run.json").read_text())
    assert man["ray"] == {"cluster": "joined", "address": address, "temp_dir": str(temp), "chosen_by": "ray start"}
    assert [json.loads(ln)["step"] for ln in (run / "traces" / "trace.jsonl").read_text().splitlines()] == [1]
    # ray.address: local beside it: a Ray of its own, in its own folder; a joined cluster
    # with ray.temp_dir naming another folder: joined, with a warning
    out = json.loads((tmp_path / "snippet.out").read_text())
    snippet_err = (tmp_path / "snippet.err").read_text()
    assert out["local"]["cluster"] == "own" and out["local"]["address"] != address, snippet_err
    assert out["local"]["temp_dir"] != str(temp)
    assert f"starting a Ray of its own (ray.address: local, beside the `ray start` cluster at {address})" in snippet_err
    assert out["other_temp"] == {"cluster": "joined", "address": address, "temp_dir": str(temp),
                                 "chosen_by": "ray.address"}
    assert f"ray.temp_dir {tmp_path}/elsewhere is not used: the joined cluster keeps its own temp folder, {temp}" \
        in snippet_err
