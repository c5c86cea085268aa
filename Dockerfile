# syntax=docker/dockerfile:1
# One image for every mnnvl controller (docs/image.md). It has no ENTRYPOINT: the Deployment's `command`
# names the controller (mnnvl-lws, mnnvl-ds, mnnvl-guardian, mnnvl-topology), so the choice is visible where it is made.
#   docker build -t mnnvl:dev .
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ghcr.io/astral-sh/uv:0.13.9 AS uv

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

FROM ${PYTHON_IMAGE} AS runtime
LABEL org.opencontainers.image.title="mnnvl" \
      org.opencontainers.image.description="Automatic NVIDIA ComputeDomain management for LeaderWorkerSet and DisaggregatedSet" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /opt/mnnvl /opt/mnnvl
# Bytecode was compiled at build time; with a read-only root filesystem nothing may be written at run time.
ENV PATH=/opt/mnnvl/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
USER 65532:65532
# No default command: a container started without one fails at once instead of running a guessed controller.
CMD []
