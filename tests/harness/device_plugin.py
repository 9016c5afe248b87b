"""A fake Mthreads device plugin for a real kubelet (tests/node): N cards of one model,
registered as the three resources `mthreads.com/vgpu` (16 shares a card),
`mthreads.com/sgpu-memory` (the card's units) and `mthreads.com/sgpu-core` (16 a card), each
device id naming its card. A test flips a card's health; every call is recorded.

The kubelet allocates each of the three resources on its own, from any healthy devices, and
`Allocate` names devices, not pods. So, as HAMi's device plugins do, it finds the pod: on its
node, in `hami.io/bind-phase: allocating`, oldest `mthreads.com/predicate-time` first, whose
container asks for that many of the resource. It checks the pod's `mthreads.com/gpu-index`,
`mthreads.com/predicate-node` and `hami.io/mthreads-vgpu-devices-allocated` against its
cards (an error to the kubelet when they are missing or disagree: the pod fails with
UnexpectedAdmissionError and the reason), answers with the devices of the annotated card, and,
once each resource of each container was allocated, sets `hami.io/bind-phase: success` as its
own identity (one of `allocator.extraWriters`, the path SPEC keeps for device plugins).

The gRPC API is the kubelet's v1beta1 `api.proto` from the Kubernetes source tree
(hack/kube-assets.sh keeps it beside the binaries), compiled here with grpcio-tools.
"""

from __future__ import annotations

import importlib
import json
import sys
import threading
import time
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import kubernetes.client as k

PLUGIN_DIR = Path("/var/lib/kubelet/device-plugins")  # fixed in kubelet 1.20
KUBELET_SOCKET = PLUGIN_DIR / "kubelet.sock"
PROTO = "deviceplugin-v1beta1.proto"
VERSION = "v1beta1"
CORES = 16
SHARES = 16  # vgpu devices a card has: containers sharing it, as maxInstancesPerCard
COUNT, MEMORY, CORE = "mthreads.com/vgpu", "mthreads.com/sgpu-memory", "mthreads.com/sgpu-core"
ALLOCATED = "hami.io/mthreads-vgpu-devices-allocated"
PHASE = "hami.io/bind-phase"
_compiled: dict[str, tuple] = {}


def compile_api(assets_dir: Path, out_dir: Path):
    """(pb2, pb2_grpc) modules of the kubelet's device-plugin API (compiled once a process)."""
    if "api" in _compiled:
        return _compiled["api"]
    from grpc_tools import protoc
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "deviceplugin_v1beta1.proto").write_text((assets_dir / PROTO).read_text())
    include = str(Path(protoc.__file__).parent / "_proto")
    code = protoc.main(["protoc", f"-I{out_dir}", f"-I{include}", f"--python_out={out_dir}",
                        f"--grpc_python_out={out_dir}", str(out_dir / "deviceplugin_v1beta1.proto")])
    if code != 0:
        raise RuntimeError(f"protoc failed on {assets_dir / PROTO}")
    sys.path.insert(0, str(out_dir))
    try:
        pb2 = importlib.import_module("deviceplugin_v1beta1_pb2")
        pb2_grpc = importlib.import_module("deviceplugin_v1beta1_pb2_grpc")
    finally:
        sys.path.remove(str(out_dir))
    _compiled["api"] = (pb2, pb2_grpc)
    return pb2, pb2_grpc


@dataclass
class Call:
    """One Allocate the kubelet made, and what the plugin answered."""
    resource: str
    device_ids: list[str]
    pod: str = ""  # namespace/name found for it
    uid: str = ""
    container: int = -1
    cards: list[int] = field(default_factory=list)  # indexes answered
    error: str = ""
    candidates: list[str] = field(default_factory=list)  # the pods it could have been, in order
    at: float = field(default_factory=time.time)


def _quantity(container: dict, name: str) -> int:
    res = container.get("resources") or {}
    for kind in ("limits", "requests"):
        value = (res.get(kind) or {}).get(name)
        if value is not None:
            try:
                return int(str(value))
            except ValueError:
                return -1
    return 0


class _Resource:
    """One registered resource: its devices and the gRPC servicer the kubelet talks to."""

    def __init__(self, plugin: FakeDevicePlugin, name: str, per_card: int, short: str):
        self.plugin, self.name, self.per_card, self.short = plugin, name, per_card, short
        self.socket_name = f"mthreads-fake-{short}.sock"
        self.server: grpc.Server | None = None

    def devices(self):
        pb2 = self.plugin.pb2
        out = []
        for card in range(self.plugin.cards):
            health = "Healthy" if self.plugin.healthy[card] else "Unhealthy"
            for j in range(self.per_card):
                out.append(pb2.Device(ID=f"{self.plugin.card_id(card)}-{self.short}-{j}",
                                      health=health))
        return out

    # gRPC methods (the servicer is built in FakeDevicePlugin.start)
    def GetDevicePluginOptions(self, request, context):
        return self.plugin.pb2.DevicePluginOptions()

    def ListAndWatch(self, request, context):
        pb2 = self.plugin.pb2
        seen = -1
        while context.is_active() and not self.plugin.stopping.is_set():
            with self.plugin.changed:
                if seen == self.plugin.generation:
                    self.plugin.changed.wait(1.0)
                    continue
                seen = self.plugin.generation
                devices = self.devices()
            yield pb2.ListAndWatchResponse(devices=devices)

    def GetPreferredAllocation(self, request, context):
        return self.plugin.pb2.PreferredAllocationResponse()

    def Allocate(self, request, context):
        pb2 = self.plugin.pb2
        responses = []
        for creq in request.container_requests:
            call = Call(self.name, list(creq.devicesIDs))
            try:
                envs = self.plugin.allocate(self.name, call)
            except AllocationError as e:
                call.error = str(e)
                self.plugin.record(call)
                context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(e))
            self.plugin.record(call)
            responses.append(pb2.ContainerAllocateResponse(envs=envs))
        return pb2.AllocateResponse(container_responses=responses)

    def PreStartContainer(self, request, context):
        return self.plugin.pb2.PreStartContainerResponse()


