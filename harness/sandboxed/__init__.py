"""The referee's sandbox side: the code that runs inside a sandbox (a confined child process the
driver side starts, `harness.sandbox`). It imports torch and runs problem and candidate code.

`roles` (one module per sandbox role, the entry point: ``python -P -m harness.sandboxed.roles ROLE
FD``), `forkserver` (the fork server's process: torch imported once, a CPU Referee's compile,
builder and candidate sandboxes forked from it), `meter` (the metered loop's sandbox side: load and
bind `kl_meter` before any candidate code, `Meter`, `call_inputs`), `localmeter` (the same loop
driven by a thread of this process, for benchmarks and tools that time trusted code: no sandbox, but
torch and the sandbox side's `Meter`), `contract` (weights, inputs, seeds, TF32: the evaluation
contract as code), `compare` (the numerics rules), `transfer` (a candidate's outputs to the
comparer), `roofline` (device specs, FLOPs, SOL), `footprint` (a trial's bytes on the meta device),
`regions` (own models: capture, regions, profiling, the patch runtime).

The driver side (the rest of `harness`, standard library only) never imports this package: it
starts it as a process, and speaks to it through `harness.channel` in the messages of
`harness.protocol`. The one exception is a file, not an import: `harness.patchsource` copies
`regions/runtime.py` into a patched model's source as text. This package imports from the driver
side what both sides share, all standard library: `channel`, `protocol`, `options`, `seeds`,
`meter.build` and `meter.drive` (for `localmeter`), `patchsource.plan_of` (for `regions`), and
`buildcache` (the builds: a compile sandbox builds into it, the driver copies from it; it stays at
`harness.buildcache`, imported by `candidaterun`, `compiler` and `lazybuilds`).
"""
