"""`kubectl mnnvl doctor`: each decision from plain objects, as the API server returns them."""

from __future__ import annotations

import base64
import dataclasses
import datetime
import json
import pathlib
import re
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from mnnvl_api import keys
from mnnvl_api.models import configuration as configuration_file
from mnnvl_cli import doctor, release, render
from mnnvl_runtime import webhooks

ROOT = pathlib.Path(__file__).resolve().parents[3]
CHART = ROOT / "charts" / "mnnvl"
NOW = datetime.datetime(2026, 12, 4, 10, 0, tzinfo=datetime.UTC)
NS = "mnnvl-system"
OK, WARN, FAIL = doctor.Outcome.OK, doctor.Outcome.WARN, doctor.Outcome.FAIL


def installed(controller: str, **configuration: Any) -> release.InstalledController:
    return release.InstalledController(
        controller=controller,
        namespace=NS,
        component_name=controller,
        config_map=f"{controller}-configuration",
        configuration=configuration_file.Configuration.model_validate(configuration),
    )


def at(seconds_ago: float) -> str:
    return (NOW - datetime.timedelta(seconds=seconds_ago)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def lease(name: str, *, holder: str = "mnnvl-lws-7d9f-abcde", renewed_ago: float, duration: int = 15) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": NS},
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": duration, "renewTime": at(renewed_ago)},
    }


# --- Leases ---------------------------------------------------------------------------------------------------------


def test_a_lease_renewed_within_its_duration_is_ok() -> None:
    found = doctor.lease_check(installed(keys.LWS_CONTROLLER), [lease("mnnvl-lws", renewed_ago=3)], NOW)
    assert (found.outcome, found.finding) == (OK, "held by mnnvl-lws-7d9f-abcde, renewed 3s ago (within 15s)")


def test_a_lease_older_than_its_duration_fails_naming_its_holder() -> None:
    found = doctor.lease_check(installed(keys.LWS_CONTROLLER), [lease("mnnvl-lws", renewed_ago=120)], NOW)
    assert found.outcome is FAIL
    assert found.finding == (
        "Lease mnnvl-system/mnnvl-lws last renewed 120s ago by mnnvl-lws-7d9f-abcde (lasts 15s, 10s allowed for "
        "clock skew): the controller is not running or cannot reach the API server"
    )
    assert "kubectl -n mnnvl-system get pods -l app.kubernetes.io/component=lws" in found.fix


def test_a_lease_renewed_within_its_duration_and_the_clock_skew_allowance_passes() -> None:
    within = doctor.lease_check(installed(keys.LWS_CONTROLLER), [lease("mnnvl-lws", renewed_ago=24)], NOW)
    beyond = doctor.lease_check(installed(keys.LWS_CONTROLLER), [lease("mnnvl-lws", renewed_ago=26)], NOW)
    assert (within.outcome, beyond.outcome) == (doctor.Outcome.OK, FAIL)


def test_a_missing_lease_fails_and_another_controllers_lease_does_not_count() -> None:
    found = doctor.lease_check(installed(keys.DS_CONTROLLER), [lease("mnnvl-lws", renewed_ago=1)], NOW)
    assert (found.outcome, found.finding) == (FAIL, "no Lease mnnvl-system/mnnvl-ds: no replica has ever led")


def test_a_released_lease_fails() -> None:
    found = doctor.lease_check(installed(keys.LWS_CONTROLLER), [lease("mnnvl-lws", holder="", renewed_ago=1)], NOW)
    assert found.outcome is FAIL
    assert "is not held" in found.finding


def test_without_leader_election_no_lease_is_needed() -> None:
    controller = installed(keys.LWS_CONTROLLER, leaderElection={"leaderElect": False})
    assert doctor.lease_check(controller, [], NOW).outcome is OK


def test_unreadable_leases_are_a_warning_saying_why() -> None:
    found = doctor.lease_check(installed(keys.LWS_CONTROLLER), doctor.Unreadable("listing leases: forbidden"), NOW)
    assert (found.outcome, found.finding) == (
        WARN,
        "cannot check the Lease mnnvl-system/mnnvl-lws: listing leases: forbidden",
    )


