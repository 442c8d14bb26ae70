"""The sandbox side of own models (torch): capture, regions, their problems, profiling, the patch.

`capture` (``torch.export`` of the model, or of the parts that can be), `grouping` (regions as a
fusing compiler groups them), `codegen` (a region as a problem's source), `profiling` (the model
sandbox's work: regions timed through the patch), `runtime` (the patch itself: self-contained,
copied into every ``patched.py``). The driver side is `harness.modelsandbox`, `harness.modelextract`,
`harness.patchsource` and `harness.modelapply`; the values `vocabulary.regionplan` and
`vocabulary.modelreport`.
"""
