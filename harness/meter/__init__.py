"""The metered timing loop: a forward timed by compiled code, driven call by call by the trusted side.

A candidate's process is the candidate's: whatever measures it there must be out of reach of its
Python (module attributes, classes, frames, function code). So the loop is C (`kl_meter.c`, built
here from source by the trusted side in a second, `harness.meter.build`, and loaded by a sandbox
before any candidate code runs, `harness.sandboxed.meter`), and the trusted side drives it one call at
a time over the sandbox's channel (`harness.meter.drive`): each call's inputs are revealed only by
its GO frame, its DONE frame carries the sample the loop measured, the trusted side times the same
round trip with its own clock, and which calls are audited (their captured outputs compared with
the reference's) is decided after their DONE arrived. `harness.meter.clock` bounds the reported
samples by the trusted clock, pairing each call's two figures (pure arithmetic).

Driver side (stdlib), here: `frames`, `build`, `drive`, `clock`, `noise`. Sandbox side (torch), in
`harness.sandboxed`: `meter` (the loop's sandbox side) and `localmeter` (the loop in this process,
for benchmarks and tools).
"""
