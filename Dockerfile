# Container images for sandbox-runtime.
#
# Targets (the last one, runtime, is the default):
#
#   runtime           the static binary alone on scratch, user 65532, port 8888
#   python            a Python runtime image with the binary as its entrypoint
#                     (PID 1: the daemon reaps orphans itself, so no tini)
#   runtime-prebuilt  the same as runtime / python, but with the binary that
#   python-prebuilt   was built on the host into dist/sandbox-runtime instead of
#                     compiled in the golang image: for hosts that cannot pull
#                     images (CI), together with local base images
#
# Online (BuildKit or the legacy builder):
#
#   docker build --build-arg VERSION=$(git describe --always --dirty) -t sandbox-runtime .
#   docker build --target python -t sandbox-runtime-python .
#
# Offline, from a binary built on the host:
#
#   CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=$V" \
#       -o dist/sandbox-runtime ./cmd/sandbox-runtime
#   docker build --target runtime-prebuilt -t sandbox-runtime .
#   docker build --target python-prebuilt --build-arg PYTHON_IMAGE=local/python:bookworm .
#
# The offline targets come before the golang stage on purpose: the legacy
# builder (DOCKER_BUILDKIT=0) builds every stage up to the target, so an
# offline target must not have an image it cannot pull in front of it.
# (So with the legacy builder an online build of runtime also pulls
# PYTHON_IMAGE, and dist/ need not exist: see the prebuilt stage.) BuildKit
# builds only the stages a target needs. This file uses no
# BuildKit-only syntax (no RUN --mount, COPY --chmod, heredocs), so both
# builders can parse it.
#
# Base images are arguments so that a mirror or a local image can stand in:
#   GO_IMAGE      Go toolchain for the compile stage
#   RUNTIME_BASE  base of the runtime targets (scratch: nothing but the binary)
#   PYTHON_IMAGE  base of the python targets (Debian-based: needs useradd)

ARG GO_IMAGE=golang:1.26-bookworm
ARG RUNTIME_BASE=scratch
ARG PYTHON_IMAGE=python:3.14-slim

# An empty /app, copied with its owner into bases that have no shell.
FROM scratch AS appdir
WORKDIR /app

# ---- runtime-base: everything of the runtime image but the binary -----------
FROM ${RUNTIME_BASE} AS runtime-base
COPY --from=appdir --chown=65532:65532 /app /app
WORKDIR /app
ENV SANDBOX_BASE_DIR=/app
USER 65532:65532
EXPOSE 8888
ENTRYPOINT ["/usr/local/bin/sandbox-runtime"]

# ---- prebuilt: the binary from the build context ----------------------------
# The legacy builder also builds this stage and the two *-prebuilt targets on
# the way to an online target, when dist/ may not exist. So nothing here may
# fail without dist/sandbox-runtime: the globs may match nothing, and docke[r]
# matches the docker/ directory, which .dockerignore empties, so that the
# source list is never empty (the legacy builder refuses an empty one).
# Without dist/sandbox-runtime, /prebuilt/ is simply empty, and so is
# /usr/local/bin of a *-prebuilt image (it then fails at once at docker run).
FROM scratch AS prebuilt
COPY docke[r] dis[t]/sandbox-runtim[e] /prebuilt/

FROM runtime-base AS runtime-prebuilt
ARG VERSION=dev
LABEL org.opencontainers.image.title="sandbox-runtime" \
      org.opencontainers.image.version="${VERSION}"
COPY --from=prebuilt /prebuilt/ /usr/local/bin/

# ---- python-base: a Python runtime image, prepared for the binary -----------
# User 1000 owns /app (as in the upstream Python runtime image); the daemon is
# PID 1 and runs commands there by default.
FROM ${PYTHON_IMAGE} AS python-base
USER root
RUN set -eu; \
    getent group 1000 >/dev/null || groupadd --gid 1000 sandbox; \
    getent passwd 1000 >/dev/null || useradd --uid 1000 --gid 1000 --home-dir /app --no-create-home --shell /bin/sh sandbox; \
    mkdir -p /app; \
    chown 1000:1000 /app
WORKDIR /app
ENV SANDBOX_BASE_DIR=/app
USER 1000:1000
EXPOSE 8888
ENTRYPOINT ["/usr/local/bin/sandbox-runtime"]
CMD []

FROM python-base AS python-prebuilt
ARG VERSION=dev
LABEL org.opencontainers.image.title="sandbox-runtime-python" \
      org.opencontainers.image.version="${VERSION}"
COPY --from=prebuilt /prebuilt/ /usr/local/bin/

# ---- build: compile a static binary in the Go image -------------------------
FROM ${GO_IMAGE} AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" \
        -o /out/sandbox-runtime ./cmd/sandbox-runtime \
    && /out/sandbox-runtime --version

FROM python-base AS python
ARG VERSION=dev
LABEL org.opencontainers.image.title="sandbox-runtime-python" \
      org.opencontainers.image.version="${VERSION}"
COPY --from=build /out/sandbox-runtime /usr/local/bin/sandbox-runtime

# ---- runtime (default target) ------------------------------------------------
FROM runtime-base AS runtime
ARG VERSION=dev
LABEL org.opencontainers.image.title="sandbox-runtime" \
      org.opencontainers.image.version="${VERSION}"
COPY --from=build /out/sandbox-runtime /usr/local/bin/sandbox-runtime
