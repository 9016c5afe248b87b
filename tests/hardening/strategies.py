"""Hypothesis strategies: pods and AdmissionReviews, plausible and wild.

"Wild" means wrong types at every level (metadata a list, containers a dict, resources a
string, limits an int, annotation values that are not strings...), random and boundary
quantities in every resource field, and random mutations of valid reviews.
"""

from __future__ import annotations

import copy
import json
import uuid
from pathlib import Path

from hypothesis import strategies as st

from tests.builders import container as c
from tests.builders import pod as make_pod
from tests.builders import review as make_review
from webhook.admission.review import OPERATIONS, VERSIONS
from webhook.admission.validate import Rules
from webhook.model import annotations as keys
from webhook.model.config import AllocatorConfig, Config, MthreadsConfig
from webhook.model.pods import VENDOR_WHOLE_GPU, parse_quantity

REPO = Path(__file__).resolve().parents[2]
COUNT, MEMORY, CORE = "mthreads.com/vgpu", "mthreads.com/sgpu-memory", "mthreads.com/sgpu-core"
ALLOCATOR = AllocatorConfig().user
USERS = ["alice", ALLOCATOR, "device-plugin", "", "system:admin", "system:serviceaccount:x:y"]

# The configurations the properties run under (SPEC 2): one model, two, odd capacities, disabled.
CONFIGS = {
    "s4000": Config(),
    "s5000": Config(mthreads=MthreadsConfig(memory_per_card=(160,))),
    "mixed": Config(mthreads=MthreadsConfig(memory_per_card=(96, 160))),
    "odd": Config(mthreads=MthreadsConfig(memory_per_card=(2, 120)),
                  allocator=AllocatorConfig(extra_writers=("device-plugin",))),
    "no-force": Config(scheduler_name="my-scheduler", force_overwrite_default_scheduler=False),
    "disabled": Config(mthreads=MthreadsConfig(enabled=False)),
}
RULES = {name: Rules.of(cfg) for name, cfg in CONFIGS.items()}

# Cards a pod may ask for before the fuzzers stop sending it to /mutate: see
# test_bugs.py::test_a_huge_card_count_is_answered_in_bounded_time_and_memory.
MUTATE_CARD_BOUND = 64

# -- values ------------------------------------------------------------------------------------

scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70),
                    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12))
json_values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)),
    max_leaves=12)
# What goes where an object (or a list, or a string) was expected.
wrong = st.one_of(scalars, st.lists(scalars, max_size=3),
                  st.dictionaries(st.text(max_size=5), scalars, max_size=3))


@st.composite
def shaped(draw, required: dict, optional: dict, one_in: int = 2) -> dict:
    """Like st.fixed_dictionaries, with each optional key present with probability
    1 - 1/one_in (fixed_dictionaries leaves optional keys out most of the time)."""
    out = {k: draw(v) for k, v in required.items()}
    for k, v in optional.items():
        if draw(st.integers(0, one_in - 1)):
            out[k] = draw(v)
    return out


VALID_MEMORY = [2, 4, 8, 16, 32, 64, 96, 120, 128, 160, 192, 320]
BOUNDARY = ["0", "-1", "1", "16", "17", "2147483647", "2147483648", "99999999999", "016", "1e3",
            "1.5", "16Gi", "32Mi", " 32", "32 ", "+1", "", "0x10", "\u0663", "1_0", "3", "12",
            "NaN", "null", "[1]"]
plain_numbers = st.one_of(st.sampled_from(VALID_MEMORY), st.integers(1, 20), st.just(16))
plain_quantity = st.one_of(plain_numbers.map(str), plain_numbers.map(str), plain_numbers)
wild_quantity = st.one_of(plain_quantity, st.sampled_from(BOUNDARY),
                          st.integers(-2**64, 2**64), st.integers(2**31 - 3, 2**31 + 3), wrong,
                          st.text(max_size=10))


def resource_map(wild: bool):
    """limits or requests with random values in the three resource fields (and others)."""
    q = wild_quantity if wild else plain_quantity
    named = shaped({}, {COUNT: q, MEMORY: q, CORE: q, "cpu": st.just("1"), "memory": st.just("1Gi")})
    if not wild:
        return named
    extra = st.dictionaries(st.one_of(st.just(VENDOR_WHOLE_GPU), st.text(max_size=24)), q, max_size=2)
    both = st.tuples(named, extra).map(lambda t: {**t[1], **t[0]})
    return st.one_of(named, named, both, wrong)


