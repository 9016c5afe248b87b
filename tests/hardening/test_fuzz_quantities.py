"""Property-based tests of every quantity the project reads (pods, nodes, the config) and of every
node annotation it reads (hami.io/device-cordon, mthreads.com/max-instances-per-card): issue 46,
findings 1 and 7.

Invariants: a quantity reads as exact arithmetic says (rounded up as Quantity.Value and
MilliValue round, or down for allocatable, saturated at 2^63-1, 0 when unreadable or not
positive), in bounded time; a pod or a node carrying any quantity is read, listed and decided
on without an exception, and a relist with it keeps every other bound pod's share; a config
holding any number loads or stops with one short line; a node annotation of any content gives
a limit from 1 to 16 (the number it says when that is one, else the config's), never raises,
and a warning of bounded length told once per change and counted.
"""

from __future__ import annotations

import copy
import math
import time
from decimal import Context, InvalidOperation
from fractions import Fraction

import pytest
import yaml
from hypothesis import event, given
from hypothesis import strategies as st

from tests.builders import mt_node, plain, sched_pod, slice_
from tests.hardening.conftest import count_case, profile
from tests.hardening.strategies import (
    CARD_LIMIT_TEXTS,
    SUFFIXES,
    any_quantity,
    cordon_texts,
    quantity_texts,
    rules,
)
from webhook.admission.validate import check_create
from webhook.model import annotations as keys
from webhook.model.config import Config, ConfigError, MthreadsConfig, load_config
from webhook.model.pods import InvalidRequest, Rule
from webhook.scheduling.cache import SchedulerCache
from webhook.scheduling.decide import NoFit, Placement, place
from webhook.scheduling.inventory import node_cards
from webhook.scheduling.node_annotations import IgnoredEntries, card_settings
from webhook.scheduling.request import request_of
from webhook.scheduling.resources import (
    _whole_or_zero,
    cpu_milli,
    device_allocatable,
    device_requests,
    node_allocatable,
    pod_requests,
    whole_units,
)

pytestmark = pytest.mark.fuzz

