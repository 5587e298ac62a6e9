"""The shared deployment: replicas behind Debian's real nginx with sticky sessions, and Kubernetes manifests checked
against the Kubernetes JSON schemas (kubernetes-validate bundles them: offline).

The nginx test starts three real dashboards and nginx with the shipped ``deploy/nginx/vllm-planner.conf`` (only its
ports filled in), then drives real Streamlit sessions through it from several client addresses (127.0.N.1: the
loopback network, as distinct users for ``ip_hash``) and reads nginx's access log to see which replica served what.
"""

from __future__ import annotations

import asyncio
import http.client
import re
import time
from collections import defaultdict
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from benchmarks.replicas import dashboard_replicas, nginx_balancer, site_config, stop
from benchmarks.streamlit_session import StreamlitSession

REPO = Path(__file__).resolve().parents[1]
K8S = REPO / "deploy" / "k8s"
# The oldest Kubernetes release still in common support and the newest whose schemas the package bundles.
KUBERNETES_VERSIONS = ("1.29.0", kubernetes_validate.utils.latest_version() + ".0")


def manifests() -> list[dict]:
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    return [doc for name in kustomization["resources"] for doc in yaml.safe_load_all((K8S / name).read_text())]


def by_kind(kind: str) -> dict:
    (found,) = [m for m in manifests() if m["kind"] == kind]
    return found


# --- Kubernetes manifests -----------------------------------------------------------------------------------------

def test_kustomization_lists_every_manifest():
    listed = set(yaml.safe_load((K8S / "kustomization.yaml").read_text())["resources"])
    assert listed == {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_every_manifest_passes_the_strict_kubernetes_schema(version):
    for manifest in manifests():
        # strict: unknown fields (a typo such as `readinessprobe`) fail, as `kubectl apply --validate=strict` would
        kubernetes_validate.validate(manifest, version, strict=True)


def test_the_schema_check_catches_a_broken_manifest():
    deployment = by_kind("Deployment")
    broken = yaml.safe_load(yaml.safe_dump(deployment))
    broken["spec"]["template"]["spec"]["containers"][0]["readinessprobe"] = broken["spec"]["template"]["spec"][
        "containers"][0].pop("readinessProbe")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES_VERSIONS[-1], strict=True)
    broken = yaml.safe_load(yaml.safe_dump(deployment))
    broken["spec"]["replicas"] = "three"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES_VERSIONS[-1], strict=True)


def test_readiness_is_streamlits_health_endpoint_on_the_images_port():
    container = by_kind("Deployment")["spec"]["template"]["spec"]["containers"][0]
    exposed = re.search(r"^EXPOSE (\d+)", (REPO / "Dockerfile").read_text(), re.MULTILINE)
    assert exposed and container["ports"][0] == {"name": "http", "containerPort": int(exposed.group(1))}
    for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
        assert container[probe]["httpGet"] == {"path": "/_stcore/health", "port": "http"}
    assert set(container["resources"]["requests"]) == {"cpu", "memory"}