# --- webhooks -------------------------------------------------------------------------------------------------------


def chart_configurations(controller: str) -> list[dict[str, Any]]:
    """The chart's webhook configurations of a controller, as the API server returns them once registered."""
    found: list[dict[str, Any]] = json.loads((CHART / "files" / "webhooks" / f"{controller}.json").read_text())
    for configuration in found:
        for webhook in configuration["webhooks"]:
            webhook.setdefault("objectSelector", {})  # the API server's default
            webhook["namespaceSelector"] = {
                "matchExpressions": [
                    {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system", NS]}
                ]
            }
    return found


def only_webhook(configurations: list[dict[str, Any]], name: str) -> dict[str, Any]:
    return next(w for c in configurations for w in c["webhooks"] if w["name"] == name)


def test_the_expected_webhooks_are_the_charts() -> None:
    chart = {}
    for controller in ("lws", "ds", "guardian"):
        for configuration in json.loads((CHART / "files" / "webhooks" / f"{controller}.json").read_text()):
            for webhook in configuration["webhooks"]:
                conditions = sorted(c["name"] for c in webhook.get("matchConditions") or ())
                chart[webhook["name"]] = (conditions, webhook.get("objectSelector"))
    expected = {
        webhooks.webhook_name(controller, w.handler): (sorted(w.match_conditions), w.object_selector)
        for controller, entries in doctor.EXPECTED_WEBHOOKS.items()
        for w in entries
    }
    assert expected == chart


def test_webhooks_registered_as_the_chart_registers_them_are_ok() -> None:
    found = doctor.webhook_checks(installed(keys.LWS_CONTROLLER), chart_configurations("lws"))
    assert [(c.outcome, c.finding) for c in found] == [
        (OK, "4 registered as the chart registers them, failurePolicy Fail")
    ]


def test_a_pod_webhook_that_ignores_its_failures_is_a_warning() -> None:
    configurations = chart_configurations("lws")
    only_webhook(configurations, "mutate-pod.mnnvl-lws.mnnvl.dev")["failurePolicy"] = "Ignore"
    [found] = doctor.webhook_checks(installed(keys.LWS_CONTROLLER), configurations)
    assert (found.outcome, found.finding, found.fix) == (
        WARN,
        "mutate-pod.mnnvl-lws.mnnvl.dev has failurePolicy Ignore: pods admitted while it is down run without the "
        "channel claim",
        "set lws.webhook.failurePolicy=Fail and helm upgrade the release",
    )


def test_a_webhook_without_its_match_conditions_is_a_warning() -> None:
    configurations = chart_configurations("ds")
    del only_webhook(configurations, "validate-leaderworkerset.mnnvl-ds.mnnvl.dev")["matchConditions"]
    [found] = doctor.webhook_checks(installed(keys.DS_CONTROLLER), configurations)
    assert (found.outcome, found.finding) == (
        WARN,
        "validate-leaderworkerset.mnnvl-ds.mnnvl.dev has matchConditions [], the chart sets "
        "['slice-scope-leaderworkerset']",
    )


def test_a_pod_webhook_with_another_object_selector_is_a_warning() -> None:
    configurations = chart_configurations("lws")
    only_webhook(configurations, "mutate-pod.mnnvl-lws.mnnvl.dev")["objectSelector"] = {}
    [found] = doctor.webhook_checks(installed(keys.LWS_CONTROLLER), configurations)
    assert found.outcome is WARN
    assert found.finding.startswith("mutate-pod.mnnvl-lws.mnnvl.dev has objectSelector null, the chart sets")


def test_a_missing_webhook_fails_naming_it() -> None:
    configurations = [c for c in chart_configurations("lws") if c["kind"] == "MutatingWebhookConfiguration"]
    found = doctor.webhook_checks(installed(keys.LWS_CONTROLLER), configurations)
    assert [(c.outcome, c.finding, c.fix) for c in found] == [
        (FAIL, f"webhook {name}.mnnvl-lws.mnnvl.dev is not registered", "helm upgrade the release")
        for name in ("validate-leaderworkerset", "validate-computedomain")
    ]


def test_the_guardian_has_webhooks_only_in_deny_mode() -> None:
    finalizer = installed(keys.GUARDIAN_CONTROLLER)
    deny = installed(keys.GUARDIAN_CONTROLLER, computeDomain={"deletionProtection": "Deny"})
    topology = installed(keys.TOPOLOGY_CONTROLLER)
    lws = installed(keys.LWS_CONTROLLER)
    assert doctor.webhook_controllers([finalizer, deny, topology, lws]) == [deny, lws]


# --- the dry-run probe ----------------------------------------------------------------------------------------------

POD_WEBHOOK = "mutate-pod.mnnvl-lws.mnnvl.dev"


def probe(answer: doctor.Answer, namespace: str = "default", policy: str = "Fail") -> doctor.Check:
    webhook = only_webhook(chart_configurations("lws"), POD_WEBHOOK)
    webhook["failurePolicy"] = policy
    return doctor.probe_check(keys.LWS_CONTROLLER, webhook, answer, namespace)


def test_a_refusal_by_the_pod_webhook_proves_it_answers() -> None:
    denial = f'admission webhook "{POD_WEBHOOK}" denied the request: metadata.labels[x]: Forbidden: no'
    found = probe(doctor.Answer(status=400, message=denial, denial=denial))
    assert (found.outcome, found.finding) == (
        OK,
        f"{POD_WEBHOOK} answered a dry-run pod in default: it refused it (metadata.labels[x]: Forbidden: no)",
    )


def test_an_admission_proves_it_answers_unless_it_ignores_failures() -> None:
    assert probe(doctor.Answer(status=201)).outcome is OK
    assert probe(doctor.Answer(status=201), policy="Ignore").outcome is WARN


def test_failing_to_call_the_pod_webhook_fails_with_the_api_servers_message() -> None:
    message = (
        f'Internal error occurred: failed calling webhook "{POD_WEBHOOK}": failed to call webhook: Post '
        '"https://mnnvl-lws-webhook.mnnvl-system.svc:443/mutate-pod?timeout=10s": dial tcp: connect: connection refused'
    )
    found = probe(doctor.Answer(status=500, message=message))
    assert (found.outcome, found.finding) == (FAIL, message)
    assert found.fix == "check the mnnvl-lws pods, its webhook Service and its serving certificate"


def test_another_webhook_refusing_first_leaves_it_unknown() -> None:
    denial = 'admission webhook "mpod.kb.io" denied the request: size annotation is unexpectedly missing'
    found = probe(doctor.Answer(status=403, message=denial, denial=denial))
    assert (found.outcome, found.finding) == (
        WARN,
        f"cannot tell: mpod.kb.io refused the dry-run pod before {POD_WEBHOOK} was asked",
    )


def test_a_forbidden_dry_run_is_a_warning() -> None:
    found = probe(doctor.Answer(status=403, message='pods is forbidden: User "dev" cannot create resource "pods"'))
    assert found.outcome is WARN
    assert found.finding.startswith("cannot probe: you may not create pods in default")


def test_a_namespace_the_webhook_skips_cannot_probe_it() -> None:
    found = probe(doctor.Answer(status=201), namespace=NS)
    assert (found.outcome, found.finding) == (WARN, f"cannot probe: {POD_WEBHOOK} is not called for namespace {NS}")


# --- certificates ---------------------------------------------------------------------------------------------------


def certificate(days_left: float, name: str = "mnnvl-webhook-ca") -> str:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    built = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(NOW - datetime.timedelta(days=365))
        .not_valid_after(NOW + datetime.timedelta(days=days_left))
        .sign(key, hashes.SHA256())
    )
    return built.public_bytes(serialization.Encoding.PEM).decode()


