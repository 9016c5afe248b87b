import pytest

from tests.builders import mt_node
from webhook.model.config import MthreadsConfig
from webhook.scheduling.inventory import node_cards

MT = MthreadsConfig(memory_per_card=(96, 160))


@pytest.mark.parametrize("capacity, cards, units, problem", [
    ({"mthreads.com/sgpu-core": "32", "mthreads.com/sgpu-memory": "192"}, 2, 96, None),
    ({"mthreads.com/sgpu-core": "16", "mthreads.com/sgpu-memory": "160"}, 1, 160, None),
    ({"mthreads.com/sgpu-core": "64", "mthreads.com/sgpu-memory": "480"}, 4, 120, None),  # unknown model
    ({"cpu": "4"}, 0, None, None),  # not an Mthreads node
    ({"mthreads.com/sgpu-core": "0", "mthreads.com/sgpu-memory": "0"}, 0, None, None),  # plugin down
    ({"mthreads.com/sgpu-core": "24", "mthreads.com/sgpu-memory": "192"}, 0, None, "multiple of 16"),
    ({"mthreads.com/sgpu-core": "48", "mthreads.com/sgpu-memory": "100"}, 0, None, "does not divide"),
    ({"mthreads.com/sgpu-core": "32"}, 0, None, "not both positive"),
    ({"mthreads.com/sgpu-memory": "96"}, 0, None, "not both positive"),
    ({"mthreads.com/sgpu-core": "16", "mthreads.com/sgpu-memory": "1k"}, 0, None, "not both positive"),
    ({"mthreads.com/sgpu-core": "-16", "mthreads.com/sgpu-memory": "96"}, 0, None, "not both positive"),
    ({"mthreads.com/sgpu-core": "32", "mthreads.com/sgpu-memory": "2"}, 0, None, "less than"),
])
def test_cards_from_capacity(capacity, cards, units, problem):
    got = node_cards(mt_node("n1", capacity=capacity), MT)
    assert len(got.cards) == cards
    if cards:
        assert {c.model.units for c in got.cards} == {units}
        assert [c.id for c in got.cards] == [f"n1-mthreads-{i}" for i in range(cards)]
    assert (problem is None) == (got.problem is None)
    if problem:
        assert problem in got.problem


def test_model_names_follow_units():
    assert node_cards(mt_node("a", 1, 96), MT).cards[0].model.name == "MTT-S4000"
    assert node_cards(mt_node("b", 1, 160), MT).cards[0].model.name == "MTT-S5000"
    assert node_cards(mt_node("b", 1, 160), MT).cards[0].memory_mib == 160 * 512
