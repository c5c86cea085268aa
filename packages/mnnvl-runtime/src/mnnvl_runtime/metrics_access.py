"""Secure metrics: HTTPS, and only for callers the API server vouches for.

Every request needs `Authorization: Bearer <token>`. The token is authenticated with a TokenReview and its user
authorized with a SubjectAccessReview for `get` on the non-resource URL `/metrics` (what a ClusterRole with
`nonResourceURLs: ["/metrics"]` grants), both through the controller's own client. No token or one the API server
does not accept: 401; a user not allowed: 403; otherwise the metrics. The API server is asked once per token and
while: an allowed token is remembered for `ALLOWED_FOR` (a Prometheus scraping every 30 s costs it two reviews a
minute, and a revoked binding stops working within a minute), a refused one for `REFUSED_FOR` (a binding just
made works within seconds); a review that got no answer is not remembered, and the request gets 503. Outcomes are
remembered by the token's SHA-256, never the token itself, at most `MAX_REMEMBERED` of them.

The serving certificate is read from files and read again when they change (cert-manager renews in place).
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import http
import http.server
import logging
import pathlib
import socket
import ssl
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Final

import prometheus_client
from prometheus_client import exposition

from mnnvl_api import models

from . import kube

log = logging.getLogger(__name__)

METRICS_PATH: Final = "/metrics"
TOKEN_REVIEWS: Final = "/apis/authentication.k8s.io/v1/tokenreviews"
ACCESS_REVIEWS: Final = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
ALLOWED_FOR: Final = 60.0
REFUSED_FOR: Final = 10.0
MAX_REMEMBERED: Final = 1024
#: How long one review may wait for the API server, and a client for the TLS handshake and its request.
REVIEW_TIMEOUT_SECONDS: Final = 10.0
CONNECTION_TIMEOUT_SECONDS: Final = 10.0


class Outcome(enum.Enum):
    ALLOWED = "allowed"
    #: No bearer token, or one the API server does not authenticate.
    UNAUTHENTICATED = "unauthenticated"
    #: Authenticated, but not allowed to get /metrics.
    FORBIDDEN = "forbidden"
    #: The API server gave no answer (or refused the review itself, e.g. this controller may not create reviews).
    UNREVIEWED = "unreviewed"


_STATUS: Final = {
    Outcome.ALLOWED: http.HTTPStatus.OK,
    Outcome.UNAUTHENTICATED: http.HTTPStatus.UNAUTHORIZED,
    Outcome.FORBIDDEN: http.HTTPStatus.FORBIDDEN,
    Outcome.UNREVIEWED: http.HTTPStatus.SERVICE_UNAVAILABLE,
}


def status_of(outcome: Outcome) -> http.HTTPStatus:
    return _STATUS[outcome]


def remembered_for(outcome: Outcome) -> float:
    """Seconds an outcome stands for its token before the API server is asked again (0: not remembered)."""
    if outcome is Outcome.ALLOWED:
        return ALLOWED_FOR
    if outcome is Outcome.UNREVIEWED:
        return 0.0
    return REFUSED_FOR


def bearer_token(authorization: str | None) -> str | None:
    """The token of an `Authorization: Bearer <token>` header (the scheme in any case); None for anything else."""
    scheme, _, token = (authorization or "").strip().partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


@dataclasses.dataclass(frozen=True, kw_only=True)
class User:
    """Who a token is, as the TokenReview says; passed on to the SubjectAccessReview as is."""

    username: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: Mapping[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)


def token_review(token: str) -> kube.Object:
    """A TokenReview for `token`, for the API server's own audiences (a ServiceAccount token as mounted)."""
    return {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}}


def authenticated_user(answer: kube.Object) -> User | None:
    """The user of an answered TokenReview; None when the token was not authenticated."""
    status = answer.get("status") or {}
    user = status.get("user") or {}
    if not status.get("authenticated") or not user.get("username"):
        return None
    return User(
        username=str(user["username"]),
        uid=str(user.get("uid") or ""),
        groups=tuple(user.get("groups") or ()),
        extra={key: tuple(values or ()) for key, values in (user.get("extra") or {}).items()},
    )


def access_review(user: User) -> kube.Object:
    """A SubjectAccessReview: may `user` get the non-resource URL /metrics?"""
    spec: dict[str, Any] = {
        "user": user.username,
        "groups": list(user.groups),
        "nonResourceAttributes": {"path": METRICS_PATH, "verb": "get"},
    }
    if user.uid:
        spec["uid"] = user.uid
    if user.extra:
        spec["extra"] = {key: list(values) for key, values in user.extra.items()}
    return {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}


def is_allowed(answer: kube.Object) -> bool:
    return bool((answer.get("status") or {}).get("allowed"))