def with_ca(pem: str, controller: str = "guardian") -> list[dict[str, Any]]:
    configurations = chart_configurations(controller)
    for configuration in configurations:
        for webhook in configuration["webhooks"]:
            webhook["clientConfig"]["caBundle"] = base64.b64encode(pem.encode()).decode()
    return configurations


@pytest.mark.parametrize(
    ("days_left", "outcome", "finding"),
    [
        pytest.param(400, OK, "valid until 2028-01-08 (400 days)", id="far"),
        pytest.param(10.5, WARN, "expires on 2026-12-14, in 10 days", id="soon"),
        pytest.param(-2, FAIL, "expired on 2026-12-02: the API server cannot call the webhooks", id="expired"),
    ],
)
def test_the_webhook_ca_is_judged_by_its_expiry(days_left: float, outcome: doctor.Outcome, finding: str) -> None:
    [found] = doctor.ca_checks(with_ca(certificate(days_left)), NOW)
    assert (found.outcome, found.finding) == (
        outcome,
        f"CA CN=mnnvl-webhook-ca of 1 webhook (validate-computedomain-delete.mnnvl-guardian.mnnvl.dev) {finding}",
    )


def test_a_bundle_during_rotation_is_judged_by_its_newest_ca() -> None:
    [found] = doctor.ca_checks(with_ca(certificate(-1, "old") + certificate(400, "new")), NOW)
    assert found.outcome is OK
    assert "CN=new" in found.finding


