"""The service's settings: one object, read from the environment in one place.

The harness does not use this (it takes a frozen `harness.HarnessOptions`); the API, the worker
and the CLI's service commands build everything they need from a `Settings`.

Owns: `Settings` and the LLM profiles (`LLMProfile`).
May import: pydantic-settings, the standard library and `harness.options` (the default cache
directory, the one default the harness and the service share); no other package of this service
(tests/test_architecture.py pins it).
In and out: the environment comes in; a frozen-ish `Settings` goes out to the API, the worker
and the CLI (the harness takes its own `HarnessOptions` instead).
"""

from config.settings import LLMProfile, Settings, default_data_dir, load_settings

__all__ = ["LLMProfile", "Settings", "default_data_dir", "load_settings"]