class RememberedOutcomes:
    """Review outcomes by token digest until they expire; at most `capacity`, the soonest to expire dropped first.
    Times are the caller's (a monotonic clock), so this holds no clock of its own."""

    def __init__(self, capacity: int = MAX_REMEMBERED) -> None:
        self.capacity = capacity
        self._entries: dict[str, tuple[Outcome, float]] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def recall(self, token: str, now: float) -> Outcome | None:
        entry = self._entries.get(_digest(token))
        if entry is None or entry[1] <= now:
            return None
        return entry[0]

    def remember(self, token: str, outcome: Outcome, now: float) -> None:
        lasts = remembered_for(outcome)
        if lasts <= 0:
            return
        key = _digest(token)
        if key not in self._entries and len(self._entries) >= self.capacity:
            self._entries = {k: entry for k, entry in self._entries.items() if entry[1] > now}
            while len(self._entries) >= self.capacity:
                del self._entries[min(self._entries, key=lambda k: self._entries[k][1])]
        self._entries[key] = (outcome, now + lasts)


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class Reviewer:
    """Asks the API server about a request's token, through `client`, remembering the outcomes."""

    def __init__(self, client: kube.Kube, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._client = client
        self._clock = clock
        self._lock = threading.Lock()
        self._remembered = RememberedOutcomes()

    def outcome(self, authorization: str | None) -> Outcome:
        token = bearer_token(authorization)
        if token is None:
            return Outcome.UNAUTHENTICATED
        with self._lock:
            known = self._remembered.recall(token, self._clock())
        if known is not None:
            return known
        try:
            outcome = self._review(token)
        except kube.ApiError as error:
            log.warning("cannot review a metrics request's token", extra={"error": str(error)})
            return Outcome.UNREVIEWED
        with self._lock:
            self._remembered.remember(token, outcome, self._clock())
        return outcome

    def _review(self, token: str) -> Outcome:
        answer = self._client.request("POST", TOKEN_REVIEWS, body=token_review(token), timeout=REVIEW_TIMEOUT_SECONDS)
        user = authenticated_user(answer)
        if user is None:
            return Outcome.UNAUTHENTICATED
        answer = self._client.request("POST", ACCESS_REVIEWS, body=access_review(user), timeout=REVIEW_TIMEOUT_SECONDS)
        return Outcome.ALLOWED if is_allowed(answer) else Outcome.FORBIDDEN


def certificate_directory(configuration: models.Configuration, *, serves_webhooks: bool) -> pathlib.Path | None:
    """Where the secure endpoint's `tls.crt` and `tls.key` are: `metrics.certDir`, else the webhook's certificate
    of a controller that serves webhooks; None: there is none, a self-signed one is made."""
    if configuration.metrics.cert_dir is not None:
        return pathlib.Path(configuration.metrics.cert_dir)
    return pathlib.Path(configuration.webhook.cert_dir) if serves_webhooks else None


class ServingCertificate:
    """The TLS context of `cert` and `key`, loaded again when either file changes. A change that cannot be loaded
    (a renewal caught half-written) keeps the previous context until the next connection looks again."""

    def __init__(self, cert: pathlib.Path, key: pathlib.Path) -> None:
        self.cert = cert
        self.key = key
        self._lock = threading.Lock()
        self._loaded: tuple[int, int] | None = None
        self._context = self._load()

    def context(self) -> ssl.SSLContext:
        try:
            self._load_if_changed()
        except (OSError, ValueError) as error:  # ssl.SSLError is an OSError
            log.warning("cannot load the renewed metrics certificate", extra={"error": str(error)})
        return self._context

    def _load_if_changed(self) -> None:
        with self._lock:
            if self._stamp() != self._loaded:
                self._context = self._load()

    def _stamp(self) -> tuple[int, int]:
        return (self.cert.stat().st_mtime_ns, self.key.stat().st_mtime_ns)

    def _load(self) -> ssl.SSLContext:
        stamp = self._stamp()
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(certfile=self.cert, keyfile=self.key)
        self._loaded = stamp
        return context


@dataclasses.dataclass(frozen=True, kw_only=True)
class Guard:
    """What secures the endpoint: who may read, and the certificate it serves."""

    reviewer: Reviewer
    certificate: ServingCertificate


class _ReviewedMetricsHandler(exposition.MetricsHandler):
    guard: ClassVar[Guard]

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        outcome = self.guard.reviewer.outcome(self.headers.get("Authorization"))
        if outcome is Outcome.ALLOWED:
            super().do_GET()
            return
        status = status_of(outcome)
        body = f"{status.phrase}\n".encode()
        self.send_response(status)
        if status is http.HTTPStatus.UNAUTHORIZED:
            self.send_header("WWW-Authenticate", "Bearer")
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class _HttpsServer(http.server.ThreadingHTTPServer):
    """TLS per connection, in the connection's own thread: a slow or broken handshake holds up no one else."""

    daemon_threads = True
    certificate: ServingCertificate

    def finish_request(self, request: Any, client_address: Any) -> None:
        request.settimeout(CONNECTION_TIMEOUT_SECONDS)
        try:
            secured = self.certificate.context().wrap_socket(request, server_side=True)
        except OSError:
            return  # a client that does not complete the handshake gets nothing
        try:
            super().finish_request(secured, client_address)
        finally:
            secured.close()


def start_https_server(host: str, port: int, registry: prometheus_client.CollectorRegistry, guard: Guard) -> None:
    """Serve `registry` on `host:port` over HTTPS to the requests `guard` allows (a thread, as
    `prometheus_client.start_http_server` serves plain HTTP).

    Raises OSError when the port cannot be bound, before anything is served."""
    family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
    handler = type("ReviewedMetricsHandler", (_ReviewedMetricsHandler,), {"registry": registry, "guard": guard})
    server_class = type("HttpsServer", (_HttpsServer,), {"address_family": family, "certificate": guard.certificate})
    server = server_class((host, port), handler)
    threading.Thread(target=server.serve_forever, name="metrics-https", daemon=True).start()