def test_a_webhook_without_a_ca_bundle_is_a_warning() -> None:
    [found] = doctor.ca_checks(chart_configurations("guardian"), NOW)
    assert found.outcome is WARN


def test_the_serving_certificate_is_judged_by_its_expiry() -> None:
    found = doctor.serving_cert_check(f"{NS}/mnnvl-webhook-tls", certificate(5), NOW)
    assert (found.outcome, found.finding) == (
        WARN,
        f"Secret {NS}/mnnvl-webhook-tls's certificate expires on 2026-12-09, in 5 days",
    )


# --- feature gates, RBAC, the release -------------------------------------------------------------------------------


def gate(on: bool) -> dict[str, Any]:
    return {"featureGates": {keys.AUTO_COMPUTE_DOMAIN_FEATURE_GATE: on}}


def test_controllers_that_disagree_on_the_gate_are_a_warning() -> None:
    found = doctor.gates_check(
        [
            installed(keys.LWS_CONTROLLER, **gate(True)),
            installed(keys.DS_CONTROLLER, **gate(False)),
            installed(keys.GUARDIAN_CONTROLLER, **gate(True)),
            installed(keys.TOPOLOGY_CONTROLLER, **gate(False)),  # it does not use the gate
        ]
    )
    assert found is not None
    assert (found.outcome, found.finding) == (
        WARN,
        "AutoComputeDomain is on in mnnvl-guardian, mnnvl-lws and off in mnnvl-ds",
    )


def test_controllers_that_agree_on_the_gate_are_ok() -> None:
    found = doctor.gates_check([installed(keys.LWS_CONTROLLER), installed(keys.DS_CONTROLLER)])
    assert found is not None
    assert (found.outcome, found.finding) == (OK, "AutoComputeDomain is off in mnnvl-ds, mnnvl-lws")


def test_no_controller_installed_fails() -> None:
    found = doctor.release_check([])
    assert (found.outcome, found.finding) == (
        FAIL,
        "mnnvl is not installed (no ConfigMap labelled app.kubernetes.io/part-of=mnnvl)",
    )


def test_denied_permissions_fail_listing_them() -> None:
    found = doctor.rbac_check(
        installed(keys.LWS_CONTROLLER), [("patch pods", False), ("list pods", True), ("create events", False)]
    )
    assert (found.outcome, found.finding) == (
        FAIL,
        "ServiceAccount mnnvl-system/mnnvl-lws may not patch pods, create events",
    )


