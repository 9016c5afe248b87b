import pytest

from webhook.model.cards import Fleet, model_name, valid_memory_values


@pytest.mark.parametrize("units, valid", [
    (96, (2, 4, 8, 16, 32, 64, 96)),                    # MTT S4000, the user's document
    (160, (2, 4, 8, 16, 32, 64, 128, 160)),             # MTT S5000
    (120, (2, 4, 8, 16, 32, 64, 120)),                  # unknown capacity, same rule
    (128, (2, 4, 8, 16, 32, 64, 128)),                  # a power of two is listed once
    (2, (2,)),
    (3, (2, 3)),
])
def test_valid_values(units, valid):
    assert valid_memory_values(units) == valid


@pytest.mark.parametrize("units, name", [(96, "MTT-S4000"), (160, "MTT-S5000"), (120, "Mthreads-120")])
def test_model_names(units, name):
    assert model_name(units) == name


def test_mixed_fleet_union_and_texts():
    fleet = Fleet.of((96, 160))
    assert sorted(fleet.valid) == [2, 4, 8, 16, 32, 64, 96, 128, 160]
    assert fleet.smallest.name == "MTT-S4000"
    assert fleet.valid_text(None) == "2, 4, 8, 16, 32, 64, 96, 128, 160 (memoryPerCard [96, 160])"
    assert fleet.valid_text("MTT-S5000") == "2, 4, 8, 16, 32, 64, 128, 160 (MTT-S5000, 160 units per card)"
    assert [m.name for m in fleet.models_for(None)] == ["MTT-S4000", "MTT-S5000"]
    assert [m.name for m in fleet.models_for("MTT-S5000")] == ["MTT-S5000"]
