"""deploy/k8s as a platform team reviews it: every object valid for Kubernetes 1.30 (strict),
the pods within Pod Security "restricted", and the proxy's own needs: a token-less service
account, probes with timeouts, a disruption budget and spreading, the grace period matched
to the server's, the usage log on a volume that outlives the pod, Redis behind a password
and a network policy, team upstream keys from one Secret."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from proxy.policy.load import load_policy_text

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"
Obj = dict[str, Any]
# The volume types Pod Security "restricted" allows.
RESTRICTED_VOLUMES = {
    "configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
    "projected", "secret",
}  # fmt: skip
IMAGE_UID = 10001  # the Dockerfile's USER


def objects() -> list[Obj]:
    found = []
    for path in sorted(K8S.glob("*.yaml")):
        found += [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
    return found


def find(kind: str, name: str) -> Obj:
    (match,) = [o for o in objects() if o["kind"] == kind and o["metadata"]["name"] == name]
    return match


def pod_specs() -> list[tuple[str, Obj]]:
    return [
        (o["metadata"]["name"], o["spec"]["template"]["spec"])
        for o in objects()
        if o["kind"] in ("Deployment", "StatefulSet", "DaemonSet", "Job")
    ]


def env(container: Obj) -> dict[str, Obj]:
    return {e["name"]: e for e in container.get("env", [])}


@pytest.mark.parametrize("obj", objects(), ids=lambda o: f"{o['kind']}/{o['metadata']['name']}")
def test_every_object_is_valid_for_kubernetes_1_30_in_strict_mode(obj: Obj) -> None:
    assert kubernetes_validate.validate(obj, "1.30.0", strict=True) == "1.30"


def restricted_problems(spec: Obj) -> list[str]:
    """What Pod Security "restricted" (v1.30) refuses in a pod spec."""
    problems = []
    pod = spec.get("securityContext", {})
    for flag in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(flag):
            problems.append(flag)
    for volume in spec.get("volumes", []):
        kinds = set(volume) - {"name"}
        if not kinds <= RESTRICTED_VOLUMES:
            problems.append(f"volume {volume['name']}: {kinds}")
    for c in spec.get("initContainers", []) + spec["containers"]:
        sc = c.get("securityContext", {})
        name = c["name"]
        if sc.get("privileged"):
            problems.append(f"{name}: privileged")
        if sc.get("allowPrivilegeEscalation") is not False:
            problems.append(f"{name}: allowPrivilegeEscalation must be false")
        capabilities = sc.get("capabilities", {})
        if "ALL" not in capabilities.get("drop", []):
            problems.append(f"{name}: capabilities.drop must hold ALL")
        if set(capabilities.get("add", [])) - {"NET_BIND_SERVICE"}:
            problems.append(f"{name}: capabilities.add")
        if not (sc.get("runAsNonRoot") or pod.get("runAsNonRoot")):
            problems.append(f"{name}: runAsNonRoot")
        if 0 in (sc.get("runAsUser"), pod.get("runAsUser")):
            problems.append(f"{name}: runAsUser 0")
        seccomp = (sc.get("seccompProfile") or pod.get("seccompProfile") or {}).get("type")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            problems.append(f"{name}: seccompProfile")
        if any(p.get("hostPort") for p in c.get("ports", [])):
            problems.append(f"{name}: hostPort")
    return problems


def test_the_restricted_check_finds_what_the_old_manifests_had() -> None:
    """The check itself: the pod of the manifests before (a pod-level securityContext only)."""
    old = {
        "securityContext": {"runAsNonRoot": True, "runAsUser": 10001},
        "containers": [{"name": "proxy"}],
        "volumes": [{"name": "state", "emptyDir": {}}, {"name": "h", "hostPath": {"path": "/"}}],
    }
    assert restricted_problems(old) == [
        "volume h: {'hostPath'}",
        "proxy: allowPrivilegeEscalation must be false",
        "proxy: capabilities.drop must hold ALL",
        "proxy: seccompProfile",
    ]


@pytest.mark.parametrize("name,spec", pod_specs(), ids=lambda x: x if isinstance(x, str) else "")
def test_every_pod_passes_pod_security_restricted(name: str, spec: Obj) -> None:
    assert restricted_problems(spec) == []
    for c in spec["containers"]:
        assert c["securityContext"]["readOnlyRootFilesystem"] is True
        for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
            assert c[probe]["timeoutSeconds"] >= 1, (name, probe)
    # Its own service account, and no API token in the pod.
    assert spec["serviceAccountName"] == name
    assert spec["automountServiceAccountToken"] is False
    assert find("ServiceAccount", name)["automountServiceAccountToken"] is False


def test_the_proxy_drains_within_its_grace_period_and_spreads_out() -> None:
    sts = find("StatefulSet", "context-proxy")
    spec = sts["spec"]["template"]["spec"]
    (proxy,) = spec["containers"]
    shutdown = float(env(proxy)["CONTEXT_PROXY_GRACEFUL_SHUTDOWN_S"]["value"])
    pre_stop = proxy["lifecycle"]["preStop"]["exec"]["command"]
    assert pre_stop[-1] == "import time; time.sleep(5)"
    # The kubelet kills at the grace period: the server must have answered everything by
    # then (preStop, then its own shutdown time), with a little room, and not much more.
    margin = spec["terminationGracePeriodSeconds"] - 5 - shutdown
    assert 5 <= margin <= 30, margin
    assert spec["securityContext"]["runAsUser"] == IMAGE_UID
    keys = {c["topologyKey"] for c in spec["topologySpreadConstraints"]}
    assert keys == {"kubernetes.io/hostname", "topology.kubernetes.io/zone"}
    pdb = find("PodDisruptionBudget", "context-proxy")
    assert pdb["spec"]["selector"] == sts["spec"]["selector"] and pdb["spec"]["maxUnavailable"] == 1


def test_the_usage_log_outlives_the_pod_and_secrets_come_from_secrets() -> None:
    sts = find("StatefulSet", "context-proxy")
    (proxy,) = sts["spec"]["template"]["spec"]["containers"]
    mounts = {m["mountPath"]: m["name"] for m in proxy["volumeMounts"]}
    claims = {t["metadata"]["name"] for t in sts["spec"]["volumeClaimTemplates"]}
    assert mounts["/var/lib/context-proxy"] in claims  # a claim per replica, not an emptyDir
    variables = env(proxy)
    assert variables["REDIS_PASSWORD"]["valueFrom"]["secretKeyRef"]["name"] == "context-proxy-redis"
    assert variables["CONTEXT_PROXY_STATE"]["value"].startswith("redis://:$(REDIS_PASSWORD)@")
    assert list(variables).index("REDIS_PASSWORD") < list(variables).index("CONTEXT_PROXY_STATE")
    assert proxy["envFrom"] == [{"secretRef": {"name": "context-proxy-upstream", "optional": True}}]


def test_redis_needs_its_password_and_lets_only_the_proxy_in() -> None:
    spec = find("StatefulSet", "context-proxy-redis")["spec"]["template"]["spec"]
    (redis,) = spec["containers"]
    args = redis["args"]
    assert args[args.index("--requirepass") + 1] == "$(REDIS_PASSWORD)"
    assert env(redis)["REDISCLI_AUTH"]["valueFrom"]["secretKeyRef"]["key"] == "password"
    policy = find("NetworkPolicy", "context-proxy-redis")["spec"]
    assert policy["podSelector"]["matchLabels"] == {"app.kubernetes.io/name": "context-proxy-redis"}
    assert policy["policyTypes"] == ["Ingress"]
    (rule,) = policy["ingress"]
    assert rule["from"] == [{"podSelector": {"matchLabels": {"app.kubernetes.io/name": "context-proxy"}}}]


def test_the_policies_configmap_holds_valid_open_mode_policies() -> None:
    data = find("ConfigMap", "context-proxy-policies")["data"]
    for name, text in data.items():
        assert name.endswith(".yaml")
        policy = load_policy_text(text, name, name.removesuffix(".yaml"))
        assert not policy.keys
