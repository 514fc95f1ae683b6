import pytest

from orchestrator.devices import DeviceSpecError, parse_devices


@pytest.mark.parametrize(
    "text,kind,world,device",
    [
        ("cpu", "cpu", 1, "cpu"),
        ("cpu:2", "cpu", 2, "cpu"),
        ("0", "cuda", 1, "0"),
        ("cuda:3", "cuda", 1, "3"),
        ("0,1,2,3", "cuda", 4, "0,1,2,3"),
        ("4", "cuda", 4, "0,1,2,3"),
        ("1", "cuda", 1, "0"),
        ("2x8", "cuda", 16, "0,1,2,3,4,5,6,7"),
        ("tpu:8", "tpu", 8, "cpu"),
        ("xla:cpu", "xla_cpu", 1, "cpu"),
        ("xla:cpu:4", "xla_cpu", 4, "cpu"),
    ],
)
def test_parse(text, kind, world, device):
    spec = parse_devices(text)
    assert (spec.kind, spec.world_size, spec.ultralytics_device()) == (kind, world, device)


def test_xla_cpu_devices_name_one_device_as_xla_cpu():
    assert parse_devices("xla:cpu:1").text == "xla:cpu"
    assert parse_devices("XLA:CPU:4").text == "xla:cpu:4" and not parse_devices("xla:cpu:4").nodes > 1
    assert not parse_devices("xla:cpu:4").distributed and not parse_devices("tpu:8").distributed  # one process
    assert parse_devices("cpu:2").distributed


def test_nodes_split():
    spec = parse_devices("2x4")
    assert (spec.nodes, spec.per_node, spec.world_size) == (2, 4, 8)


@pytest.mark.parametrize("bad", ["", "gpu", "cpu:0", "tpu:0", "0,0", "-1", "1x0", "cuda:", "cpu:two"])
def test_reject(bad):
    with pytest.raises(DeviceSpecError):
        parse_devices(bad)
