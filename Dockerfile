# syntax=docker/dockerfile:1
# One image for every mnnvl controller (docs/image.md). It has no ENTRYPOINT: the Deployment's `command`
# names the controller (mnnvl-lws, mnnvl-ds, mnnvl-guardian, mnnvl-topology), so the choice is visible where it is made.
#   docker build -t mnnvl:dev .
#   docker build --build-arg VERSION=0.1.0 --build-arg REVISION=$(git rev-parse HEAD) -t …   (a release: docs/release.md)
# The bases are pinned by digest where one is known; docs/image.md says where each digest comes from and how to
# refresh them. uv's image is not pinned yet: no digest of its 0.13.9 tag could be looked up (no registry here).
ARG PYTHON_IMAGE=python:3.11-slim-bookworm@sha256:528257d48c1da0dcecc2e725d1ae34498d60c965f1241e39cd6a85a8859bdf84
ARG UV_IMAGE=ghcr.io/astral-sh/uv:0.13.9
# What the image's labels and its bill of materials say it is: a release passes both (docs/release.md).
ARG VERSION=dev
ARG REVISION=unknown

FROM ${UV_IMAGE} AS uv

FROM ${PYTHON_IMAGE} AS build
COPY --from=uv /uv /usr/local/bin/uv
# uv must use the image's interpreter (the runtime stage has the same one at the same path), never download one.
ENV UV=/usr/local/bin/uv \
    UV_PYTHON_DOWNLOADS=never \
    UV_LINK_MODE=copy \
    UV_NO_CACHE=1
WORKDIR /src
COPY requirements/ requirements/
COPY packages/ packages/
RUN uv venv --python /usr/local/bin/python3.11 /opt/mnnvl \
    && requirements/install /opt/mnnvl/bin/python
# The software bill of materials, from the lock and our packages' metadata: its own step, so a new VERSION
# repeats only this one.
ARG VERSION
RUN /opt/mnnvl/bin/python requirements/sbom.py --image-version "$VERSION" >/opt/mnnvl/sbom.cdx.json

FROM ${PYTHON_IMAGE} AS runtime
ARG VERSION
ARG REVISION
# No `created` label: a build time would make every build of one commit a different image.
LABEL org.opencontainers.image.title="mnnvl" \
      org.opencontainers.image.description="Automatic NVIDIA ComputeDomain management for LeaderWorkerSet and DisaggregatedSet" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="https://github.com/mnnvl/mnnvl" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      dev.mnnvl.sbom="/opt/mnnvl/sbom.cdx.json"
COPY --from=build /opt/mnnvl /opt/mnnvl
# Bytecode was compiled at build time; with a read-only root filesystem nothing may be written at run time.
ENV PATH=/opt/mnnvl/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
USER 65532:65532
# No default command: a container started without one fails at once instead of running a guessed controller.
CMD []
