"""Bridges to other libraries that take quantkit's quantized models (each imports its library on use)."""