def _q(draw, n: int):
    """A plain number as the API server sends it (a string), sometimes as a JSON number."""
    return n if draw(st.integers(0, 7)) == 0 else str(n)


@st.composite
def asks(draw) -> dict:
    """What one container asks for, in the forms of SPEC 3 (valid or just off)."""
    form = draw(st.sampled_from(["none", "whole", "whole", "written", "slice", "slice", "slice",
                                 "slice-no-cores", "off"]))
    if form == "none":
        return draw(st.sampled_from([{}, {"cpu": "1"}]))
    if form == "whole":
        return {COUNT: _q(draw, draw(st.integers(1, 4)))}
    if form == "written":
        n, cap = draw(st.integers(1, 3)), draw(st.sampled_from([96, 160, 120, 2]))
        return {COUNT: _q(draw, n), MEMORY: _q(draw, n * cap), CORE: _q(draw, 16 * n)}
    memory = draw(st.sampled_from(VALID_MEMORY))
    if form == "slice-no-cores":
        return {COUNT: _q(draw, 1), MEMORY: _q(draw, memory)}
    if form == "slice":
        return {COUNT: _q(draw, 1), MEMORY: _q(draw, memory), CORE: _q(draw, draw(st.integers(1, 16)))}
    # just off: a rule 1-6 case
    return draw(st.sampled_from([
        {MEMORY: "32"}, {CORE: "8"}, {COUNT: "1", CORE: "8"}, {COUNT: "2", MEMORY: "32"},
        {COUNT: "1", MEMORY: "3"}, {COUNT: "1", MEMORY: "32", CORE: "17"}, {COUNT: "0"},
        {COUNT: "1", VENDOR_WHOLE_GPU: "1"}, {COUNT: "1", MEMORY: "16Gi"}]))


@st.composite
def plausible_resources(draw) -> dict:
    """asks() placed as users write them: limits and requests, limits only, requests only,
    or split between the two."""
    ask = draw(asks())
    where = draw(st.sampled_from(["both", "both", "limits", "requests", "split"]))
    if where == "both":
        return {"limits": ask, "requests": dict(ask)}
    if where in ("limits", "requests"):
        return {where: ask}
    items = sorted(ask.items())
    cut = draw(st.integers(0, len(items)))
    return {"limits": dict(items[:cut]), "requests": dict(items[cut:])}


def containers_of(wild: bool):
    rmap = resource_map(wild)
    resources = st.one_of(plausible_resources(), plausible_resources(),
                          shaped({}, {"limits": rmap, "requests": rmap}))
    names = st.sampled_from(["main", "side", "train", "a", "b"])
    security = shaped({}, {"privileged": st.booleans()})
    if wild:
        resources = st.one_of(resources, resources, resources, wrong)
        names = st.one_of(names, names, st.text(max_size=10), wrong)
        security = st.one_of(security, st.fixed_dictionaries({"privileged": wrong}), wrong)
    if wild:
        container = shaped({"name": names, "image": st.just("busybox:1.36")},
                           {"resources": resources}, one_in=4)
    else:
        container = st.fixed_dictionaries({"name": names, "image": st.just("busybox:1.36"),
                                           "resources": resources})
    container = st.tuples(container, st.integers(0, 9), security).map(
        lambda t: {**t[0], "securityContext": t[2]} if t[1] == 0 else t[0])
    if wild:
        container = st.one_of(container, container, container, wrong)
    return container


BENIGN_KEYS = [keys.CARD_MODEL, keys.TO_ALLOCATE, keys.REQUEST_GPU_NUM, keys.USE_CARDS,
               keys.NODE_POLICY, "team", "example.com/x"]
ALL_KEYS = BENIGN_KEYS + sorted(keys.ALLOCATION_KEYS) + [keys.MIRROR]
ANNOTATION_VALUES = ["MTT-S4000", "MTT-S5000", "Mthreads-120", "Mthreads-2", "2", "1", ";",
                     ",Mthreads,16384,8:;", "node-1-mthreads-0,Mthreads,49152,16:;", "allocating", ""]


