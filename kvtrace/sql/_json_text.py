"""Values as strict JSON: decimals as the numbers they are, NaN and infinities as null."""

from __future__ import annotations

import json
import math
from decimal import Decimal


def json_text(value: object, indent: int | None = None) -> str:
    """``value`` as JSON: NaN and infinities (which JSON lacks) as null."""
    try:
        return json.dumps(value, default=_json_value, indent=indent, allow_nan=False)
    except ValueError:  # a non-finite number somewhere: the rare slow path
        return json.dumps(_finite(value), default=_json_value, indent=indent)


def _finite(value: object) -> object:
    """``value`` with every NaN or infinite float replaced by None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, list):
        return [_finite(v) for v in value]
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    return value


def _json_value(value: object) -> object:
    """What JSON cannot hold as it is: a decimal (a sum, an exact average) as the number
    it is, anything else (a time, a UUID) as text."""
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    return str(value)
