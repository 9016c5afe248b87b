"""The annotations users type to steer placement, checked at admission (SPEC 4; issue 13).

The allocator reads `hami.io/node-scheduler-policy`, `hami.io/gpu-scheduler-policy`,
`mthreads.ai/use-gpuuuid` and `mthreads.ai/nouse-gpuuuid`; a value it cannot use would be
ignored without a word, so it is refused here with what is valid.
"""

from __future__ import annotations

import re

from ..base.json_types import JsonObject
from ..model import annotations as keys
from ..model.config import POLICIES  # what the allocator implements
from ..model.pods import InvalidRequest, Rule

POLICY_KEYS = (keys.NODE_POLICY, keys.GPU_POLICY)
CARD_KEYS = (keys.USE_CARDS, keys.NOUSE_CARDS)
USER_KEYS = POLICY_KEYS + CARD_KEYS
# `<node>-mthreads-<index>`: a node name is a DNS subdomain (RFC 1123, lower case).
_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
CARD_ID = re.compile(rf"{_LABEL}(\.{_LABEL})*-mthreads-(0|[1-9][0-9]{{0,3}})")


def check_user_annotations(ann: JsonObject, only: tuple[str, ...] = USER_KEYS) -> None:
    """Raise InvalidRequest for the first of `only` whose value the allocator cannot use."""
    for key in only:
        if key not in ann:
            continue
        value = ann[key]
        if key in POLICY_KEYS:
            if value not in POLICIES:
                raise InvalidRequest(Rule.POLICY_ANNOTATIONS, f"annotation {key}={value!r} is not a policy the "
                                           f"allocator implements; valid values are "
                                           f"{', '.join(POLICIES)}")
        elif not isinstance(value, str) or not all(CARD_ID.fullmatch(p.strip())
                                                   for p in value.split(",")):
            bad = value if not isinstance(value, str) else next(
                p.strip() for p in value.split(",") if not CARD_ID.fullmatch(p.strip()))
            raise InvalidRequest(Rule.POLICY_ANNOTATIONS, f"annotation {key}={value!r}: {bad!r} is not a card id; "
                                       f"the value is card ids <node>-mthreads-<index> separated "
                                       f"by commas, e.g. node-1-mthreads-0,node-1-mthreads-1")
