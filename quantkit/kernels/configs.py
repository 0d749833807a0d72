"""The first check every family makes of a kernel config, before its own: a known kind, the keys that kind must
name, and tile sizes that are powers of two. A config can come from a user or a cache file, so a bad one is named
(family, config, what is wrong) before anything is launched."""
from __future__ import annotations


def is_pow2(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 1 and v & (v - 1) == 0


def check_keys(family: str, config, keys: dict, pow2: dict | None = None, optional: dict | None = None) -> str:
    """``config``'s kind, once it is one of ``keys`` (kind -> required keys), names every key its kind requires,
    no key outside those and ``optional[kind]`` (a misspelt key would otherwise be ignored without a word), and
    holds a power of two under each of ``pow2[kind]``; a ValueError naming ``family`` otherwise."""
    kind = config.get("kernel") if isinstance(config, dict) else None
    if kind not in keys:
        raise ValueError(f"{family} config: 'kernel' must be one of {sorted(keys)}, got {config!r}")
    missing = [k for k in keys[kind] if k not in config]
    if missing:
        raise ValueError(f"{family} {kind} config {config!r} lacks {missing}")
    if optional is not None:
        known = {"kernel", *keys[kind], *optional.get(kind, ())}
        unknown = sorted(k for k in config if k not in known)
        if unknown:
            raise ValueError(f"{family} {kind} config {config!r} has keys it does not take: {unknown} "
                             f"(it takes {sorted(known - {'kernel'})})")
    for k in (pow2 or {}).get(kind, ()):
        if not is_pow2(config[k]):
            raise ValueError(f"{family} {kind} config: {k} must be a power of two, got {config!r}")
    return kind
