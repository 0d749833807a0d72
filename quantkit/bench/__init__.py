"""Benchmarks: every recipe per layer against bf16, and a Llama-3-8B-shaped decoder end to end.

``quantkit bench layers | e2e | plot`` (see :mod:`quantkit.bench.cli`) runs them; the modules are
:mod:`~quantkit.bench.layers` (per-layer harness), :mod:`~quantkit.bench.decoder` (the model with a
static KV cache), :mod:`~quantkit.bench.e2e` (prefill/decode with CUDA graphs) and
:mod:`~quantkit.bench.plot` (charts from the JSON results; needs matplotlib).
"""
