"""Running a Dagster job the way operators do: ``dagster job execute -m msgx_dagster.definitions
-j <job> [-c run_config.json]`` in a subprocess against a test's databases (DESIGN §4, §5)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

BIN = Path(sys.executable).parent

JobRunner = Callable[..., subprocess.CompletedProcess]


def job_runner(env_for, tmp_path: Path) -> JobRunner:
    """``run(job, run_config=None, **env)`` -> the finished ``dagster job execute`` process."""
    home = tmp_path / "dagster_home"
    home.mkdir(exist_ok=True)

    def run(job: str, run_config: dict | None = None, **env: str) -> subprocess.CompletedProcess:
        argv = [str(BIN / "dagster"), "job", "execute", "-m", "msgx_dagster.definitions", "-j", job]
        if run_config is not None:
            config = tmp_path / f"{job}.json"
            config.write_text(json.dumps(run_config))
            argv += ["-c", str(config)]
        return subprocess.run(argv, env=env_for(DAGSTER_HOME=str(home), **env), capture_output=True,
                              text=True, timeout=300)

    return run


def op_config(op: str, **config: object) -> dict:
    return {"ops": {op: {"config": config}}}