def annotations_of(wild: bool):
    key = st.one_of(st.just(keys.CARD_MODEL), st.sampled_from(BENIGN_KEYS),
                    st.sampled_from(ALL_KEYS), st.text(max_size=16))
    value = st.one_of(st.sampled_from(ANNOTATION_VALUES), st.text(max_size=16))
    if wild:
        value = st.one_of(value, wrong)  # the API server never sends these; a client may
    ann = st.dictionaries(key, value, max_size=3)
    return st.one_of(ann, ann, wrong) if wild else ann


def pods(wild: bool = True):
    """A Pod object; with `wild`, any part of it may be of a wrong type."""
    container = containers_of(wild)
    container_list = st.lists(container, min_size=0 if wild else 1, max_size=4)
    init_list = st.lists(container, max_size=2)
    node = st.sampled_from(["node-1", ""])
    sched = st.sampled_from(["", "default-scheduler", "hami-scheduler", "my-scheduler", "other"])
    if wild:
        container_list = st.one_of(container_list, container_list, wrong)
        init_list = st.one_of(init_list, wrong)
        node, sched = st.one_of(node, wrong), st.one_of(sched, wrong)
    spec = st.one_of(
        shaped({"containers": container_list}, {"schedulerName": sched}),
        shaped({"containers": container_list}, {"initContainers": init_list, "nodeName": node,
                                                "schedulerName": sched}, one_in=3))
    meta = shaped({"name": st.just("p"), "namespace": st.just("default")},
                  {"annotations": annotations_of(wild), "labels": st.just({"app": "x"})})
    if wild:
        spec, meta = st.one_of(spec, spec, spec, wrong), st.one_of(meta, meta, meta, wrong)
        return shaped({"apiVersion": st.just("v1"), "kind": st.just("Pod")},
                      {"metadata": meta, "spec": spec}, one_in=6)
    return st.fixed_dictionaries({"apiVersion": st.just("v1"), "kind": st.just("Pod"),
                                  "metadata": meta, "spec": spec})


any_pod = st.one_of(pods(wild=False), pods(wild=True))
mostly_plausible_pod = st.one_of(pods(wild=False), pods(wild=False), pods(wild=True))
mutate_pods = st.one_of(pods(wild=False), pods(wild=False), pods(wild=False), pods(wild=True))


@st.composite
def edited(draw, pod: dict) -> dict:
    """`pod` with its annotations edited: keys added, changed or removed."""
    new = copy.deepcopy(pod)
    meta = new.get("metadata")
    if not isinstance(meta, dict):
        if draw(st.booleans()):
            return new
        meta = new["metadata"] = {}
    if not isinstance(meta.get("annotations"), dict):
        meta["annotations"] = {}
    ann = meta["annotations"]
    for _ in range(draw(st.integers(0, 3))):
        key = draw(st.sampled_from(ALL_KEYS))
        action = draw(st.sampled_from(["set", "set", "remove"]))
        if action == "remove":
            ann.pop(key, None)
        else:
            ann[key] = draw(st.one_of(st.sampled_from(ANNOTATION_VALUES), st.text(max_size=8)))
    if draw(st.integers(0, 5)) == 0:
        meta["annotations"] = draw(wrong)
    return new


@st.composite
def updates(draw) -> tuple[dict, dict]:
    """(oldObject, object) of a pod UPDATE: mostly an annotation edit of one pod."""
    old = draw(mostly_plausible_pod)
    if draw(st.integers(0, 5)) == 0:
        return old, draw(any_pod)
    return old, draw(edited(old))
rules = st.sampled_from(sorted(RULES)).map(RULES.__getitem__)
enabled_rules = st.sampled_from(sorted(n for n in RULES if n != "disabled")).map(RULES.__getitem__)
users = st.sampled_from(USERS)


def too_many_cards(pod) -> bool:
    """Does some container name a count above MUTATE_CARD_BOUND (anywhere it could be read)?"""
    if not isinstance(pod, dict) or not isinstance(pod.get("spec"), dict):
        return False
    for field in ("containers", "initContainers"):
        items = pod["spec"].get(field)
        for item in items if isinstance(items, list) else ():
            res = item.get("resources") if isinstance(item, dict) else None
            for part in ("limits", "requests"):
                m = res.get(part) if isinstance(res, dict) else None
                q = parse_quantity(m.get(COUNT)) if isinstance(m, dict) else None
                if q is not None and q > MUTATE_CARD_BOUND:
                    return True
    return False


