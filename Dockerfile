# Container images for sandbox-runtime.
#
# Targets (the last one, runtime, is the default):
#
#   runtime           the static binary alone on scratch, user 65532, port 8888
#                     (a carrier for COPY --from: it has no shell)
#   python            a Python runtime image with the binary as its entrypoint
#                     (PID 1: the daemon reaps orphans itself, so no tini)
#   codex             a Codex runtime image: the same, plus Node.js and the
#                     Codex CLI from the npm registry, configured so that the
#                     pod is the sandbox
#   runtime-prebuilt  the same as runtime / python / codex, but with the binary
#   python-prebuilt   that was built on the host into dist/sandbox-runtime
#   codex-prebuilt    instead of compiled in the golang image (and for codex the
#                     CLI staged on the host into dist/codex): for hosts that
#                     cannot pull images (CI), together with local base images
#
# Online (BuildKit or the legacy builder):
#
#   docker build --build-arg VERSION=$(git describe --always --dirty) -t sandbox-runtime .
#   docker build --target python -t sandbox-runtime-python .
#   docker build --target codex -t sandbox-runtime-codex .
#
# Offline, from a binary built on the host:
#
#   CGO_ENABLED=0 go build -trimpath -tags grpcnotrace -ldflags "-s -w -X main.version=$V" \
#       -o dist/sandbox-runtime ./cmd/sandbox-runtime
#   docker build --target runtime-prebuilt -t sandbox-runtime .
#   docker build --target python-prebuilt --build-arg PYTHON_IMAGE=local/python:bookworm .
#   (npm install of @openai/codex@0.169.0 into dist/codex, see .ci/docker.sh)
#   docker build --target codex-prebuilt --build-arg PYTHON_IMAGE=local/python:bookworm \
#       --build-arg CODEX_BASE=local/codex:bookworm .
#
# The offline targets come before the golang stage on purpose: the legacy
# builder (DOCKER_BUILDKIT=0) builds every stage up to the target, so an
# offline target must not have an image it cannot pull in front of it.
# (So with the legacy builder an online build of runtime also pulls
# PYTHON_IMAGE and CODEX_BASE and runs the npm install of codex-npm, and
# dist/ need not exist: see the prebuilt stage.) BuildKit
# builds only the stages a target needs. This file uses no
# BuildKit-only syntax (no RUN --mount, COPY --chmod, heredocs), so both
# builders can parse it.
#
# Base images are arguments so that a mirror or a local image can stand in:
#   GO_IMAGE      Go toolchain for the compile stage
#   RUNTIME_BASE  base of the runtime targets (scratch: nothing but the binary)
#   PYTHON_IMAGE  base of the python targets (Debian bookworm: Debian's
#                 python3 and its pandas/sklearn packages, useradd, apt)
#   CODEX_BASE    base of the codex targets (Debian bookworm: nodejs, git)

ARG GO_IMAGE=golang:1.26-bookworm
ARG RUNTIME_BASE=scratch
ARG PYTHON_IMAGE=debian:bookworm-slim
ARG CODEX_BASE=debian:bookworm-slim

# An empty /app, copied with its owner into bases that have no shell.
FROM scratch AS appdir
WORKDIR /app

# ---- runtime-base: everything of the runtime image but the binary -----------
FROM ${RUNTIME_BASE} AS runtime-base
COPY --from=appdir --chown=65532:65532 /app /app
WORKDIR /app
# Every interface, for the pod network (the binary's own default is loopback).
ENV SANDBOX_RUNTIME_ADDR=:8888 \
    SANDBOX_BASE_DIR=/app
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
# Debian's python3 with pip, venv and the data libraries Debian packages
# (pandas, scikit-learn, matplotlib for the charts of code contexts; upstream's Python image also has lightgbm, which
# Debian does not package). The packages are installed with apt only when
# the base lacks them: a base made by docker/local-base.sh (offline) already
# has them all, debian:bookworm-slim (online) gets them here.
# User 1000 (group sandbox, 1000) owns /app and its HOME, /home/sandbox; the
# daemon is PID 1 and runs commands in /app by default. pip installs into
# ~/.local as that user (PIP_BREAK_SYSTEM_PACKAGES: Debian's python3 refuses
# pip outside a venv otherwise); venvs work as usual.
FROM ${PYTHON_IMAGE} AS python-base
USER root
ARG PYTHON_PACKAGES="python3 python3-pip python3-venv python3-pandas python3-sklearn python3-matplotlib"
RUN set -eu; \
    missing=""; \
    for p in $PYTHON_PACKAGES; do \
        dpkg-query -W -f '${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing="$missing $p"; \
    done; \
    if [ -n "$missing" ]; then \
        apt-get update; \
        DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $missing; \
        rm -rf /var/lib/apt/lists/*; \
    fi; \
    groupadd --gid 1000 sandbox; \
    useradd --uid 1000 --gid 1000 --create-home --home-dir /home/sandbox --shell /bin/bash sandbox; \
    mkdir -p /app; \
    chown 1000:1000 /app; \
    python3 -c 'import pandas, sklearn, matplotlib'
WORKDIR /app
ENV SANDBOX_RUNTIME_ADDR=:8888 \
    SANDBOX_BASE_DIR=/app \
    HOME=/home/sandbox \
    USER=sandbox \
    PATH=/home/sandbox/.local/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PIP_BREAK_SYSTEM_PACKAGES=1 \
    PYTHONUNBUFFERED=1
USER 1000:1000
EXPOSE 8888
ENTRYPOINT ["/usr/local/bin/sandbox-runtime"]
CMD []

FROM python-base AS python-prebuilt
ARG VERSION=dev
LABEL org.opencontainers.image.title="sandbox-runtime-python" \
      org.opencontainers.image.version="${VERSION}"
