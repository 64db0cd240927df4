"""The calls scripts/hot-code/profile.py makes: a CRI client (grpcio, stubs generated from
the project's api.proto at run time by profile.sh) and a Docker API client on a unix socket."""

import http.client
import json
import os
import socket
import subprocess

import grpc
from runtime.v1 import api_pb2 as api
from runtime.v1 import api_pb2_grpc as api_grpc

IMAGE = "127.0.0.1:35000/fixtures/busybox:latest"


class Cri:
    def __init__(self, sock):
        # The pods' log directories, beside the socket (in profile.sh's work directory).
        self.logs = os.path.join(os.path.dirname(sock), "logs")
        # grpcio names a unix socket's authority after its path, which HTTP/2 servers that
        # check the :authority header refuse; crictl and kubelet send "localhost".
        self.channel = grpc.insecure_channel(
            f"unix://{sock}", options=[("grpc.default_authority", "localhost")])
        self.rt = api_grpc.RuntimeServiceStub(self.channel)
        self.im = api_grpc.ImageServiceStub(self.channel)

    def close(self):
        self.channel.close()

    def heartbeat(self):
        self.rt.ListPodSandbox(api.ListPodSandboxRequest())

    def busy(self):
        """An engine call that lists nothing: keeps the daemon from its idle trim without
        opening its listings' watch (what the first relist does)."""
        self.im.ImageFsInfo(api.ImageFsInfoRequest())

    def pull(self):
        self.im.PullImage(api.PullImageRequest(image=api.ImageSpec(image=IMAGE)))

    def listings(self, rounds):
        """kubelet's listings and stats, all on this client's one connection."""
        for _ in range(rounds):
            for call in LISTINGS + FILTERED_LISTINGS:
                call(self.rt)

    def listings_each_connected(self, sock, rounds):
        """The listings, each call on a connection of its own, as crictl makes them: the
        server's connection setup and teardown run once per call."""
        for _ in range(rounds):
            for call in LISTINGS:
                c = Cri(sock)
                call(c.rt)
                c.close()

    def pod(self, i):
        """A pod as kubelet describes it: a hostname, a log directory (made first, as kubelet
        makes it) and a log path, whose records the stats calls parse back."""
        rt = self.rt
        logs = os.path.join(self.logs, f"hot{i}")
        os.makedirs(logs, exist_ok=True)
        ns = api.NamespaceOption(network=api.POD, pid=api.CONTAINER, ipc=api.POD)
        cfg = api.PodSandboxConfig(
            metadata=api.PodSandboxMetadata(name=f"hot{i}", uid=f"hot-uid-{i}", namespace="default"),
            hostname=f"hot{i}", log_directory=logs,
            linux=api.LinuxPodSandboxConfig(
                cgroup_parent=f"/wharf-hot-code/pod{i}",
                security_context=api.LinuxSandboxSecurityContext(namespace_options=ns)))
        sid = rt.RunPodSandbox(api.RunPodSandboxRequest(config=cfg)).pod_sandbox_id
        rt.PodSandboxStatus(api.PodSandboxStatusRequest(pod_sandbox_id=sid))
        self.im.ImageStatus(api.ImageStatusRequest(image=api.ImageSpec(image=IMAGE)))
        cid = rt.CreateContainer(api.CreateContainerRequest(
            pod_sandbox_id=sid, sandbox_config=cfg,
            config=api.ContainerConfig(metadata=api.ContainerMetadata(name="c"),
                                       image=api.ImageSpec(image=IMAGE),
                                       command=["sleep", "3600"], log_path="c/0.log",
                                       linux=api.LinuxContainerConfig(
                                           security_context=api.LinuxContainerSecurityContext(
                                               namespace_options=ns))))).container_id
        rt.StartContainer(api.StartContainerRequest(container_id=cid))
        rt.ContainerStatus(api.ContainerStatusRequest(container_id=cid))
        return sid, cid

    def lifecycle(self, pods):
        rt = self.rt
        rt.Status(api.StatusRequest())
        self.im.ImageFsInfo(api.ImageFsInfoRequest())
        self.im.ListImages(api.ListImagesRequest())
        made = [self.pod(i) for i in range(pods)]
        for _, cid in made[:2]:
            rt.ExecSync(api.ExecSyncRequest(container_id=cid, cmd=["true"], timeout=5))
        # One pod the way kubelet ends it: container stopped, then the sandbox.
        sid, cid = made.pop()
        rt.StopContainer(api.StopContainerRequest(container_id=cid, timeout=0))
        rt.RemoveContainer(api.RemoveContainerRequest(container_id=cid))
        rt.StopPodSandbox(api.StopPodSandboxRequest(pod_sandbox_id=sid))
        rt.RemovePodSandbox(api.RemovePodSandboxRequest(pod_sandbox_id=sid))
        self.listings(1)

    def teardown(self):
        for p in self.rt.ListPodSandbox(api.ListPodSandboxRequest()).items:
            self.rt.StopPodSandbox(api.StopPodSandboxRequest(pod_sandbox_id=p.id))
            self.rt.RemovePodSandbox(api.RemovePodSandboxRequest(pod_sandbox_id=p.id))