MAX = 2**63 - 1
MT = MthreadsConfig(memory_per_card=(96, 160))
NAMES = (MT.count_resource, MT.memory_resource, MT.core_resource)
BOUND = 2.0  # seconds one case may take, a wide margin: 1e750000 took 14.6 s before the fix
_TENS = {"n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_EXACT = Context(prec=10_000, Emax=10**15, Emin=-10**15)


def exact(text: str, milli: bool, up: bool) -> int:
    """The oracle: the quantity by Decimal and Fraction arithmetic, no shortcut (slow on purpose
    only where the answer is plain: a magnitude far past int64, or far below one)."""
    text = text.strip()
    suffix = next((s for s in sorted(SUFFIXES, key=len, reverse=True) if s and text.endswith(s)), "")
    number = text[:len(text) - len(suffix)]
    allowed = set("0123456789.+-") | (set() if suffix else set("eE"))
    if not number or not set(number) <= allowed or number in "+-." or \
            any(c in "+-" for c in number[1:].lower().split("e", 1)[0]):
        return 0
    _, e, exponent = number.lower().partition("e")
    if e and (not exponent.lstrip("+-").isdigit() or exponent[1:2] in ("+", "-")):
        return 0
    if e and not -2**31 <= int(exponent) < 2**31:
        return 0  # the API server refuses an exponent past int32
    try:
        q = _EXACT.create_decimal(number)
    except InvalidOperation:
        return 0
    if not q.is_finite() or q <= 0:
        return 0
    magnitude = q.adjusted() + (_TENS.get(suffix, 0)) + (3 if milli else 0)
    if magnitude >= 40:
        return MAX
    if magnitude < -40:
        return 1 if up else 0
    value = Fraction(q) * Fraction(10) ** (_TENS.get(suffix, 0) + (3 if milli else 0))
    if suffix.endswith("i"):
        value *= 2 ** (10 * (SUFFIXES.index(suffix) - 9))
    return min(math.ceil(value) if up else math.floor(value), MAX)


@profile()
@given(text=quantity_texts())
def test_a_quantity_text_reads_as_exact_arithmetic_says(text):
    count_case("quantity text")
    start = time.perf_counter()
    got = (whole_units(text), cpu_milli(text), _whole_or_zero(text))
    assert time.perf_counter() - start < BOUND
    assert got == (exact(text, False, True), exact(text, True, True), exact(text, False, False)), text[:80]
    event("saturated" if MAX in got else "zero" if got == (0, 0, 0) else "a number")


def _resources(draw, n: int) -> dict:
    names = st.sampled_from(["cpu", "memory", "ephemeral-storage", "hugepages-2Mi", "pods",
                             "example.com/nic", *NAMES])
    return draw(st.dictionaries(names, any_quantity, max_size=n))


@st.composite
def pods_with_quantities(draw) -> dict:
    containers = [{"name": f"c{i}", "resources": {"requests": _resources(draw, 4), "limits": _resources(draw, 3)}}
                  for i in range(draw(st.integers(1, 3)))]
    p = sched_pod(*containers, init=tuple(copy.deepcopy(containers[:draw(st.integers(0, 1))])))
    if draw(st.booleans()):
        p["spec"]["overhead"] = _resources(draw, 2)
    return p


@st.composite
def nodes_with_quantities(draw) -> dict:
    node = mt_node(f"n{draw(st.integers(0, 3))}", draw(st.integers(0, 4)), draw(st.sampled_from([96, 160])))
    status = node["status"]
    for field in ("allocatable", "capacity"):
        status[field].update(_resources(draw, 4))
    return node


@profile(scale=0.5)
@given(pod=pods_with_quantities(), nodes=st.lists(nodes_with_quantities(), min_size=1, max_size=3))
def test_pods_and_nodes_of_any_quantity_are_read_listed_and_decided(pod, nodes):
    count_case("pod and node quantities")
    start = time.perf_counter()
    r, d = pod_requests(pod), device_requests(pod, NAMES)
    assert r.pods == 1 and min(r.cpu_milli, r.memory_bytes, *(v for _, v in r.other), *d) >= 0
    for node in nodes:
        alloc = node_allocatable(node)
        assert 0 <= alloc.cpu_milli <= MAX and 0 <= alloc.pods <= MAX
        assert all(v is None or 0 <= v <= MAX for v in device_allocatable(node, NAMES))
        node_cards(node, MT)
    cache = SchedulerCache(MT)
    cache.apply("node", "RESET", nodes)
    first = nodes[0]["metadata"]["name"]
    holder = sched_pod(plain(cpu="1"), name="holder", node=first, phase="Running")
    bound = copy.deepcopy(pod)
    bound["spec"]["nodeName"] = nodes[0]["metadata"]["name"]
    bound["status"]["phase"] = "Running"
    cache.apply("pod", "RESET", [bound, holder])  # a relist: the pod's quantities never stop it
    assert cache.read(lambda state: state.requested_on(first).cpu_milli) >= 1000  # the holder's
    config = Config(mthreads=MT)
    ask = request_of(pod, config)
    if ask.invalid is None:
        assert isinstance(cache.read(lambda state: place(pod, ask, state, config)), (Placement, NoFit))
    assert time.perf_counter() - start < BOUND


@profile()
@given(rules=rules, text=quantity_texts())
def test_the_admission_rules_read_any_quantity_text_and_deny_it_in_one_short_line(rules, text):
    count_case("admission quantity")
    p = sched_pod(slice_(8, 2, name="train"))
    p["spec"]["containers"][0]["resources"]["limits"][MT.memory_resource] = text
    try:
        check_create(p, rules, "alice")
    except InvalidRequest as e:
        assert e.rule in (Rule.QUANTITY, Rule.MEMORY_VALUE, Rule.ONE_SHARED_CARD) \
            and len(e.message) < 600, e.message[:200]
        event(f"denied rule {int(e.rule)}")


config_values = st.one_of(any_quantity, st.lists(any_quantity, max_size=3),
                          st.integers(-2**64, 2**64), st.sampled_from(["9" * 5000, "1" * 4301]))


@profile(scale=0.5)
@given(memory=config_values, instances=config_values, raw=st.booleans())
def test_a_config_of_any_number_loads_or_stops_with_one_short_line(tmp_path_factory, memory, instances, raw):
    """`raw`: the values written as YAML text as they are (a 5,000-digit integer), else dumped."""
    count_case("config quantity")
    f = tmp_path_factory.mktemp("config") / "c.yaml"
    if raw:
        f.write_text(f"devices:\n  mthreads:\n    memoryPerCard: {_plain(memory)}\n"
                     f"    maxInstancesPerCard: {_plain(instances)}\n")
    else:
        f.write_text(yaml.safe_dump({"devices": {"mthreads": {"memoryPerCard": memory,
                                                              "maxInstancesPerCard": instances}}}))
    try:
        config = load_config(str(f))
    except ConfigError as e:
        assert "\n" not in str(e) and len(str(e)) < 500 + len(str(f)), str(e)[:200]
        event("refused")
        return
    assert all(2 <= c <= 2**31 - 1 for c in config.mthreads.memory_per_card)
    assert 1 <= config.mthreads.max_instances_per_card <= 16
    event("loaded")


def _plain(value) -> str:
    """A value as YAML text with no quoting: what an operator might type."""
    if isinstance(value, list):
        return "[" + ", ".join(_plain(v) for v in value) + "]"
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 14_000:
        return "1" * 4400
    return str(value) if not isinstance(value, str) or value.strip() and "\n" not in value else repr(value)


def _limit_oracle(raw: str) -> int | None:
    text = raw.strip()
    if not text or not text.isascii() or not text.isdigit():
        return None
    significant = text.lstrip("0")
    return int(significant) if len(significant) <= 2 and 1 <= int(significant or "0") <= 16 else None


@profile()
@given(limit=st.one_of(st.none(), CARD_LIMIT_TEXTS), data=st.data(), default=st.integers(1, 16))
def test_node_annotations_of_any_content_give_a_limit_and_a_short_warning(limit, data, default):
    count_case("node annotations")
    cordon = data.draw(st.one_of(st.none(), cordon_texts("n")))
    ann = {k: v for k, v in ((keys.CORDON, cordon), (keys.MAX_INSTANCES, limit)) if v is not None}
    node = mt_node("n", 2, annotations=ann)
    node["metadata"]["uid"] = "uid-n"
    start = time.perf_counter()
    s = card_settings(node, default)
    want = _limit_oracle(limit) if limit is not None else default
    assert s.max_instances == (want if want is not None else default)
    assert (keys.MAX_INSTANCES in s.ignored_keys) == (limit is not None and want is None)
    assert all(c.startswith("n-mthreads-") for c in s.cordoned)
    told = IgnoredEntries(default)
    said = told.seen("RESET", [node]) + told.seen("MODIFIED", node)  # a heartbeat: told once
    assert len(said) == (1 if s.ignored else 0) and all(len(w.message) < 2500 for w in said)
    assert sum(told.counts.values()) == len(s.ignored_keys)
    assert time.perf_counter() - start < BOUND
    event("ignored" if s.ignored else "read")
