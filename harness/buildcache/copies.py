"""Moving builds between directories: publishing staged builds, trusted build paths, copies."""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from pathlib import Path

from harness.buildcache.layout import (
    _MARKER,
    _OBJECT_FILE,
    _OBJECT_MARKER,
    _OBJECTS_DIR,
    _PCH_DIR,
    _PCH_FILE,
    _PCH_HEADER,
    _PCH_MARKER,
    _PCH_MAX,
    _PCH_RECIPE,
    TRUSTED_DIR,
)

_BUILD_DIR_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*-[0-9a-f]{24}$")
_PCH_KEY = re.compile(r"^[0-9a-f]{24}$")


def publish_staged(staging: Path, root: Path, *, pch: bool = True, objects: bool = False,
                   trusted: bool = False) -> list[str]:
    """Move finished builds (and precompiled headers) from a compile sandbox's staging directory into the cache.

    Runs on the trusted side after the sandbox has exited. A build is published only if its
    directory name is a build key, it has a marker and holds no symbolic links, and no build of
    that key exists yet: published builds are never replaced, so no sandbox can overwrite another
    extension's library or marker. A precompiled header (``pch/<key>``) likewise, if it holds
    exactly its marker and ``torch/extension.h.gch`` and the cache has room for another, unless
    ``pch`` is False (a sandbox that ran candidate code could have planted one: see the compile
    role's ``pch_warmup`` for PCHs built by trusted code only); publishing PCHs first removes those
    of an older recipe (`prune_stale_pch`), which no build uses any more. Objects (``objects/<key>``, exactly
    its object and marker) only with ``objects`` True: from a builder, which runs no candidate code.
    Returns the names published.
    """
    published: list[str] = []
    if not staging.is_dir():
        return published
    root.mkdir(parents=True, exist_ok=True)
    builds_root = root / TRUSTED_DIR if trusted else root
    builds_root.mkdir(exist_ok=True)
    for entry in sorted(staging.iterdir()):
        if entry.is_symlink() or not entry.is_dir() or not _BUILD_DIR_NAME.match(entry.name):
            continue
        if not (entry / _MARKER).is_file() or any(p.is_symlink() for p in entry.rglob("*")):
            continue
        if not trusted and (root / TRUSTED_DIR / entry.name).exists():
            continue  # the builder built this key: a compile sandbox's build of it can only be a plant
        if _move_new(entry, builds_root / entry.name):
            published.append(f"{TRUSTED_DIR}/{entry.name}" if trusted else entry.name)
    staged_pch = staging / _PCH_DIR
    if pch and staged_pch.is_dir() and not staged_pch.is_symlink():
        pch_root = root / _PCH_DIR
        pch_root.mkdir(exist_ok=True)
        for entry in sorted(staged_pch.iterdir()):
            if entry.is_symlink() or not entry.is_dir() or not _PCH_KEY.match(entry.name):
                continue
            paths = list(entry.rglob("*"))
            if any(p.is_symlink() for p in paths) or sorted(p.relative_to(entry).as_posix() for p in paths) != \
                    sorted([_PCH_MARKER, _PCH_FILE[0], "/".join(_PCH_FILE), "/".join(_PCH_HEADER)]):
                continue
            prune_stale_pch(pch_root)
            if len(current_pch_entries(pch_root)) >= _PCH_MAX:
                break
            if _move_new(entry, pch_root / entry.name):
                published.append(f"{_PCH_DIR}/{entry.name}")
    staged_objects = staging / _OBJECTS_DIR
    if objects and staged_objects.is_dir() and not staged_objects.is_symlink():
        objects_root = root / _OBJECTS_DIR
        objects_root.mkdir(exist_ok=True)
        for entry in sorted(staged_objects.iterdir()):
            if entry.is_symlink() or not entry.is_dir() or not _PCH_KEY.match(entry.name):
                continue
            paths = list(entry.iterdir())
            if any(p.is_symlink() or not p.is_file() for p in paths) or \
                    sorted(p.name for p in paths) != sorted([_OBJECT_FILE, _OBJECT_MARKER]):
                continue
            if _move_new(entry, objects_root / entry.name):
                published.append(f"{_OBJECTS_DIR}/{entry.name}")
    return published


def _pch_recipe(entry: Path) -> str | None:
    """The recipe a published PCH was built with (its marker's), or None if unreadable."""
    try:
        recipe = json.loads((entry / _PCH_MARKER).read_text()).get("recipe")
    except (OSError, ValueError, AttributeError):
        return None
    return recipe if isinstance(recipe, str) else None


def current_pch_entries(pch_root: Path) -> list[Path]:
    """The PCH directories under ``pch_root`` built with the current recipe (what the cap counts)."""
    if not pch_root.is_dir():
        return []
    return [p for p in sorted(pch_root.iterdir()) if p.is_dir() and not p.is_symlink() and _PCH_KEY.match(p.name)
            and _pch_recipe(p) == _PCH_RECIPE]


def prune_stale_pch(pch_root: Path) -> list[str]:
    """Remove (trusted side) the PCHs of an older recipe: their keys are never asked for again,
    and each holds ~0.8 GB. An entry without a readable marker is left alone (a concurrent publish
    renames whole directories, so a published one always has its marker). Returns their names."""
    removed = []
    for entry in sorted(pch_root.iterdir()) if pch_root.is_dir() else ():
        if entry.is_symlink() or not entry.is_dir() or not _PCH_KEY.match(entry.name):
            continue
        recipe = _pch_recipe(entry)
        if recipe is not None and recipe != _PCH_RECIPE:
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry.name)
    return removed


def build_directory(root: Path, name: str, key: str, *, trusted: bool) -> Path:
    """Where the cache ``root`` keeps extension ``name``'s build ``key``: among the builder's
    builds (``trusted``) or the compile sandboxes'. Never one for the other: a sandbox's build of a key
    could be a candidate's plant, and must not stand in for the builder's."""
    return (root / TRUSTED_DIR if trusted else root) / f"{name}-{key}"


def copy_build(root: Path, name: str, key: str, target_root: Path, *, trusted: bool) -> None:
    """Copy what loading extension ``name``'s build ``key`` needs (its marker and library) from the
    cache ``root`` (the builder's build if ``trusted``, else the compile sandbox's) into
    ``target_root``, laid out as a cache (a candidate sandbox's own builds)."""
    built, copy = build_directory(root, name, key, trusted=trusted), target_root / f"{name}-{key}"
    copy.mkdir(parents=True, exist_ok=True)
    for file in (_MARKER, f"{name}.so"):
        if (built / file).is_file():
            shutil.copy2(built / file, copy / file)


def _move_new(entry: Path, target: Path) -> bool:
    """Move a directory to ``target`` unless one is there already (the first one stays)."""
    if target.exists():
        return False  # built meanwhile by another compile: the first build stays
    tmp = target.parent / f".{entry.name}.{os.getpid()}.{time.monotonic_ns()}"
    try:
        os.rename(entry, tmp)  # same file system: atomic
    except OSError:
        shutil.copytree(entry, tmp)
    try:
        os.rename(tmp, target)  # fails if a concurrent publish won the race
        return True
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        return False