def test_compute_domain_permissions_are_needed_only_with_the_gate_on() -> None:
    def domain_verbs(controller: release.InstalledController) -> list[str]:
        return [
            verb for p in doctor.permissions(controller) if p.resource == keys.COMPUTE_DOMAIN_PLURAL for verb in p.verbs
        ]

    assert domain_verbs(installed(keys.LWS_CONTROLLER)) == []
    assert domain_verbs(installed(keys.LWS_CONTROLLER, **gate(True))) == [
        "get",
        "list",
        "watch",
        "create",
        "delete",
        "patch",
    ]


def chart_cluster_rules() -> dict[str, set[tuple[str, str, str, str | None]]]:
    """Each controller's ClusterRole rules in charts/mnnvl/templates/rbac.yaml, the ComputeDomain ones included, as
    (group, resource, verb, name)."""
    text = (CHART / "templates" / "rbac.yaml").read_text()
    body = text.split('{{- define "mnnvl.clusterRules" -}}')[1].split("{{- range")[0]
    parts = re.split(r'\{\{- (?:else )?if eq \.controller "(\w+)" \}\}', body)
    found = {}
    for controller, chunk in zip(parts[1::2], parts[2::2], strict=True):
        rules = yaml.safe_load("\n".join(line for line in chunk.splitlines() if "{{" not in line))
        found[f"mnnvl-{controller}"] = {
            (group, resource, verb, name)
            for rule in rules
            for group in rule["apiGroups"]
            for resource in rule["resources"]
            for verb in rule["verbs"]
            for name in rule.get("resourceNames") or [None]
        }
    return found


def test_the_cluster_permissions_are_what_the_charts_cluster_roles_grant() -> None:
    wanted = {}
    for controller in doctor.CLUSTER_PERMISSIONS:
        permissions = doctor.permissions(installed(controller, **gate(True)))
        wanted[controller] = {
            (p.group, p.resource, verb, p.name) for p in permissions if not p.namespaced for verb in p.verbs
        }
    assert wanted == chart_cluster_rules()


# --- the cluster's prerequisites ------------------------------------------------------------------------------------


def crd(required: list[str]) -> dict[str, Any]:
    spec = {"type": "object", "required": required, "properties": {"numNodes": {"type": "integer"}}}
    schema = {"openAPIV3Schema": {"properties": {"spec": spec}}}
    return {"spec": {"versions": [{"name": "v1beta1", "served": True, "storage": True, "schema": schema}]}}


def test_the_crd_says_whether_num_nodes_is_required_and_either_is_fine() -> None:
    required = doctor.domain_crd_check(crd(["channel", "numNodes"]))
    optional = doctor.domain_crd_check(crd(["channel"]))
    assert (required.outcome, optional.outcome) == (OK, OK)
    assert required.finding.startswith("spec.numNodes is required")
    assert optional.finding.startswith("spec.numNodes is optional")


def test_an_unreadable_crd_is_a_warning() -> None:
    found = doctor.domain_crd_check(doctor.Unreadable("reading customresourcedefinitions: forbidden"))
    assert (found.outcome, found.finding) == (
        WARN,
        "cannot read CRDs: reading customresourcedefinitions: forbidden",
    )


def test_an_unserved_compute_domain_api_fails() -> None:
    found = doctor.served_check("ComputeDomain API", False, doctor.DRIVER_FIX)
    assert (found.outcome, found.finding) == (
        FAIL,
        "the API server does not serve computedomains (resource.nvidia.com/v1beta1)",
    )


def driver(*env: tuple[str, str], image: str = "nvcr.io/nvidia/k8s-dra-driver-gpu:v25.12.0") -> dict[str, Any]:
    container = {"name": "compute-domain", "image": image, "env": [{"name": k, "value": v} for k, v in env]}
    return {
        "kind": "Deployment",
        "metadata": {"name": "nvidia-dra-driver-gpu-controller", "namespace": "nvidia-dra-driver-gpu"},
        "spec": {"template": {"spec": {"containers": [container]}}},
    }


