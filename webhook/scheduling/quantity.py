"""A Kubernetes quantity ("250m", "1.5Gi", "1e3") as the whole number kube-scheduler counts, read
in time linear in its text and never raising.

kube-scheduler reads a request with Quantity.Value (units) or MilliValue (cpu), each rounded up;
past int64 both saturate at 2^63-1 (apimachinery's AsScaledInt64), so a pod asking more than
that fits no node. The API server accepts an exponent up to 2^31 and a mantissa of any length
and stores them canonical ("1e1000000" as "10e999999"): here neither is ever written out as a
number. Anything unreadable, or not positive, reads 0 (the API server stores neither in a
request; allocatable and capacity are the kubelet's).
"""

from __future__ import annotations

import math
import re

MAX_VALUE = 2**63 - 1  # int64: where Value and MilliValue saturate

_QUANTITY = re.compile(
    r"([+-]?)([0-9]*)(?:\.([0-9]*))?(?:[eE]([+-]?[0-9]+)|(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E))?")
# suffix -> (power of ten, power of two)
_SUFFIX = {"n": (-9, 0), "u": (-6, 0), "m": (-3, 0), "k": (3, 0), "M": (6, 0), "G": (9, 0),
           "T": (12, 0), "P": (15, 0), "E": (18, 0), "Ki": (0, 10), "Mi": (0, 20), "Gi": (0, 30),
           "Ti": (0, 40), "Pi": (0, 50), "Ei": (0, 60)}
_INT32 = 2**31
# Fraction digits kept: the rest of a long fraction only tells whether it is zero, and one
# nonzero digit past the kept ones rounds the same once they are at least as many as the
# largest power of two (Ei, 2^60) can shift into the units.
_FRACTION_KEPT = 64


def value(raw: object, milli: bool = False, round_up: bool = True) -> int:
    """`raw` (a text, or a number as YAML or a test gives it) in units, or thousandths with
    `milli`; rounded up as Value and MilliValue round, or down; between 0 and MAX_VALUE."""
    if type(raw) is str:
        return _text(raw, milli, round_up)
    if isinstance(raw, bool):
        return 0
    if isinstance(raw, int):
        return min(max(raw * 1000 if milli else raw, 0), MAX_VALUE)
    if isinstance(raw, float):
        return _text(repr(raw), milli, round_up) if math.isfinite(raw) else 0
    return 0


def _text(raw: str, milli: bool, round_up: bool) -> int:
    m = _QUANTITY.fullmatch(raw.strip())
    if m is None:
        return 0
    sign, whole, fraction, exponent, suffix = m.groups()
    fraction = fraction or ""
    digits = (whole + fraction).lstrip("0")
    if not digits or sign == "-":
        return 0
    shift, twos = (3 if milli else 0) - len(fraction), 0  # value = digits * 10^shift * 2^twos
    if exponent is not None:
        if len(exponent.lstrip("+-").lstrip("0")) > 10:
            return 0  # past int32: the API server refuses it
        e = int(exponent)
        if not -_INT32 <= e < _INT32:
            return 0
        shift += e
    elif suffix:
        tens, twos = _SUFFIX[suffix]
        shift += tens
    significant = digits.rstrip("0")
    shift += len(digits) - len(significant)
    units = len(significant) + shift  # digits before the decimal point
    if units > 19:
        return MAX_VALUE  # at least 10^19
    if units < -20:
        return 1 if round_up else 0  # below 10^-20 * 2^60, so below 1
    keep = units + _FRACTION_KEPT
    if len(significant) > keep:
        significant = significant[:keep] + "1"
        shift = units - len(significant)
    n = int(significant) << twos
    scale: int = 10 ** abs(shift)  # at most 10^85: the bounds above hold shift there
    if shift >= 0:
        return min(n * scale, MAX_VALUE)
    return min(-(-n // scale) if round_up else n // scale, MAX_VALUE)
