"""Secure metrics: the status of each review outcome, how long outcomes are remembered, the reviews' bodies and
which certificate is served."""

from __future__ import annotations

import http
import os
import pathlib
import tempfile

import pytest

from mnnvl_api import models
from mnnvl_runtime import certs, metrics_access, operator
from mnnvl_runtime.metrics_access import Outcome


@pytest.mark.parametrize(
    ("outcome", "status"),
    [
        pytest.param(Outcome.ALLOWED, http.HTTPStatus.OK, id="allowed"),
        pytest.param(Outcome.UNAUTHENTICATED, http.HTTPStatus.UNAUTHORIZED, id="no-or-bad-token"),
        pytest.param(Outcome.FORBIDDEN, http.HTTPStatus.FORBIDDEN, id="not-allowed"),
        pytest.param(Outcome.UNREVIEWED, http.HTTPStatus.SERVICE_UNAVAILABLE, id="no-answer"),
    ],
)
def test_each_outcome_has_its_status(outcome: Outcome, status: http.HTTPStatus) -> None:
    assert metrics_access.status_of(outcome) is status


@pytest.mark.parametrize(
    ("header", "token"),
    [
        pytest.param("Bearer abc.def", "abc.def", id="bearer"),
        pytest.param("bearer  abc ", "abc", id="any-case-and-spaces"),
        pytest.param(None, None, id="no-header"),
        pytest.param("Bearer ", None, id="no-token"),
        pytest.param("Basic dXNlcjpwYXNz", None, id="another-scheme"),
        pytest.param("abc", None, id="no-scheme"),
    ],
)
def test_only_a_bearer_token_is_taken(header: str | None, token: str | None) -> None:
    assert metrics_access.bearer_token(header) == token


def test_the_token_review_names_the_user_passed_on_to_the_access_review() -> None:
    answer = {
        "status": {
            "authenticated": True,
            "user": {
                "username": "system:serviceaccount:monitoring:prometheus",
                "uid": "u-1",
                "groups": ["system:serviceaccounts", "system:authenticated"],
                "extra": {"authentication.kubernetes.io/pod-name": ["prometheus-0"]},
            },
        }
    }
    user = metrics_access.authenticated_user(answer)
    assert user is not None
    assert metrics_access.access_review(user) == {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": "system:serviceaccount:monitoring:prometheus",
            "uid": "u-1",
            "groups": ["system:serviceaccounts", "system:authenticated"],
            "extra": {"authentication.kubernetes.io/pod-name": ["prometheus-0"]},
            "nonResourceAttributes": {"path": "/metrics", "verb": "get"},
        },
    }
    assert metrics_access.token_review("t") == {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenReview",
        "spec": {"token": "t"},
    }


@pytest.mark.parametrize(
    "answer",
    [
        pytest.param({"status": {"authenticated": False, "error": "invalid bearer token"}}, id="refused"),
        pytest.param({"status": {}}, id="no-verdict"),
        pytest.param({"status": {"authenticated": True, "user": {}}}, id="no-username"),
    ],
)
def test_a_token_not_authenticated_has_no_user(answer: dict[str, object]) -> None:
    assert metrics_access.authenticated_user(answer) is None


def test_only_an_allowed_access_review_allows() -> None:
    assert metrics_access.is_allowed({"status": {"allowed": True}})
    assert not metrics_access.is_allowed({"status": {"allowed": False, "reason": "no RBAC policy matched"}})
    assert not metrics_access.is_allowed({"status": {"allowed": False, "denied": True}})
    assert not metrics_access.is_allowed({})


def test_an_allowed_token_is_remembered_for_a_minute_a_refused_one_for_ten_seconds() -> None:
    remembered = metrics_access.RememberedOutcomes()
    remembered.remember("reader", Outcome.ALLOWED, now=100.0)
    remembered.remember("stranger", Outcome.FORBIDDEN, now=100.0)
    remembered.remember("forged", Outcome.UNAUTHENTICATED, now=100.0)
    assert remembered.recall("reader", now=159.9) is Outcome.ALLOWED
    assert remembered.recall("reader", now=160.0) is None
    assert remembered.recall("stranger", now=109.9) is Outcome.FORBIDDEN
    assert remembered.recall("stranger", now=110.0) is None
    assert remembered.recall("forged", now=109.9) is Outcome.UNAUTHENTICATED
    assert remembered.recall("forged", now=110.0) is None
    assert remembered.recall("never-seen", now=100.0) is None