def test_service_is_sticky_and_selects_the_deployments_pods():
    service, deployment = by_kind("Service"), by_kind("Deployment")
    assert service["spec"]["sessionAffinity"] == "ClientIP"
    assert service["spec"]["sessionAffinityConfig"]["clientIP"]["timeoutSeconds"] >= 3600
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert deployment["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    assert service["spec"]["ports"][0]["targetPort"] == "http"
    ingress = by_kind("Ingress")
    assert ingress["metadata"]["annotations"]["nginx.ingress.kubernetes.io/affinity"] == "cookie"


def test_the_deployment_is_shared_and_closed_by_default():
    config = by_kind("ConfigMap")
    container = by_kind("Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert {"configMapRef": {"name": config["metadata"]["name"]}} in container["envFrom"]
    assert config["data"]["VLLM_PLANNER_DEPLOYMENT"] == "shared"
    assert config["data"]["VLLM_PLANNER_ALLOWED_HOSTS"] == ""  # closed: nothing reachable until named
    pod = by_kind("Deployment")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["automountServiceAccountToken"] is False
    assert container["securityContext"]["allowPrivilegeEscalation"] is False


def image_environment() -> dict[str, str]:
    """The ENV instructions of the Dockerfile (``ENV A=1 \\`` continued over lines)."""
    text = re.sub(r"\\\n", " ", (REPO / "Dockerfile").read_text())
    return dict(pair.split("=", 1) for line in re.findall(r"^ENV (.+)$", text, re.MULTILINE) for pair in line.split())


def test_the_shared_image_and_manifests_show_visitors_no_traceback():
    """Issue 28: the image left showErrorDetails at "full", so a crash showed visitors its traceback."""
    import subprocess
    import sys

    assert by_kind("ConfigMap")["data"]["STREAMLIT_CLIENT_SHOW_ERROR_DETAILS"] == "none"
    shown = subprocess.run([sys.executable, "-m", "streamlit", "config", "show"],  # as `streamlit run` reads it
                           env={"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", **image_environment()}, cwd=REPO,
                           capture_output=True, text=True, check=True)
    assert 'showErrorDetails = "none"' in shown.stdout.splitlines()


# --- Replicas behind nginx ----------------------------------------------------------------------------------------

CLIENTS = [f"127.0.{n}.1" for n in range(1, 9)]  # ip_hash keys on the first three octets: eight distinct users


def get(url: str, path: str, source: str) -> int:
    host, port = url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30, source_address=(source, 0))
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        response.read()
        return response.status
    finally:
        connection.close()


def served_by(access_log: Path) -> dict[str, list[str]]:
    """Client address -> the replica (upstream address) of each request, in order, from nginx's own log."""
    replicas: dict[str, list[str]] = defaultdict(list)
    for line in access_log.read_text().splitlines():
        client, upstream = line.split(" ", 1)[0], line.rsplit(" ", 1)[1]
        replicas[client].append(upstream)
    return replicas


async def session_view(url: str, source: str) -> dict[str, str]:
    async with StreamlitSession(url, source_address=source) as session:
        first = await session.rerun()
        assert not first.exceptions, first.exceptions
        await session.rerun({"plan_util_default": False})
        moved = await session.rerun({"plan_util": [0.85]})
        assert not moved.exceptions, moved.exceptions
        return moved.metrics


async def all_views(url: str, clients: list[str]) -> list[dict[str, str]]:
    return await asyncio.wait_for(asyncio.gather(*(session_view(url, c) for c in clients)), timeout=300)


def test_the_shipped_config_passes_nginx_t(tmp_path):
    with nginx_balancer([8501, 8502, 8503], tmp_path / "nginx") as (url, _):
        assert url.startswith("http://127.0.0.1:")  # nginx -t passed and nginx started (replicas absent)
    assert "ip_hash;" in site_config([1], 2) and "listen 127.0.0.1:2;" in site_config([1], 2)


def logged_request(access_log, marker: str, wait_s: float = 10.0) -> list[str]:
    """The access-log lines holding ``marker``, once nginx has written them (a loaded machine writes them late)."""
    deadline = time.monotonic() + wait_s
    while True:
        lines = [line for line in access_log.read_text().splitlines() if marker in line]
        if lines or time.monotonic() > deadline:
            return lines
        time.sleep(0.1)


def test_replicas_behind_nginx_keep_each_user_on_one_replica_and_survive_one_failing(tmp_path):
    with dashboard_replicas(3, tmp_path / "logs") as replicas, \
            nginx_balancer([r.port for r in replicas], tmp_path / "nginx") as (url, access_log):
        for client in CLIENTS:
            assert get(url, "/", client) == 200
            assert get(url, "/?model=Qwen%2FQwen3-8B", client) == 200
        views = asyncio.run(all_views(url, CLIENTS[:4]))
        for metrics in views:
            # gpu_memory_utilization 0.85 of an 80 GB H100 for Llama-3.1-8B: the same figure from every replica
            assert metrics["KV cache tokens"] == views[0]["KV cache tokens"] != "0"
        assert get(url, "/", CLIENTS[0]) == 200
        routes = served_by(access_log)
        assert set(routes) == set(CLIENTS)
        for client, upstreams in routes.items():
            assert len(set(upstreams)) == 1, f"{client} was served by {set(upstreams)}: not sticky"
        used = {upstreams[0] for upstreams in routes.values()}
        assert len(used) >= 2, f"all eight users on {used}: ip_hash spread nothing"

        # One replica dies: its users land on a live one (a new session; the plan is in their URL).
        victim = routes[CLIENTS[0]][0]
        stop(next(r.process for r in replicas if victim.endswith(f":{r.port}")))
        assert get(url, "/?after=failover", CLIENTS[0]) == 200
        # NOTE: nginx logs a websocket when it closes (here: when the victim died), so find the request by its path.
        (line,) = logged_request(access_log, "after=failover")
        assert line.startswith(f"{CLIENTS[0]} ") and line.rsplit(" ", 1)[1] not in (victim, "-"), line
        (metrics,) = asyncio.run(all_views(url, CLIENTS[:1]))
        assert metrics["KV cache tokens"] == views[0]["KV cache tokens"]