def test_the_drivers_dns_names_gate_must_not_be_off() -> None:
    assert doctor.driver_check([driver(("FEATURE_GATES", "IMEXDaemonsWithDNSNames=true,"))]).outcome is OK
    assert doctor.driver_check([driver()]).outcome is OK  # on by default
    off = doctor.driver_check([driver(("FEATURE_GATES", "ComputeDomainCliques=true,IMEXDaemonsWithDNSNames=false,"))])
    assert off.outcome is FAIL
    assert off.fix == "set featureGates.IMEXDaemonsWithDNSNames=true in the driver's Helm values"


def test_a_host_managed_or_too_old_driver_fails() -> None:
    assert doctor.driver_check([driver(("IMEX_MODE", "hostManaged"))]).outcome is FAIL
    assert doctor.driver_check([driver(image="nvcr.io/nvidia/k8s-dra-driver-gpu:v25.3.2")]).outcome is FAIL


def test_a_driver_that_cannot_be_found_is_a_warning() -> None:
    found = doctor.driver_check([])
    assert found.outcome is WARN
    assert "IMEXDaemonsWithDNSNames" in found.fix


def test_the_ds_api_is_needed_only_with_mnnvl_ds() -> None:
    assert doctor.ds_check(False, ds_installed=False).outcome is OK
    assert doctor.ds_check(False, ds_installed=True).outcome is FAIL


def node(name: str, *, gpus: str | None, clique: str | None = None) -> dict[str, Any]:
    labels = {} if clique is None else {keys.GPU_CLIQUE_LABEL: clique}
    allocatable = {"cpu": "64"} | ({} if gpus is None else {keys.GPU_RESOURCE: gpus})
    return {"metadata": {"name": name, "labels": labels}, "status": {"allocatable": allocatable}}


def test_gpu_nodes_without_a_clique_label_are_a_warning_naming_the_first_few() -> None:
    nodes = [node(f"gpu-{i}", gpus="4") for i in range(7)] + [
        node("gpu-ok", gpus="4", clique="uuid.1"),
        node("cpu", gpus=None),
        node("drained", gpus="0"),
    ]
    found = doctor.clique_check(nodes)
    assert (found.outcome, found.finding) == (
        WARN,
        "7 of 8 GPU nodes have no nvidia.com/gpu.clique label: gpu-0, gpu-1, gpu-2, gpu-3, gpu-4, …",
    )


def test_labelled_gpu_nodes_are_ok() -> None:
    assert doctor.clique_check([node("gpu", gpus="4", clique="uuid.1"), node("cpu", gpus=None)]).outcome is OK


# --- output ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("outcomes", "code"),
    [
        pytest.param([], 0, id="nothing"),
        pytest.param([OK, OK], 0, id="all-ok"),
        pytest.param([OK, WARN], 1, id="a-warning"),
        pytest.param([WARN, FAIL, OK], 2, id="a-failure"),
    ],
)
def test_the_exit_code_is_the_worst_outcome(outcomes: list[doctor.Outcome], code: int) -> None:
    assert doctor.exit_code([doctor.Check(name="x", outcome=o, finding="y") for o in outcomes]) == code


def test_the_table_wraps_to_120_columns_with_each_fix_below_its_finding() -> None:
    checks = [
        doctor.ok("ComputeDomain API", "served"),
        doctor.fail("mnnvl-lws webhook answers", "refused " * 30, "check the mnnvl-lws pods"),
    ]
    lines = doctor.as_table(checks, render.Style()).splitlines()
    assert lines[0] == "OK    ComputeDomain API          served"
    assert lines[1].startswith("FAIL  mnnvl-lws webhook answers  refused refused")
    assert lines[-2] == " " * 33 + "fix: check the mnnvl-lws pods"
    assert lines[-1] == "1 ok, 0 warnings, 1 failure"
    assert all(len(line) <= render.WIDTH for line in lines)


