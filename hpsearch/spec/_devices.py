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


#: A device as a worker layout names it: a GPU's index or a CPU slot's id (an ``int``), or a
#: MIG instance's UUID (a ``str``, ``MIG-...``): a MIG instance is a device of its own.
DeviceId = int | str


def is_mig(device: DeviceId) -> bool:
    """Whether ``device`` is a MIG instance (named by its UUID) rather than a whole GPU."""
    return isinstance(device, str)


def parse_device(text: str) -> DeviceId | None:
    """A device id as written in a list (``--gpus``, the workers' environment): an index, or
    a MIG instance's UUID; ``None`` for anything else.

    >>> parse_device(" 3 "), parse_device("MIG-4f1c"), parse_device("GPU-4f1c"), parse_device("-1")
    (3, 'MIG-4f1c', None, None)
    """
    text = text.strip()
    if text.isdigit():
        return int(text)
    if text.startswith("MIG-"):
        return text
    return None
