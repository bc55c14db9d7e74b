"""Loading a snapshot pauses the cyclic garbage collector while its objects are built, and leaves it
as it found it (enabled or not), failing or not."""

from __future__ import annotations

import gc
from typing import Any

import pytest

from gpufleet.adapters import k8s_yaml
from gpufleet.adapters.errors import InputError

NODE = '{"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"}, "status": {"allocatable": {"cpu": "1"}}}'


@pytest.mark.parametrize("enabled", [True, False])
def test_paused_while_converting_and_restored(monkeypatch: pytest.MonkeyPatch, enabled: bool) -> None:
    seen: list[bool] = []
    read = k8s_yaml._CORE_READERS["Node"]

    def node(doc: dict[str, Any]) -> Any:
        seen.append(gc.isenabled())
        return read(doc)

    monkeypatch.setitem(k8s_yaml._CORE_READERS, "Node", node)
    was = gc.isenabled()
    (gc.enable if enabled else gc.disable)()
    try:
        snapshot = k8s_yaml.load_snapshot_text(NODE, "s.json")
        assert gc.isenabled() is enabled
        with pytest.raises(InputError):
            k8s_yaml.load_snapshot_text('{"kind": "Node", "apiVersion": "v1", "metadata": 1}', "bad.json")
        assert gc.isenabled() is enabled
    finally:
        (gc.enable if was else gc.disable)()
    assert seen == [False, False] and [n.name for n in snapshot.nodes] == ["n"]
