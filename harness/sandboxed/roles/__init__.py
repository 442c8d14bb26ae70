"""Sandbox entry points, run only inside sandboxed processes (``python -m harness.sandboxed.roles ROLE FD``).

This package is the one place where problem and candidate code is executed.
"""