def test_the_outcome_is_coloured_only_in_colour() -> None:
    check = doctor.warn("feature gates", "differ", "align them")
    assert doctor.as_table([check], render.Style(colour=True)).startswith("\x1b[33mWARN\x1b[0m  feature gates")
    assert "\x1b" not in doctor.as_table([check], render.Style())


# --- all checks together --------------------------------------------------------------------------------------------


def facts(**changes: Any) -> doctor.Facts:
    """A healthy cluster: mnnvl-lws with the gate on, its Lease fresh, its webhooks as the chart's and answering."""
    lws = installed(keys.LWS_CONTROLLER, **gate(True))
    denial = f'admission webhook "{POD_WEBHOOK}" denied the request: Forbidden'
    healthy = doctor.Facts(
        now=NOW,
        probe_namespace="default",
        served=dict.fromkeys(
            (doctor.CLAIM_TEMPLATES, doctor.DOMAINS, doctor.LWS, doctor.DS, doctor.KAI_TOPOLOGIES), True
        )
        | {doctor.GROVE_BINDINGS: False},
        domain_crd=crd(["channel"]),
        driver=[driver()],
        lws_managers=[],
        controllers=[lws],
        leases={NS: [lease("mnnvl-lws", renewed_ago=2)]},
        webhook_configurations=with_ca(certificate(400), "lws"),
        probes={keys.LWS_CONTROLLER: doctor.Answer(status=400, message=denial, denial=denial)},
        serving_certs={},
        access={keys.LWS_CONTROLLER: [("patch pods", True)]},
        topologies=None,
        bindings=None,
        nodes=[node("gpu", gpus="4", clique="uuid.1")],
    )
    return dataclasses.replace(healthy, **changes)


def test_a_healthy_cluster_passes_every_check() -> None:
    found = doctor.checks(facts())
    assert [(c.name, c.outcome) for c in found if c.outcome is not OK] == []
    assert [c.name for c in found] == [
        "DRA API",
        "ComputeDomain API",
        "ComputeDomain CRD",
        "DRA driver IMEX mode",
        "LeaderWorkerSet API",
        "DisaggregatedSet API",
        "mnnvl release",
        "mnnvl-lws Lease",
        "mnnvl-lws webhooks",
        "mnnvl-lws webhook answers",
        "webhook CA",
        "feature gates",
        "mnnvl-lws RBAC",
        "GPU node cliques",
    ]


def test_unreadable_facts_are_warnings_not_errors() -> None:
    refused = doctor.Unreadable("forbidden")
    found = doctor.checks(
        facts(
            served=dict.fromkeys(facts().served, refused),
            domain_crd=refused,
            driver=refused,
            lws_managers=refused,
            controllers=refused,
            webhook_configurations=refused,
            nodes=refused,
        )
    )
    assert {c.outcome for c in found} == {WARN}
    assert all("forbidden" in c.finding for c in found)


def test_a_cluster_without_dra_at_v1_fails_the_dra_check() -> None:
    found = {
        c.name: c
        for c in doctor.checks(dataclasses.replace(facts(), served={**facts().served, doctor.CLAIM_TEMPLATES: False}))
    }
    assert found["DRA API"].outcome is FAIL
    assert "Kubernetes 1.34+" in found["DRA API"].fix


def test_a_configuration_generated_by_kustomize_is_recognised() -> None:
    config_map = {
        "metadata": {
            "name": "mnnvl-lws-configuration-7mkmd4d5b9",
            "namespace": NS,
            "labels": {release.COMPONENT_LABEL: "lws"},
        },
        "data": {release.CONFIGURATION_KEY: "apiVersion: config.lws.x-k8s.io/v1\nkind: Configuration\n"},
    }
    found = release.controller_of(config_map)
    assert found is not None
    assert (found.controller, found.component_name, found.config_map) == (
        keys.LWS_CONTROLLER,
        "mnnvl-lws",
        "mnnvl-lws-configuration-7mkmd4d5b9",
    )