def test_an_unanswered_review_is_not_remembered() -> None:
    remembered = metrics_access.RememberedOutcomes()
    remembered.remember("reader", Outcome.UNREVIEWED, now=0.0)
    assert remembered.recall("reader", now=0.0) is None
    assert len(remembered) == 0


def test_remembered_outcomes_are_bounded_dropping_the_expired_then_the_soonest_to_expire() -> None:
    remembered = metrics_access.RememberedOutcomes(capacity=3)
    remembered.remember("refused-early", Outcome.FORBIDDEN, now=0.0)  # expires at 10
    remembered.remember("allowed-early", Outcome.ALLOWED, now=0.0)  # expires at 60
    remembered.remember("allowed-later", Outcome.ALLOWED, now=5.0)  # expires at 65
    remembered.remember("allowed-last", Outcome.ALLOWED, now=6.0)  # full: drops the soonest, refused-early
    assert len(remembered) == 3
    assert remembered.recall("refused-early", now=6.0) is None
    assert [remembered.recall(token, now=6.0) for token in ("allowed-early", "allowed-later", "allowed-last")] == [
        Outcome.ALLOWED
    ] * 3
    remembered.remember("after-expiry", Outcome.FORBIDDEN, now=62.0)  # allowed-early has expired: it goes
    assert len(remembered) == 3
    assert remembered.recall("allowed-later", now=62.0) is Outcome.ALLOWED
    assert remembered.recall("after-expiry", now=62.0) is Outcome.FORBIDDEN


def test_a_token_is_remembered_by_its_digest_only() -> None:
    remembered = metrics_access.RememberedOutcomes()
    remembered.remember("secret-token", Outcome.ALLOWED, now=0.0)
    assert "secret-token" not in repr(vars(remembered))


@pytest.mark.parametrize(
    ("metrics", "serves_webhooks", "directory"),
    [
        pytest.param({"certDir": "/certs"}, True, pathlib.Path("/certs"), id="configured-wins"),
        pytest.param({"certDir": "/certs"}, False, pathlib.Path("/certs"), id="configured-without-webhooks"),
        pytest.param({}, True, pathlib.Path("/webhook-certs"), id="the-webhook-certificate"),
        pytest.param({}, False, None, id="none-self-signed"),
    ],
)
def test_the_certificate_is_the_configured_one_else_the_webhooks(
    metrics: dict[str, str], serves_webhooks: bool, directory: pathlib.Path | None
) -> None:
    configuration = models.Configuration.model_validate(
        {"metrics": {"secure": True, **metrics}, "webhook": {"certDir": "/webhook-certs"}}
    )
    assert metrics_access.certificate_directory(configuration, serves_webhooks=serves_webhooks) == directory


def test_without_a_certificate_directory_a_self_signed_certificate_is_made(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    configuration = models.Configuration.model_validate({"metrics": {"secure": True}})
    certificate = operator.metrics_certificate(configuration, serves_webhooks=False, hosts=("pod-0",))
    assert certificate.cert.parent.parent == tmp_path
    assert certificate.cert.is_file()
    assert certificate.key.is_file()
    assert certificate.context().check_hostname is False  # a server context


def test_renewed_certificate_files_are_loaded_and_a_half_written_renewal_keeps_the_old(tmp_path: pathlib.Path) -> None:
    pair = certs.ensure_webhook_certificate(tmp_path, ("localhost",))
    certificate = metrics_access.ServingCertificate(pair.cert, pair.key)
    first = certificate.context()
    assert certificate.context() is first  # unchanged files: no reload
    pair.key.write_text("not a key")
    os.utime(pair.key, ns=(1, 1))
    assert certificate.context() is first
    certs.issue(certs.KeyPair(tmp_path / "ca.crt", tmp_path / "ca.key"), pair, common_name="localhost")
    os.utime(pair.cert, ns=(2, 2))
    os.utime(pair.key, ns=(2, 2))
    assert certificate.context() is not first
