"""Fixtures for the agent's tests."""

from __future__ import annotations

import pytest

from agent.providers.scripted import ScriptedProvider
from problems import load_problem
from problems.spec import Problem
from tests.support.agents import SEED1, SEED2
from tests.support.doubles import MemoryRecorder


@pytest.fixture(scope="session")
def seed1() -> Problem:
    return load_problem(SEED1)


@pytest.fixture(scope="session")
def seed2() -> Problem:
    return load_problem(SEED2)


@pytest.fixture
def scripted1() -> ScriptedProvider:
    return ScriptedProvider.for_problem(SEED1, "cpu")


@pytest.fixture
def recorder() -> MemoryRecorder:
    return MemoryRecorder()