# -- AdmissionReviews ---------------------------------------------------------------------------

POD_KIND = {"group": "", "version": "v1", "kind": "Pod"}


@st.composite
def reviews(draw, wild: bool = True) -> dict:
    op = draw(st.sampled_from(OPERATIONS + ("CREATE", "UPDATE", "CREATE")))
    req: dict = {"uid": str(uuid.UUID(int=draw(st.integers(0, 2**128 - 1)))),
                 "kind": POD_KIND, "resource": {"group": "", "version": "v1", "resource": "pods"},
                 "operation": op, "userInfo": {"username": draw(users)},
                 "object": draw(any_pod if wild else pods(False))}
    if op in ("UPDATE", "DELETE") or draw(st.booleans()):
        req["oldObject"] = draw(any_pod if wild else pods(False))
    doc = {"apiVersion": draw(st.sampled_from(VERSIONS)), "kind": "AdmissionReview", "request": req}
    if wild:
        for key, alt in (("kind", st.one_of(st.just({"group": "apps", "version": "v1",
                                                         "kind": "Deployment"}), wrong)),
                         ("operation", st.one_of(st.text(max_size=8), wrong)),
                         ("uid", st.one_of(st.just(""), st.text(max_size=40), wrong)),
                         ("userInfo", st.one_of(shaped({"username": wrong}, {}), wrong)),
                         ("object", wrong), ("oldObject", wrong)):
            if draw(st.integers(0, 11)) == 0:  # now and then, one field of a wrong type or gone
                if draw(st.booleans()):
                    req.pop(key, None)
                else:
                    req[key] = draw(alt)
    return doc


def _base_reviews() -> list[dict]:
    docs = [json.loads(p.read_text()) for p in sorted((REPO / "manifests/examples/admission").glob("*.json"))]
    bound = make_pod(c("train", 1, 32, 8), annotations={keys.ALLOCATED: "n-mthreads-0,Mthreads,16384,8:;",
                                                         keys.BIND_PHASE: "allocating"})
    docs += [
        make_review(make_pod(c("train", 1, 32, 8), c("side"))),
        make_review(make_pod(c("a", 2), init=(c("init", 1, 2),))),
        make_review(make_pod(c("a", 1, 32, 4), c("b", 1, 64, 4)), version=VERSIONS[1]),
        make_review(make_pod(c("a", 1, requests_only=True), scheduler="default-scheduler")),
        make_review(make_pod(c("web")), operation="UPDATE", old=make_pod(c("web"))),
        make_review(bound, operation="UPDATE", old=make_pod(c("train", 1, 32, 8))),
        make_review(bound, operation="UPDATE", old=bound, user=ALLOCATOR),
        make_review(make_pod(c("a", 1, 96, 16), annotations={keys.CARD_MODEL: "MTT-S4000"})),
    ]
    return docs


BASE_REVIEWS = _base_reviews()


@st.composite
def mutated_reviews(draw) -> dict:
    """A valid review with one to four random edits: a key deleted, a value replaced by
    something of another type, an element duplicated."""
    doc = copy.deepcopy(draw(st.sampled_from(BASE_REVIEWS)))
    for _ in range(draw(st.integers(1, 4))):
        parent, key = None, None
        node = doc
        while isinstance(node, (dict, list)) and node and (parent is None or draw(st.integers(0, 4))):
            k = draw(st.sampled_from(sorted(node, key=str) if isinstance(node, dict) else range(len(node))))
            parent, key, node = node, k, node[k]
        if parent is None:
            continue
        action = draw(st.sampled_from(["delete", "replace", "replace", "duplicate", "stringify"]))
        if action == "delete":
            del parent[key]
        elif action == "replace":
            parent[key] = draw(st.one_of(wrong, wild_quantity, json_values))
        elif action == "duplicate" and isinstance(parent, list):
            parent.insert(key, copy.deepcopy(node))
        else:
            parent[key] = json.dumps(node) if not isinstance(node, str) else [node]
    return doc


any_review = st.one_of(reviews(wild=False), reviews(wild=True), mutated_reviews())

