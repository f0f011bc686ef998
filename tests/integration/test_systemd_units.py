"""The systemd units of deploy/systemd checked by systemd itself (`systemd-analyze verify` and the
offline `systemd-analyze security`), without installing or starting them.

The units run msgx from /opt/msgx/venv; verify insists that every executable exists, so the test
copies the folder to a temporary directory and points the ExecStart binaries at this test run's
virtualenv (the directory of the running Python), then lets systemd load the copies, the shared
"msgx-.service.d" drop-in included, from there. Nothing else is changed.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
UNITS = REPO / "deploy" / "systemd"
INSTALLED_BIN = "/opt/msgx/venv/bin/"
SERVICES = sorted(path.name for path in UNITS.glob("msgx-*.service"))
AFTER_CODE_SERVER = ("msgx-daemon.service", "msgx-webserver.service", "msgx-webserver-readonly.service")


def analyze() -> str:
    found = shutil.which("systemd-analyze")
    assert found, "systemd-analyze is missing (Debian package systemd)"
    return found


@pytest.fixture
def unit_dir(tmp_path: Path) -> Path:
    """A copy of deploy/systemd whose binaries are this virtualenv's."""
    target = tmp_path / "units"
    shutil.copytree(UNITS, target)
    venv_bin = str(Path(sys.executable).parent) + "/"
    for unit in target.glob("*.service"):
        unit.write_text(unit.read_text("utf-8").replace(INSTALLED_BIN, venv_bin), "utf-8")
    return target