COPY --from=prebuilt /prebuilt/ /usr/local/bin/

# ---- codex-base: a Codex runtime image, prepared for the binary and the CLI --
# Debian with Node.js (Debian's), git, ca-certificates and procps; the Codex
# CLI (@openai/codex, pinned by CODEX_VERSION) goes to /opt/codex, with
# /usr/local/bin/codex pointing at its launcher. User 1000 (group sandbox)
# owns /app and HOME (/home/sandbox; Codex keeps its sessions in
# ~/.codex, CODEX_HOME). /etc/codex/config.toml makes the pod the sandbox:
# Codex's own sandbox (bubblewrap, Landlock, seccomp) cannot work in a
# hardened pod and can fail silently there, so it is off, and nothing waits
# for an approval nobody can give. Commands may run for an hour
# (SANDBOX_EXEC_TIMEOUT_SECONDS); the default timeout stays 60 s, so a Codex
# run passes its own "timeout" (up to 3600).
FROM ${CODEX_BASE} AS codex-base
USER root
ARG CODEX_PACKAGES="nodejs git ca-certificates procps"
RUN set -eu; \
    missing=""; \
    for p in $CODEX_PACKAGES; do \
        dpkg-query -W -f '${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing="$missing $p"; \
    done; \
    if [ -n "$missing" ]; then \
        apt-get update; \
        DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $missing; \
        rm -rf /var/lib/apt/lists/*; \
    fi; \
    groupadd --gid 1000 sandbox; \
    useradd --uid 1000 --gid 1000 --create-home --home-dir /home/sandbox --shell /bin/bash sandbox; \
    mkdir -p /app /opt/codex /etc/codex; \
    chown 1000:1000 /app; \
    ln -s /opt/codex/node_modules/@openai/codex/bin/codex.js /usr/local/bin/codex; \
    printf '%s\n' \
        '# sandbox-runtime: the pod is the sandbox (see docs/images.md, "The Codex image").' \
        '# Codex'"'"'s own sandbox (bubblewrap/Landlock) fails in hardened pods, so it is' \
        '# off; there is no one to approve a command, so Codex never asks.' \
        '# Override per user in ~/.codex/config.toml or per run with -c key=value.' \
        'sandbox_mode = "danger-full-access"' \
        'approval_policy = "never"' \
        >/etc/codex/config.toml
WORKDIR /app
ENV SANDBOX_RUNTIME_ADDR=:8888 \
    SANDBOX_BASE_DIR=/app \
    SANDBOX_EXEC_TIMEOUT_SECONDS=3600 \
    HOME=/home/sandbox \
    USER=sandbox
USER 1000:1000
EXPOSE 8888
ENTRYPOINT ["/usr/local/bin/sandbox-runtime"]
CMD []

# codex-prebuilt: the CLI staged on the host into dist/codex (an npm install
# of @openai/codex@$CODEX_VERSION: .ci/docker.sh does it) instead of
# installed from the npm registry in the build. As in prebuilt, the globs let
# this stage build (with an empty /opt/codex) when dist/codex does not exist.
FROM codex-base AS codex-prebuilt
ARG VERSION=dev
ARG CODEX_VERSION=0.169.0
LABEL org.opencontainers.image.title="sandbox-runtime-codex" \
      org.opencontainers.image.version="${VERSION}" \
      sandbox-runtime.codex.version="${CODEX_VERSION}"
COPY docke[r] dis[t]/code[x] /opt/codex/
COPY --from=prebuilt /prebuilt/ /usr/local/bin/

# ---- codex-npm: the CLI from the npm registry, for the codex target ----------
# npm is needed only to install it, so it stays in this stage. It comes
# before the golang stage so that it can be built (and tried) on its own
# with the legacy builder: docker build --target codex-npm --network host.
FROM codex-base AS codex-npm
USER root
ENV HOME=/root
ARG CODEX_VERSION=0.169.0
RUN set -eu; \
    apt-get update; \
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends npm; \
    cd /opt/codex; \
    printf '{"private": true, "dependencies": {"@openai/codex": "%s"}}\n' "$CODEX_VERSION" >package.json; \
    npm install --omit=dev --no-audit --no-fund; \
    test "$(node node_modules/@openai/codex/bin/codex.js --version)" = "codex-cli $CODEX_VERSION"

# ---- build: compile a static binary in the Go image -------------------------
FROM ${GO_IMAGE} AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -tags grpcnotrace -ldflags "-s -w -X main.version=${VERSION}" \
        -o /out/sandbox-runtime ./cmd/sandbox-runtime \
    && /out/sandbox-runtime --version

FROM python-base AS python
ARG VERSION=dev
LABEL org.opencontainers.image.title="sandbox-runtime-python" \
      org.opencontainers.image.version="${VERSION}"
COPY --from=build /out/sandbox-runtime /usr/local/bin/sandbox-runtime

# ---- codex: the Codex runtime image, online ---------------------------------
FROM codex-base AS codex
ARG VERSION=dev
ARG CODEX_VERSION=0.169.0
LABEL org.opencontainers.image.title="sandbox-runtime-codex" \
      org.opencontainers.image.version="${VERSION}" \
      sandbox-runtime.codex.version="${CODEX_VERSION}"
COPY --from=codex-npm /opt/codex/ /opt/codex/
COPY --from=build /out/sandbox-runtime /usr/local/bin/sandbox-runtime

# ---- runtime (default target) ------------------------------------------------
FROM runtime-base AS runtime
ARG VERSION=dev
LABEL org.opencontainers.image.title="sandbox-runtime" \
      org.opencontainers.image.version="${VERSION}"
COPY --from=build /out/sandbox-runtime /usr/local/bin/sandbox-runtime