CONTENT_TYPES = ["application/json", "application/json", "application/json; charset=utf-8",
                 "text/plain", "application/x-www-form-urlencoded", "", "application/yaml",
                 "application/json-patch+json"]


@st.composite
def bodies(draw) -> tuple[bytes, str, dict | None]:
    """(body, content type, the review it encodes or None) for an admission POST."""
    kind = draw(st.integers(0, 9))
    if kind == 0:
        return draw(st.binary(max_size=200)), draw(st.sampled_from(CONTENT_TYPES)), None
    if kind == 1:
        value = draw(json_values)
        return json.dumps(value).encode(), "application/json", None
    doc = draw(any_review)
    raw = json.dumps(doc).encode()
    if kind == 2:  # cut short, or with junk after it
        raw = raw[:draw(st.integers(0, len(raw)))] if draw(st.booleans()) else raw + b"}x"
        return raw, "application/json", None
    return raw, draw(st.sampled_from(CONTENT_TYPES[:3])) if kind > 3 else \
        draw(st.sampled_from(CONTENT_TYPES)), doc


# -- quantities and node annotations (issue 46: findings 1 and 7) ------------------------------

SUFFIXES = ["", "n", "u", "m", "k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"]
# exponents near what matters: int64's digits, int32's bound (the API server's), far past both
EXPONENTS = st.one_of(st.integers(-30, 30), st.integers(-2**31 - 2, 2**31 + 2),
                      st.sampled_from([-2**31, 2**31 - 1, 2**31, 300_000, 750_000, 999_999,
                                       1_000_000, -1_000_000, 10**20]))


def _digits(min_size: int = 0):
    """Digits as the API server may hold them: a few, sometimes thousands, sometimes padded."""
    few = st.text("0123456789", min_size=min_size, max_size=25)
    many = st.tuples(st.sampled_from("0123456789"), st.integers(19, 6000)).map(lambda t: t[0] * t[1])
    return st.one_of(few, few, few, many, st.tuples(st.integers(0, 5000), few).map(
        lambda t: "0" * t[0] + t[1]))


@st.composite
def quantity_texts(draw) -> str:
    """A Kubernetes quantity (sign, digits, fraction, an exponent or any suffix) as the API
    server stores one or a user writes one, and near misses of its grammar."""
    sign = draw(st.sampled_from(["", "", "", "+", "-"]))
    whole, fraction = draw(_digits(1)), draw(st.one_of(st.none(), _digits()))
    number = whole if fraction is None else f"{whole}.{fraction}"
    tail = draw(st.one_of(st.sampled_from(SUFFIXES),
                          EXPONENTS.map(lambda e: f"{'e' if e % 2 else 'E'}{e}")))
    text = sign + number + tail
    return draw(st.one_of(st.just(text), st.just(text), st.just(text),
                          st.sampled_from([f" {text}", f"{text} ", f"{text}x", f"{text}Ki",
                                           f"{text}e", text.replace(".", ".."), text.upper()])))


# what a pod, a node or a config may hold where a quantity goes
any_quantity = st.one_of(quantity_texts(), quantity_texts(), wild_quantity,
                         st.floats(allow_nan=True, allow_infinity=True),
                         st.integers(-2**70, 2**70), st.integers(10**30, 10**60))

CARD_LIMIT_TEXTS = st.one_of(
    st.integers(-3, 40).map(str), _digits(), st.text(max_size=8),
    st.sampled_from(["016", " 4 ", "+4", "-4", "4.0", "1e1", "١٦", "0x10", "9" * 4301, "0" * 5000 + "4"]))


@st.composite
def cordon_texts(draw, node: str) -> str:
    """hami.io/device-cordon values: card ids of the node and of others, junk, empty items,
    spaces, a long id, many items."""
    item = st.one_of(st.integers(0, 20).map(lambda i: f"{node}-mthreads-{i}"),
                     st.integers(0, 3).map(lambda i: f"other-mthreads-{i}"), st.text(max_size=6),
                     st.sampled_from(["", " ", f" {node}-mthreads-1 ", f"{node}-mthreads-",
                                      f"{node}-mthreads-{'9' * 5000}", "x" * 3000]))
    items = draw(st.lists(item, max_size=draw(st.sampled_from([4, 4, 400]))))
    return ",".join(items)