def _container_stats(rt):
    for c in rt.ListContainers(api.ListContainersRequest()).containers[:1]:
        rt.ContainerStats(api.ContainerStatsRequest(container_id=c.id))


def _pod_stats(rt):
    for p in rt.ListPodSandbox(api.ListPodSandboxRequest()).items[:1]:
        rt.PodSandboxStats(api.PodSandboxStatsRequest(pod_sandbox_id=p.id))


LISTINGS = [
    lambda rt: rt.Version(api.VersionRequest()),
    lambda rt: rt.ListContainers(api.ListContainersRequest()),
    lambda rt: rt.ListPodSandbox(api.ListPodSandboxRequest()),
    lambda rt: rt.ListContainerStats(api.ListContainerStatsRequest()),
    lambda rt: rt.ListPodSandboxStats(api.ListPodSandboxStatsRequest()),
    lambda rt: rt.ListPodSandboxMetrics(api.ListPodSandboxMetricsRequest()),
    _container_stats,
    _pod_stats,
]


# The filtered listings kubelet makes (running containers, ready sandboxes).
FILTERED_LISTINGS = [
    lambda rt: rt.ListContainers(api.ListContainersRequest(
        filter=api.ContainerFilter(state=api.ContainerStateValue(state=api.CONTAINER_RUNNING)))),
    lambda rt: rt.ListPodSandbox(api.ListPodSandboxRequest(
        filter=api.PodSandboxFilter(state=api.PodSandboxStateValue(state=api.SANDBOX_READY)))),
]


def crictl(crictl, sock):
    """What crictl asks, each command on a connection of its own (a Go gRPC client: its
    HTTP/2 frames differ from grpcio's)."""
    def run(*args):
        # A long deadline: under the probes, the stats of forty pods take longer than
        # crictl's default two seconds.
        return subprocess.run([crictl, "-r", f"unix://{sock}", "-i", f"unix://{sock}",
                               "--timeout", "60s", *args],
                              check=True, capture_output=True, text=True).stdout

    run("version")
    run("info")
    ids = run("ps", "-q").split()
    pods = run("pods", "-q").split()
    run("ps", "-a")
    run("pods")
    run("stats")
    run("statsp")
    run("images")
    run("imagefsinfo")
    for c in ids[:1]:
        run("inspect", c)
        run("stats", "--id", c)
    for p in pods[:1]:
        run("inspectp", p)
        run("statsp", "--id", p)


class _Unix(http.client.HTTPConnection):
    def __init__(self, path):
        super().__init__("localhost")
        self.path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(self.path)


def docker(sock):
    """What docker ps, images, inspect, logs and events ask of the Docker API."""
    def get(path):
        c = _Unix(sock)
        c.request("GET", path)
        r = c.getresponse()
        body = r.read()
        c.close()
        if r.status >= 400:
            raise RuntimeError(f"GET {path}: {r.status} {body[:200]!r}")
        return body

    get("/_ping")
    get("/v1.47/version")
    get("/v1.47/info")
    get("/v1.47/images/json")
    for c in json.loads(get("/v1.47/containers/json?all=1"))[:2]:
        get(f"/v1.47/containers/{c['Id']}/json")
        get(f"/v1.47/containers/{c['Id']}/logs?stdout=1&stderr=1")
    get("/v1.47/events?since=0&until=1")
