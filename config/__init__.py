"""The service's settings: one object, read from the environment in one place.

The harness does not use this (it takes a frozen `harness.HarnessOptions`); the API, the worker
and the CLI's service commands build everything they need from a `Settings`.
"""

from config.settings import LLMProfile, Settings, default_data_dir, load_settings

__all__ = ["LLMProfile", "Settings", "default_data_dir", "load_settings"]
