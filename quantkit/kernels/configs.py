"""The first check every family makes of a kernel config, before its own: a known kind, the keys that kind must
name, no key it does not take, and tile sizes that are powers of two. A config can come from a user or a cache
file, so a bad one is named (family, config, what is wrong) before anything is launched. The check runs on every
eager call, so the key sets are built once per family (:func:`key_sets`) and a good config costs two set
comparisons."""
from __future__ import annotations


def is_pow2(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 1 and v & (v - 1) == 0


def key_sets(required: dict, optional: dict) -> dict:
    """kind -> (its required keys in order, the same as a set, every key it takes): what :func:`check_keys`
    reads, from a family's kind -> required keys and kind -> optional keys."""
    return {kind: (tuple(req), frozenset(req), frozenset({"kernel", *req, *optional.get(kind, ())}))
            for kind, req in required.items()}


def check_keys(family: str, config, kinds: dict, pow2: dict | None = None) -> str:
    """``config``'s kind, once it is one of ``kinds`` (:func:`key_sets`), names every key its kind requires, no
    key it does not take (a misspelt key would otherwise be ignored without a word), and holds a power of two
    under each of ``pow2[kind]``; a ValueError naming ``family`` otherwise."""
    kind = config.get("kernel") if isinstance(config, dict) else None
    if kind not in kinds:
        raise ValueError(f"{family} config: 'kernel' must be one of {sorted(kinds)}, got {config!r}")
    ordered, required, known = kinds[kind]
    names = config.keys()
    if not required <= names:
        raise ValueError(f"{family} {kind} config {config!r} lacks {[k for k in ordered if k not in config]}")
    if not names <= known:
        raise ValueError(f"{family} {kind} config {config!r} has keys it does not take: "
                         f"{sorted(k for k in names if k not in known)} (it takes {sorted(known - {'kernel'})})")
    for k in (pow2 or {}).get(kind, ()):
        if not is_pow2(config[k]):
            raise ValueError(f"{family} {kind} config: {k} must be a power of two, got {config!r}")
    return kind