class AllocationError(Exception):
    pass


class FakeDevicePlugin:
    def __init__(self, api_client, node: str, cards: int, units: int, assets_dir: Path, workdir: Path):
        self.api, self.node, self.cards, self.units = api_client, node, cards, units
        self.core = k.CoreV1Api(api_client)
        self.workdir = Path(workdir)
        self.pb2, self.pb2_grpc = compile_api(Path(assets_dir), self.workdir / "api")
        self.healthy = [True] * cards
        self.generation = 0
        self.changed = threading.Condition()
        self.stopping = threading.Event()
        self.calls: list[Call] = []
        self._lock = threading.Lock()  # one allocation decision at a time
        self._served: dict[str, set[tuple[int, str]]] = {}  # pod uid -> (container, resource)
        self.successes: list[str] = []  # pods set to bind-phase success, in order
        self.resources = [_Resource(self, COUNT, SHARES, "vgpu"), _Resource(self, MEMORY, units, "memory"),
                          _Resource(self, CORE, CORES, "core")]

    def card_id(self, index: int) -> str:
        return f"{self.node}-mthreads-{index}"

    def capacity(self, healthy_only: bool = True) -> dict[str, str]:
        n = sum(self.healthy) if healthy_only else self.cards
        return {COUNT: str(SHARES * n), MEMORY: str(self.units * n), CORE: str(CORES * n)}

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> FakeDevicePlugin:
        PLUGIN_DIR.mkdir(parents=True, exist_ok=True)
        for res in self.resources:
            path = PLUGIN_DIR / res.socket_name
            path.unlink(missing_ok=True)
            server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
            handlers = {
                "GetDevicePluginOptions": grpc.unary_unary_rpc_method_handler(
                    res.GetDevicePluginOptions, self.pb2.Empty.FromString,
                    self.pb2.DevicePluginOptions.SerializeToString),
                "ListAndWatch": grpc.unary_stream_rpc_method_handler(
                    res.ListAndWatch, self.pb2.Empty.FromString, self.pb2.ListAndWatchResponse.SerializeToString),
                "GetPreferredAllocation": grpc.unary_unary_rpc_method_handler(
                    res.GetPreferredAllocation, self.pb2.PreferredAllocationRequest.FromString,
                    self.pb2.PreferredAllocationResponse.SerializeToString),
                "Allocate": grpc.unary_unary_rpc_method_handler(
                    res.Allocate, self.pb2.AllocateRequest.FromString, self.pb2.AllocateResponse.SerializeToString),
                "PreStartContainer": grpc.unary_unary_rpc_method_handler(
                    res.PreStartContainer, self.pb2.PreStartContainerRequest.FromString,
                    self.pb2.PreStartContainerResponse.SerializeToString),
            }
            server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("v1beta1.DevicePlugin", handlers),))
            server.add_insecure_port(f"unix://{path}")
            server.start()
            res.server = server
        with grpc.insecure_channel(f"unix://{KUBELET_SOCKET}") as channel:
            stub = self.pb2_grpc.RegistrationStub(channel)
            for res in self.resources:
                stub.Register(self.pb2.RegisterRequest(
                    version=VERSION, endpoint=res.socket_name, resource_name=res.name,
                    options=self.pb2.DevicePluginOptions()), timeout=10)
        return self

    def stop(self) -> None:
        self.stopping.set()
        with self.changed:
            self.changed.notify_all()
        for res in self.resources:
            if res.server is not None:
                res.server.stop(grace=1).wait(5)
                res.server = None
            (PLUGIN_DIR / res.socket_name).unlink(missing_ok=True)

    def set_health(self, card: int, healthy: bool) -> None:
        with self.changed:
            self.healthy[card] = healthy
            self.generation += 1
            self.changed.notify_all()

    def record(self, call: Call) -> None:
        with self._lock:
            self.calls.append(call)
            with open(self.workdir / "calls.log", "a") as log:
                log.write(json.dumps(call.__dict__) + "\n")

    def calls_for(self, uid: str) -> list[Call]:
        """The calls answered for the pod of this uid."""
        with self._lock:
            return [c for c in self.calls if c.uid == uid]

    def errors(self) -> list[Call]:
        with self._lock:
            return [c for c in self.calls if c.error]

    # -- Allocate --------------------------------------------------------------------------------

    def _pending(self) -> list[dict]:
        resp = self.core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={self.node}",
                                                     _preload_content=False)
        pods = [p for p in json.loads(resp.data)["items"]
                if (p["metadata"].get("annotations") or {}).get(PHASE) == "allocating"
                and not p["metadata"].get("deletionTimestamp")]

        def key(p):
            t = (p["metadata"].get("annotations") or {}).get("mthreads.com/predicate-time", "")
            return (int(t) if t.isdigit() else 0, p["metadata"]["creationTimestamp"])
        return sorted(pods, key=key)

    def allocate(self, resource: str, call: Call) -> dict[str, str]:
        want = len(call.device_ids)
        with self._lock:
            pending = self._pending()
            call.candidates = [f"{p['metadata']['name']}:{sorted(self._served.get(p['metadata']['uid'], ()))}"
                               for p in pending]
            for pod in pending:
                containers = (pod["spec"].get("initContainers") or []) + pod["spec"]["containers"]
                served = self._served.setdefault(pod["metadata"]["uid"], set())
                for index, c in enumerate(containers):
                    if _quantity(c, resource) == want and (index, resource) not in served:
                        break
                else:
                    continue
                call.pod, call.container = f"{pod['metadata']['namespace']}/{pod['metadata']['name']}", index
                call.uid = pod["metadata"]["uid"]
                cards = self._check(pod, index, resource, want)  # AllocationError when they disagree
                call.cards = cards
                served.add((index, resource))
                asked = {(i, r) for i, c in enumerate(containers) for r in (COUNT, MEMORY, CORE)
                         if _quantity(c, r) > 0}
                if asked <= served:
                    self._succeed(pod)
                return {"MTHREADS_VISIBLE_DEVICES": ",".join(str(c) for c in cards),
                        "MTHREADS_FAKE_CARD_IDS": ",".join(self.card_id(c) for c in cards)}
        raise AllocationError(f"no pod on {self.node} in {PHASE}=allocating asks for {want} {resource}")

    def _check(self, pod: dict, index: int, resource: str, want: int) -> list[int]:
        """The container's cards from the pod's annotations, checked against this node's cards."""
        ann = pod["metadata"].get("annotations") or {}
        name = f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"

        def fail(reason: str):
            self._fail(pod, reason)
            raise AllocationError(f"pod {name}: {reason}")

        for key in ("mthreads.com/predicate-node", "mthreads.com/gpu-index", ALLOCATED):
            if not ann.get(key):
                fail(f"annotation {key} is missing")
        if ann["mthreads.com/predicate-node"] != self.node:
            fail(f"mthreads.com/predicate-node={ann['mthreads.com/predicate-node']} is not this node {self.node}")
        per_container = ann[ALLOCATED].split(";")
        prefix = f"{self.node}-mthreads-"
        all_indexes: list[int] = []
        mine: list[tuple[int, int, int]] = []  # (card, MiB, cores)
        for i, entries in enumerate(per_container):
            for entry in filter(None, entries.split(":")):
                parts = entry.split(",")
                if len(parts) != 4 or not parts[0].startswith(prefix) or not parts[0][len(prefix):].isdigit():
                    fail(f"{ALLOCATED} names {entry!r}, not a card of {self.node}")
                card = int(parts[0][len(prefix):])
                if card >= self.cards:
                    fail(f"{ALLOCATED} names card {parts[0]}; {self.node} has {self.cards}")
                if card not in all_indexes:
                    all_indexes.append(card)
                if i == index:
                    mine.append((card, int(parts[2]), int(parts[3])))
        if ann["mthreads.com/gpu-index"] != ",".join(map(str, all_indexes)):
            fail(f"mthreads.com/gpu-index={ann['mthreads.com/gpu-index']} disagrees with {ALLOCATED} "
                 f"(cards {all_indexes})")
        if not mine:
            fail(f"{ALLOCATED} has no card for container {index}")
        got = {COUNT: len(mine), MEMORY: sum(m for _, m, _ in mine) // 512, CORE: sum(c for _, _, c in mine)}[resource]
        if got != want:
            fail(f"container {index} was allocated {got} {resource} by its annotations, the kubelet asks for {want}")
        return [c for c, _, _ in mine]

    def _succeed(self, pod: dict) -> None:
        self._patch_phase(pod, "success")
        self.successes.append(f"{pod['metadata']['namespace']}/{pod['metadata']['name']}")

    def _fail(self, pod: dict, reason: str) -> None:
        try:
            self._patch_phase(pod, "failed")
        except AllocationError:
            pass

    def _patch_phase(self, pod: dict, phase: str) -> None:
        try:
            self.core.patch_namespaced_pod(pod["metadata"]["name"], pod["metadata"]["namespace"],
                                           {"metadata": {"annotations": {PHASE: phase}}})
        except k.ApiException as e:
            raise AllocationError(f"setting {PHASE}={phase} on {pod['metadata']['name']} was refused: "
                                  f"{e.status} {e.body}") from e
