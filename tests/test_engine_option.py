"""The call engine option (issue 51) where Ray is not installed: the settings, how a process finds the engine, the
error that names the fix. The engine itself runs in tests/test_ray.py (make test-ray)."""

from __future__ import annotations

import importlib.util

import pytest

from dhp import calls
from dhp.config import EngineParams
from dhp.errors import DHPError
from dhp.grid import validate_params

BASE = {"judges": ["embedded"], "modes": ["logprobs"], "methods": ["dhp"]}


def test_a_grid_takes_the_engine_settings_once_declared():
    g = validate_params({**BASE, "engine": "ray", "ray_replicas": 4, "ray_address": "10.0.0.1:6379"})
    assert (g.engine, g.ray_replicas, g.ray_address) == ("ray", 4, "10.0.0.1:6379")
    assert set(EngineParams.model_fields) <= set(type(g).model_fields)  # declared once, in dhp.config
    with pytest.raises(DHPError, match="engine"):
        validate_params({**BASE, "engine": "spark"})


def test_the_environment_names_the_engine_of_notebook_kernels(monkeypatch):
    """A grid's kernels and stage threads find the engine in DHP_ENGINE (no Ray import until a call is made)."""
    monkeypatch.delenv("DHP_ENGINE", raising=False)
    assert calls.current_engine() is None
    from dhp.backends.ray_engine import engine_env

    monkeypatch.setenv("DHP_ENGINE", engine_env(EngineParams(engine="ray", ray_replicas=3))["DHP_ENGINE"])
    engine = calls.current_engine()
    assert engine.name == "ray" and engine.params.ray_replicas == 3
    assert calls.current_engine() is engine  # one per process
    monkeypatch.setenv("DHP_ENGINE", "live")
    assert calls.current_engine() is None
    with calls.using_engine("mine"):  # an explicit engine wins over the environment
        assert calls.current_engine() == "mine"


@pytest.mark.skipif(importlib.util.find_spec("ray") is not None, reason="Ray is installed here")
def test_without_ray_the_engine_says_how_to_install_it():
    from dhp.backends.ray_engine import RayEngine

    with pytest.raises(DHPError, match=r"pip install -e '\.\[ray\]'"):
        RayEngine().start()
