"""docker-py and testcontainers-python against Wharf's Docker API (DOCKER_HOST), with the
fixture image WHARF_TEST_IMAGE. Run by crates/wharf/tests/docker_py.rs through pytest."""

import os
import time

import docker
import pytest

IMAGE = os.environ["WHARF_TEST_IMAGE"]


@pytest.fixture(scope="module")
def client():
    c = docker.from_env()
    c.images.pull(IMAGE)
    yield c
    for ct in c.containers.list(all=True):
        ct.remove(force=True)
    c.close()


def test_version_and_ping(client):
    assert client.ping()
    v = client.version()
    assert v["ApiVersion"] == "1.50"
    assert client.info()["OSType"] == "linux"


def test_run_returns_output_and_errors_carry_the_exit_code(client):
    assert client.containers.run(IMAGE, ["echo", "hi"], remove=True) == b"hi\n"
    with pytest.raises(docker.errors.ContainerError) as e:
        client.containers.run(IMAGE, ["sh", "-c", "echo bad >&2; exit 4"], remove=True)
    assert e.value.exit_status == 4
    with pytest.raises(docker.errors.ImageNotFound):
        client.containers.run("wharf-test/nosuch:1", ["true"])


def test_container_lifecycle_logs_exec_and_archive(client):
    c = client.containers.run(
        IMAGE,
        ["sh", "-c", "echo ready; while true; do sleep 0.2; done"],
        detach=True,
        name="py-life",
        labels={"suite": "py"},
        environment={"WHO": "py"},
    )
    try:
        deadline = time.time() + 10
        while b"ready" not in c.logs() and time.time() < deadline:
            time.sleep(0.1)
        assert b"ready" in c.logs()
        c.reload()
        assert c.status == "running"
        assert c.labels["suite"] == "py"
        assert client.containers.get("py-life").id == c.id
        assert [x.id for x in client.containers.list(filters={"label": "suite=py"})] == [c.id]
        code, out = c.exec_run(["sh", "-c", "echo $WHO; exit 3"])
        assert (code, out) == (3, b"py\n")
        code, out = c.exec_run("id -u", user="1000")
        assert (code, out) == (0, b"1000\n")
        code, (so, se) = c.exec_run(["sh", "-c", "echo o; echo e >&2"], demux=True)
        assert (so, se) == (b"o\n", b"e\n")
        bits, stat = c.get_archive("/etc/hostname")
        assert stat["name"] == "hostname"
        assert b"".join(bits)
        import io
        import tarfile

        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as t:
            data = b"put\n"
            info = tarfile.TarInfo("put.txt")
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
        assert c.put_archive("/tmp", buf.getvalue())
        assert c.exec_run("cat /tmp/put.txt").output == b"put\n"
        top = c.top()
        assert "PID" in top["Titles"]
        stats = c.stats(stream=False)
        assert "memory_stats" in stats
        c.pause()
        c.reload()
        assert c.status == "paused"
        c.unpause()
        c.stop(timeout=1)
        c.reload()
        assert c.status == "exited"
        c.start()
        c.reload()
        assert c.status == "running"
        c.kill()
        assert c.wait(timeout=10)["StatusCode"] == 137
    finally:
        c.remove(force=True)
    with pytest.raises(docker.errors.NotFound):
        client.containers.get("py-life")


def test_images_networks_and_volumes(client):
    img = client.images.get(IMAGE)
    assert img.id.startswith("sha256:")
    img.tag("wharf-py/bb", "2")
    assert "wharf-py/bb:2" in client.images.get("wharf-py/bb:2").tags
    assert client.images.get("wharf-py/bb:2").history()
    client.images.remove("wharf-py/bb:2")
    net = client.networks.create("pynet")
    vol = client.volumes.create("pyvol", labels={"k": "v"})
    try:
        assert client.networks.get("pynet").name == "pynet"
        assert client.volumes.get("pyvol").attrs["Labels"] == {"k": "v"}
        db = client.containers.run(
            IMAGE, ["sleep", "100"], detach=True, name="py-db", network="pynet",
            volumes={"pyvol": {"bind": "/data", "mode": "rw"}},
        )
        try:
            out = client.containers.run(
                IMAGE, ["sh", "-c", "ping -c1 -W2 py-db >/dev/null && echo reached"],
                network="pynet", remove=True,
            )
            assert out == b"reached\n"
            net.reload()
            assert db.id in net.attrs["Containers"]
        finally:
            db.remove(force=True)
    finally:
        net.remove()
        vol.remove()
    assert "pynet" not in [n.name for n in client.networks.list()]


def test_testcontainers_generic_container_waits_and_helps():
    from testcontainers.core.container import DockerContainer
    from testcontainers.core.waiting_utils import wait_for_logs

    with DockerContainer(IMAGE).with_command(
        ["sh", "-c", "sleep 0.5; echo service ready; sleep 100"]
    ).with_exposed_ports(8080) as c:
        wait_for_logs(c, "service ready", timeout=20)
        out, err = c.get_logs()
        assert b"service ready" in out
        code, output = c.exec(["echo", "from exec"])
        assert (code, output) == (0, b"from exec\n")
        assert int(c.get_exposed_port(8080)) > 0