def run_analyze(unit_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    # SYSTEMD_UNIT_PATH with a trailing ":" = this folder first, then the system's own unit folders
    env = {"SYSTEMD_UNIT_PATH": f"{unit_dir}:", "PATH": "/usr/bin:/bin", "SYSTEMD_PAGER": ""}
    return subprocess.run([analyze(), *args], cwd=unit_dir, env=env, capture_output=True, text=True, timeout=120)


def verify(unit_dir: Path, *names: str) -> subprocess.CompletedProcess[str]:
    return run_analyze(unit_dir, "verify", "--man=no", *(str(unit_dir / name) for name in names))


def test_units_pass_systemd_analyze_verify(unit_dir):
    """OPS-1: the five services, msgx.target and msgx-standby.target load without a single complaint
    from systemd: every
    directive known and well-formed (hardening included), every executable present, the ordering
    consistent; and verify does complain about a misspelt directive in the shared drop-in."""
    assert len(SERVICES) == 5
    result = verify(unit_dir, "msgx.target", "msgx-standby.target", *SERVICES)
    assert (result.returncode, result.stdout + result.stderr) == (0, "")
    dropin = unit_dir / "msgx-.service.d" / "10-common.conf"
    dropin.write_text(dropin.read_text("utf-8").replace("ProtectSystem=strict", "ProtectSystm=strict"), "utf-8")
    broken = verify(unit_dir, "msgx-api.service")
    assert "Unknown key 'ProtectSystm'" in broken.stdout + broken.stderr


def test_every_service_is_hardened(unit_dir):
    """OPS-2: systemd's own exposure score of every service stays in its "OK" band (below 3.0 of 10),
    from the shared drop-in: a dedicated user, no capabilities, a read-only system, private /tmp and
    devices, a system-call filter."""
    for name in SERVICES:
        result = run_analyze(unit_dir, "security", "--offline=true", "--threshold=30", "--no-pager",
                             str(unit_dir / name))
        score = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", result.stdout)
        assert result.returncode == 0 and score and float(score.group(1)) < 3.0, (name, result.stdout[-400:])


def test_start_order_and_settings():
    """OPS-1, OPS-2: the daemon and both webservers start after the code server (which counts as
    started only once it answers), every service reads the settings file and runs as the msgx user
    (one drop-in for all), both webservers listen on loopback only (behind the authenticating
    proxy) and the viewers' one is read-only, and no secret is on a command line."""
    for name in AFTER_CODE_SERVER:
        text = (UNITS / name).read_text("utf-8")
        assert re.search(r"^After=.*\bmsgx-code-server\.service\b", text, re.M), name
        assert re.search(r"^Wants=.*\bmsgx-code-server\.service\b", text, re.M), name
    code_server = (UNITS / "msgx-code-server.service").read_text("utf-8")
    started = re.search(r"^ExecStartPost=(.*)$", code_server, re.M)
    assert started and "grpc-health-check" in started.group(1)
    common = (UNITS / "msgx-.service.d" / "10-common.conf").read_text("utf-8")
    assert re.search(r"^EnvironmentFile=/etc/msgx/msgx\.env$", common, re.M)
    assert re.search(r"^User=msgx$", common, re.M) and re.search(r"^Restart=on-failure$", common, re.M)
    commands = {name: re.findall(r"^ExecStart=(.+)$", (UNITS / name).read_text("utf-8"), re.M)
                for name in SERVICES}
    assert "--host 127.0.0.1 --port 3000" in commands["msgx-webserver.service"][0]
    assert "--read-only --host 127.0.0.1 --port 3001" in commands["msgx-webserver-readonly.service"][0]
    for name, lines in commands.items():
        assert not re.search(r"(?i)(password|token|://[^ ]*@)", " ".join(lines)), name


def test_sysusers_file_creates_the_user_the_units_run_as(tmp_path):
    """OPS-2: `systemd-sysusers` applied to deploy/systemd/msgx.sysusers.conf in an empty root
    creates exactly the system user (and its group) that the shared drop-in's `User=` names, with
    no login shell and its home in the units' state directory."""
    found = shutil.which("systemd-sysusers")
    assert found, "systemd-sysusers is missing (Debian package systemd)"
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    for name in ("passwd", "group"):
        (root / "etc" / name).write_text("", "utf-8")
    result = subprocess.run([found, f"--root={root}", str(UNITS / "msgx.sysusers.conf")],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    users = [line.split(":") for line in (root / "etc" / "passwd").read_text("utf-8").splitlines()]
    groups = [line.split(":")[0] for line in (root / "etc" / "group").read_text("utf-8").splitlines()]
    drop_in = (UNITS / "msgx-.service.d" / "10-common.conf").read_text("utf-8")
    user = re.search(r"^User=(\S+)$", drop_in, re.MULTILINE)
    assert user is not None
    assert [(u[0], u[5], u[6]) for u in users] == [(user.group(1), "/var/lib/msgx", "/usr/sbin/nologin")]
    assert groups == [user.group(1)]
    assert "StateDirectory=msgx" in drop_in


def test_the_standby_runs_everything_but_the_daemon_and_the_daemon_is_fenced():
    """OPS-1: msgx-standby.target (a warm standby) starts every service but the Dagster daemon, and
    gives way to msgx.target; the daemon unit runs the standby fence before it starts, with the very
    module the installed virtualenv has, so a second daemon on the instance refuses and says why."""
    def wants(name: str) -> set[str]:
        text = (UNITS / name).read_text("utf-8")
        return {unit for line in re.findall(r"^Wants=(.+)$", text, re.M) for unit in line.split()}
    assert wants("msgx.target") - wants("msgx-standby.target") == {"msgx-daemon.service"}
    assert wants("msgx-standby.target") == set(SERVICES) - {"msgx-daemon.service"}
    standby = (UNITS / "msgx-standby.target").read_text("utf-8")
    assert re.search(r"^Conflicts=msgx\.target$", standby, re.M)
    daemon = (UNITS / "msgx-daemon.service").read_text("utf-8")
    [fence] = re.findall(r"^ExecStartPre=(.+)$", daemon, re.M)
    assert fence.split() == [f"{INSTALLED_BIN}python", "-m", "msgx_dagster.standby", "takeover"]
    module = importlib.util.find_spec(fence.split()[2])
    assert module is not None and module.origin is not None
