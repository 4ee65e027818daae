"""What the adapters share: errors that name the array they are about."""

from __future__ import annotations


def named(name: str, err: Exception) -> Exception:
    """``err`` with the array's name in front, same class where possible."""
    text = str(err)
    if f"'{name}'" in text:
        return err
    msg = f"tensorpress: array '{name}': {text}"
    try:
        return type(err)(msg)
    except Exception:  # noqa: BLE001 - exception classes with other constructors
        return ValueError(msg)
