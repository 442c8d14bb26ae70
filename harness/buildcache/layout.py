"""The builds cache's layout on disk and the recipe numbers in its keys."""

from __future__ import annotations

import re

_MARKER = "built.json"
#: Bumped when the way we build changes (flags we add), so old builds are not reused.
_BUILD_RECIPE = "1"
#: Flags we add to every CUDA build: register and spill counts for the feedback.
_PTXAS_VERBOSE = ("-Xptxas=-v",)
_MAX_ERRORS = 6
#: The precompiled header: its directory in the builds cache, its marker, the file g++ looks for.
_PCH_DIR = "pch"
_PCH_MARKER = "pch.json"
_PCH_FILE = ("torch", "extension.h.gch")
#: The header itself, copied beside its PCH: g++ takes the directory where it found
#: ``torch/extension.h.gch`` for the header's own, so a second ``#include <torch/extension.h>``
#: (load_inline's implicit one, then the source's) reads the header from there.
_PCH_HEADER = ("torch", "extension.h")
#: ``<builds>/pch/disabled`` turns precompiled headers off for that cache (benchmarks, debugging).
_PCH_DISABLED = "disabled"
#: Bumped when the way a PCH is built changes (2: normalised flags; 3: the header beside it).
_PCH_RECIPE = "3"
#: A PCH of torch/extension.h is ~0.8 GB: at most this many flag sets get one.
_PCH_MAX = 8
_PCH_NAME_FLAG = re.compile(r"^-DTORCH_EXTENSION_NAME=")
_FIRST_LINE_PCH = re.compile(r'^\s*#\s*include\s*[<"]torch/extension\.h[>"]')
_CONTEXT_LINES = 3
#: Builds made by the trusted builder: a key space of their own (``<builds>/trusted/<name>-<key>``),
#: published only from builders, so no compile sandbox can plant one.
TRUSTED_DIR = "trusted"
#: Per-translation-unit objects: their directory in the builds cache, and each entry's files.
_OBJECTS_DIR = "objects"
_OBJECT_FILE = "object.o"
_OBJECT_MARKER = "object.json"
#: Bumped when the way an object's key is computed changes.
_OBJECT_RECIPE = "1"
#: The ninja rule that stands in for a compile whose object is reused.
_REUSE_RULE = "kl_reuse_object"
#: A translation unit that includes torch's headers (or gets them from load_inline's implicit ones).
_TORCH_INCLUDE = re.compile(r'^\s*#\s*include\s*[<"](?:torch/|ATen/|c10/|pybind11/)', re.MULTILINE)
#: Added where a PCH is offered: g++ then says when it refuses one (never an error, whatever -Werror).
_PCH_DIAGNOSTICS = ("-Winvalid-pch", "-Wno-error=invalid-pch")
#: g++ found a PCH and refused it (printed because we add -Winvalid-pch where we offer one).
_PCH_REFUSED = re.compile(r"extension\.h\.gch: (?:not used because|created and used with)([^\[\n]*)")
