"""`make lab` as a new user runs it (scripts/lab.sh): JupyterLab starts — as root too —, listens on
localhost only, wants its token, and serves notebooks/."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, b""
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return 0, b""  # not listening yet


def test_lab_starts_on_localhost_with_a_token_and_lists_the_notebooks(tmp_path):
    from servers import free_port

    port, token = free_port(), "t0ken-for-the-test"
    env = {**os.environ, "BIN": str(Path(sys.executable).parent), "JUPYTER_RUNTIME_DIR": str(tmp_path / "rt"),
           "JUPYTER_CONFIG_DIR": str(tmp_path / "cfg"), "JUPYTER_DATA_DIR": str(tmp_path / "data")}
    log = open(tmp_path / "lab.log", "w")
    proc = subprocess.Popen(["bash", str(ROOT / "scripts" / "lab.sh"), f"--port={port}",
                             f"--IdentityProvider.token={token}"], env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline, status = time.time() + 120, None
        while time.time() < deadline and proc.poll() is None:
            status, body = _get(f"http://127.0.0.1:{port}/api/contents?token={token}")
            if status == 200:
                break
            time.sleep(1)
        assert status == 200, (tmp_path / "lab.log").read_text()[-2000:]
        names = {item["name"] for item in json.loads(body)["content"]}
        assert "01_perturb.ipynb" in names and "10_report_card.ipynb" in names
        assert _get(f"http://127.0.0.1:{port}/api/contents")[0] == 403  # no token, no access
        listening = (tmp_path / "lab.log").read_text()
        assert f"http://127.0.0.1:{port}/lab" in listening and "0.0.0.0" not in listening
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
