import pytest

from webhook.model.config import Config, ConfigError, load_config, parse_config


def test_no_file_means_defaults():
    cfg = load_config(None)
    assert cfg == Config()
    assert cfg.scheduler_name == "hami-scheduler"
    assert cfg.mthreads.memory_per_card == (96,)
    assert cfg.allocator.node_policy == "binpack" and cfg.allocator.gpu_policy == "spread"
    assert cfg.mthreads.max_instances_per_card == 16


def test_empty_file_means_defaults(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("")
    assert load_config(str(f)) == Config()


def test_full_file(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("""
schedulerName: my-sched
forceOverwriteDefaultScheduler: false
devices:
  mthreads:
    enabled: true
    memoryPerCard: [96, 160]
    resourceCountName: example.com/vgpu
    resourceMemoryName: example.com/mem
    resourceCoreName: example.com/core
    maxInstancesPerCard: 4
allocator:
  user: system:serviceaccount:gpu:alloc
  extraWriters: [system:serviceaccount:gpu:plugin]
  nodePolicy: spread
  gpuPolicy: binpack
""")
    cfg = load_config(str(f))
    assert cfg.scheduler_name == "my-sched"
    assert cfg.force_overwrite_default_scheduler is False
    assert cfg.mthreads.memory_per_card == (96, 160)
    assert cfg.mthreads.count_resource == "example.com/vgpu"
    assert cfg.mthreads.max_instances_per_card == 4
    assert cfg.allocator.writers == {"system:serviceaccount:gpu:alloc",
                                     "system:serviceaccount:gpu:plugin"}
    assert (cfg.allocator.node_policy, cfg.allocator.gpu_policy) == ("spread", "binpack")


@pytest.mark.parametrize("value, expected", [(96, (96,)), (160, (160,)), ([120], (120,)),
                                             ([96, 160], (96, 160))])
def test_memory_per_card_forms(value, expected):
    assert parse_config({"devices": {"mthreads": {"memoryPerCard": value}}}) \
        .mthreads.memory_per_card == expected


@pytest.mark.parametrize("data, names", [
    ({"schedulerNmae": "x"}, "schedulerNmae: unknown key"),
    ({"devices": {"mthreads": {"memoryPerCrad": [96]}}}, "devices.mthreads.memoryPerCrad: unknown key"),
    ({"devices": {"nvidia": {}}}, "devices.nvidia: unknown key"),
    ({"allocator": {"usr": "x"}}, "allocator.usr: unknown key"),
    ({"devices": {"mthreads": {"memoryPerCard": []}}}, "devices.mthreads.memoryPerCard: must list"),
    ({"devices": {"mthreads": {"memoryPerCard": [96, 1]}}}, "devices.mthreads.memoryPerCard[1]"),
    ({"devices": {"mthreads": {"memoryPerCard": ["96"]}}}, "devices.mthreads.memoryPerCard[0]"),
    ({"devices": {"mthreads": {"memoryPerCard": [96, 96]}}}, "listed twice"),
    ({"devices": {"mthreads": {"memoryPerCard": True}}}, "devices.mthreads.memoryPerCard: must be a list"),
    ({"devices": {"mthreads": {"memoryPerCard": 1.5}}}, "devices.mthreads.memoryPerCard: must be a list"),
    ({"devices": {"mthreads": {"enabled": "yes"}}}, "devices.mthreads.enabled: must be true or false"),
    ({"devices": {"mthreads": {"maxInstancesPerCard": 0}}}, "devices.mthreads.maxInstancesPerCard: must be a whole number from 1 to 16, got int 0"),
    ({"devices": {"mthreads": {"maxInstancesPerCard": 17}}}, "devices.mthreads.maxInstancesPerCard: must be a whole number from 1 to 16, got int 17"),
    ({"devices": {"mthreads": {"maxInstancesPerCard": "8"}}}, "devices.mthreads.maxInstancesPerCard: must be a whole number from 1 to 16, got '8'"),
    ({"devices": {"mthreads": {"maxInstancesPerCard": True}}}, "devices.mthreads.maxInstancesPerCard"),
    ({"forceOverwriteDefaultScheduler": 1}, "forceOverwriteDefaultScheduler: must be true or false"),
    ({"schedulerName": ""}, "schedulerName: must be a non-empty string"),
    ({"schedulerName": 5}, "schedulerName: must be a non-empty string"),
    ({"devices": {"mthreads": {"resourceCountName": None}}}, "devices.mthreads.resourceCountName"),
    ({"allocator": {"nodePolicy": "fill"}}, "allocator.nodePolicy: must be one of binpack, spread"),
    ({"allocator": {"gpuPolicy": None}}, "allocator.gpuPolicy"),
    ({"allocator": {"extraWriters": "bob"}}, "allocator.extraWriters: must be a list"),
    ({"allocator": {"extraWriters": ["ok", 3]}}, "allocator.extraWriters[1]"),
    ({"devices": []}, "devices: must be a mapping"),
    ([1, 2], "the file: must be a mapping"),
])
def test_bad_config_names_the_key(data, names):
    with pytest.raises(ConfigError) as e:
        parse_config(data)
    assert names in str(e.value)
    assert "\n" not in str(e.value)


def test_bad_yaml_names_the_file_and_line(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("devices:\n  mthreads: [\n")
    with pytest.raises(ConfigError, match=r"c\.yaml: not valid YAML at line"):
        load_config(str(f))


def test_two_documents_are_refused(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("schedulerName: a\n---\nschedulerName: b\n")
    with pytest.raises(ConfigError, match=r"c\.yaml: holds 2 YAML documents; the config is one"):
        load_config(str(f))


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(str(tmp_path / "nope.yaml"))


@pytest.mark.parametrize("text, message", [
    ("devices:\n  mthreads:\n    memoryPerCard: [" + "9" * 5000 + "]\n",
     "c.yaml: holds a number too long to read (more than 4,300 digits)"),
    ("devices:\n  mthreads:\n    maxInstancesPerCard: " + "1" * 4301 + "\n",
     "c.yaml: holds a number too long to read (more than 4,300 digits)"),
    ("devices:\n  mthreads:\n    memoryPerCard: [" + "9" * 4000 + "]\n",
     "c.yaml: devices.mthreads.memoryPerCard[0]: must be a whole number of 512 MiB units, from 2 "
     "to 2147483647, got an integer of 4000 digits"),
    ("devices:\n  mthreads:\n    memoryPerCard: [2147483648]\n",
     "c.yaml: devices.mthreads.memoryPerCard[0]: must be a whole number of 512 MiB units, from 2 "
     "to 2147483647, got int 2147483648"),
    ("devices:\n  mthreads:\n    memoryPerCard: [1e1000000]\n",
     "c.yaml: devices.mthreads.memoryPerCard[0]: must be a whole number of 512 MiB units, from 2 "
     "to 2147483647, got '1e1000000'"),
    ("allocator:\n  nodePolicy: " + "x" * 100_000 + "\n",
     f"c.yaml: allocator.nodePolicy: must be one of binpack, spread, got {'x' * 64!r}... "
     "(100000 characters)"),
])
def test_a_config_number_of_any_size_gets_one_line(tmp_path, text, message):
    """Issue 46, findings 1 and 7, for the config: a YAML integer past 4,300 digits raised
    ValueError (a stack trace at start); a capacity past 2^31-1 was taken (no pod could ask for
    a slice of it, SPEC 1's bound)."""
    f = tmp_path / "c.yaml"
    f.write_text(text)
    with pytest.raises(ConfigError) as e:
        load_config(str(f))
    assert str(e.value).endswith(message) and len(str(e.value)) < 400
