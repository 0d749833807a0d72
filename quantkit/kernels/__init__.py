"""Triton kernels, one module per format family (see quantkit.ops.dispatch for the contract)."""
