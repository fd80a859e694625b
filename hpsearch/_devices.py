"""Device counts: a whole number of devices, or a fraction of one device that several trials
share (``gpus_per_trial: 1/4``). The fractions are exact in binary, so Dask's resource
accounting adds them up to whole devices exactly."""

from __future__ import annotations

from typing import Any

#: The fractions of one device a trial may take, by how they may be written.
DEVICE_FRACTIONS = {"1/2": 0.5, "1/4": 0.25, "1/8": 0.125}


def device_count(value: Any) -> int | float | None:
    """``value`` as a device count (an ``int`` for whole devices, a ``float`` for a fraction),
    or ``None`` where it is neither.

    >>> device_count("1/4"), device_count(2), device_count("3"), device_count(0.3)
    (0.25, 2, 3, None)
    """
    if isinstance(value, str):
        text = value.strip()
        if text in DEVICE_FRACTIONS:
            return DEVICE_FRACTIONS[text]
        try:
            value = float(text)
        except ValueError:
            return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if value in DEVICE_FRACTIONS.values():
        return float(value)
    if float(value).is_integer() and value >= 1:
        return int(value)
    return None
