#!/usr/bin/env bash
# .ci/docker.sh: the CI "docker" stage. It builds the images of ./Dockerfile and
# runs them for real on this machine, against a private dockerd (its own
# data-root, exec-root, socket and pidfile under a temp dir, stopped by PID in
# a trap) that needs no image registry:
#
#   * the binary is built on the host (CGO_ENABLED=0, -trimpath, version
#     stamped) into dist/sandbox-runtime; the targets runtime-prebuilt
#     (scratch + binary) and python-prebuilt (on a local Debian python3 base
#     made by docker/local-base.sh with debootstrap, cached) and codex-prebuilt
#     (on a local Debian nodejs/git base made the same way, with the Codex CLI
#     npm-installed on the host into a cached staging dir, dist/codex) are
#     built with the legacy builder;
#   * each container answers GET /v1/health on a published port, reports the
#     stamped version, runs a command through /v1/commands and one through the
#     legacy POST /execute, as the image's non-root user, in /app;
#   * python: orphaned grandchildren are reaped by the daemon as PID 1: no
#     process inside is left in state Z and orphans_reaped_total counts them;
#   * python: pandas and sklearn import, a code context keeps its state and
#     draws a matplotlib PNG, a venv is made and used, pip installs
#     into ~/.local, as user 1000 of its own group with a writable HOME;
#   * codex: codex --version, then a real `codex exec --json` against
#     docker/codex-stub/model-stub.js, a scripted stand-in for the model API
#     (the only remote service Codex needs) run inside the container through
#     /v1/commands: its JSONL events arrive intact and in order through the
#     NDJSON stream, the file its shell tool call wrote is read through
#     /v1/files, it exits 0 with no stdin, once more with "stdin": true
#     and an immediate eof, and once on a PTY ("pty" in the create; output
#     on stream "pty", its file another one, through a second stub);
#   * docker stop (SIGTERM) ends a running command with state "terminated"
#     and the daemon exits 0 by itself, well inside docker stop's 30 s (for
#     codex: a codex exec waiting on the model).
#
# If Docker cannot be installed or its daemon cannot start here, the stage
# prints SKIP with the reason and exits 0. Once dockerd is up, any failure
# fails the stage. Run from anywhere: bash .ci/docker.sh
#
# Environment:
#   VERSION       version stamped into the binary     (git describe, else "dev")
#   CACHE_DIR     cache of the debootstrap bases and  (/var/cache/sandbox-runtime-ci)
#                 of the staged Codex CLI (per version, kept until removed)
#   CACHE_DAYS    rebuild the bases when older        (7)
#   CODEX_VERSION the @openai/codex version to stage  (0.169.0)
#   DOCKER_CI_NETWORK  bridge | host                   (bridge: -p 127.0.0.1:PORT:8888;
#                                                       host if a bridge cannot be made)
#   KEEP_TMP=1    keep the temp dir (dockerd log, build logs) for debugging
set -uo pipefail

cd "$(dirname "$0")/.." || exit 1
stage_start=$SECONDS
export DOCKER_BUILDKIT=0 # no buildx on CI; the legacy builder is what runs here

T=""           # temp dir: dockerd state, logs
containers=()  # names to remove in cleanup
network=""     # our bridge network, and its interface
network_if=""
timings=()
bg_pids=()     # background jobs (go build, local base): process group ids
skipped=""

say() { printf '[docker-ci] %s\n' "$*"; }
q() { printf '%s' "$1" | jq -Rsc .; } # a string, JSON-quoted for messages
timing() { timings+=("$(printf '%-40s %4ss' "$1" "$2")"); }

print_timings() {
	((${#timings[@]})) || return 0
	say "timings:"
	local t
	for t in "${timings[@]}"; do printf '[docker-ci]   %s\n' "$t"; done
}

skip() {
	skipped=$*
	echo
	echo "#####################################################################"
	echo "### docker stage: SKIP: $*"
	echo "#####################################################################"
	exit 0
}

fail() {
	echo "[docker-ci] FAIL: $*" >&2
	exit 1
}

cleanup() {
	local rc=$? p
	trap - EXIT INT TERM
	for p in "${bg_pids[@]}"; do kill -TERM -- "-$p" 2>/dev/null; done
	if [[ -n $T && -S $T/docker.sock ]]; then
		for p in "${containers[@]}"; do
			if [[ $rc != 0 ]] && docker container inspect "$p" >/dev/null 2>&1; then
				say "logs of $p (last 40 lines):"
				docker logs --tail 40 "$p" 2>&1 | sed 's/^/    /'
			fi
			docker rm -f "$p" >/dev/null 2>&1
		done
		[[ -n $network ]] && docker network rm "$network" >/dev/null 2>&1
	fi
	if [[ -n $T ]]; then
		stop_dockerd
		# If the network could not be removed (dockerd gone first), its bridge
		# interface would outlive dockerd.
		if [[ -n $network_if && -e /sys/class/net/$network_if ]] && command -v ip >/dev/null; then
			ip link delete "$network_if" 2>/dev/null
		fi
		if [[ -n ${KEEP_TMP:-} ]]; then
			say "kept $T"
		else
			# Anything dockerd left mounted (it unmounts on a clean stop).
			awk -v t="$T/" 'index($2, t) == 1 { print $2 }' /proc/mounts | sort -r |
				while read -r p; do umount -l "$p" 2>/dev/null; done
			rm -rf "$T"
		fi
	fi
	timing "total" $((SECONDS - stage_start))
	print_timings
	if [[ -n $skipped ]]; then
		say "SKIPPED: $skipped ($((SECONDS - stage_start))s)"
	elif [[ $rc == 0 ]]; then
		say "PASS ($((SECONDS - stage_start))s)"
	else
		say "FAILED ($((SECONDS - stage_start))s)"
	fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# stop_dockerd ends the dockerd started here, and the containerd it started,
# by their pidfiles: SIGTERM, then SIGKILL after 20 s.
stop_dockerd() {
	local pid cpid i
	pid=$(cat "$T/dockerd.pid" 2>/dev/null)
	[[ -n $pid ]] || pid=${dockerd_pid:-}
	cpid=$(cat "$T/exec/containerd/containerd.pid" 2>/dev/null)
	if [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null; then
		kill -TERM "$pid" 2>/dev/null
		for ((i = 0; i < 200; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
		kill -0 "$pid" 2>/dev/null && { say "dockerd did not stop in 20 s: SIGKILL"; kill -KILL "$pid" 2>/dev/null; }
		wait "$pid" 2>/dev/null
	fi
	# The supervised containerd normally exits with dockerd; make sure, but
	# only if that pid is still the containerd running from our temp dir.
	if [[ -n $cpid ]] && grep -qF "$T" "/proc/$cpid/cmdline" 2>/dev/null; then
		kill -TERM "$cpid" 2>/dev/null
		for ((i = 0; i < 50; i++)); do kill -0 "$cpid" 2>/dev/null || break; sleep 0.1; done
		kill -KILL "$cpid" 2>/dev/null
	fi
}

# background NAME SCRIPT ARGS...: run a bash script in its own process group
# (so an early exit can stop all of it), output in $T/NAME.log; sets $bg_pid.
background() {
	local name=$1
	shift
	setsid bash -c "$@" >"$T/$name.log" 2>&1 &
	bg_pid=$!
	bg_pids+=("$bg_pid")
}

# finish PID: wait for a background job; it is no longer ours to stop.
finish() {
	local rc=0 p keep=()
	wait "$1" || rc=$?
	for p in "${bg_pids[@]}"; do [[ $p == "$1" ]] || keep+=("$p"); done
	bg_pids=("${keep[@]}")
	return "$rc"
}

# ---- 0. the binary, built on the host in the background ----------------------
VERSION=${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}
T=$(mktemp -d /tmp/sr-docker.XXXXXX) || fail "mktemp"
mkdir -p "$T/data" "$T/exec" "$T/config"
export DOCKER_CONFIG=$T/config # no credential helpers or contexts of the host
say "version $VERSION, temp dir $T"

command -v go >/dev/null || fail "go is not on PATH"
# shellcheck disable=SC2016 # expanded by the inner shell / by jq
background gobuild '
	mkdir -p dist &&
		CGO_ENABLED=0 go build -trimpath -tags grpcnotrace -ldflags "-s -w -X main.version=$1" \
			-o dist/sandbox-runtime ./cmd/sandbox-runtime &&
		echo $SECONDS >"$2"' _ "$VERSION" "$T/gobuild.secs"
gobuild_pid=$bg_pid

# ---- 1. docker, debootstrap, curl, jq ----------------------------------------
[[ $(id -u) == 0 ]] || skip "needs root to install and run a private dockerd (running as uid $(id -u))"
need=()
command -v dockerd >/dev/null && command -v docker >/dev/null || need+=(docker.io)
command -v debootstrap >/dev/null || need+=(debootstrap)
command -v curl >/dev/null || need+=(curl)
command -v jq >/dev/null || need+=(jq)
command -v npm >/dev/null || need+=(npm)
if ((${#need[@]})); then
	command -v apt-get >/dev/null || skip "missing ${need[*]} and no apt-get to install them"
	s=$SECONDS
	say "installing ${need[*]}"
	apt-get update -q -o DPkg::Lock::Timeout=600 >"$T/apt.log" 2>&1 ||
		{ tail -5 "$T/apt.log"; skip "apt-get update failed"; }
	apt-get install -y -q -o DPkg::Lock::Timeout=600 "${need[@]}" >>"$T/apt.log" 2>&1 ||
		{ tail -10 "$T/apt.log"; skip "apt-get install ${need[*]} failed"; }
	timing "apt-get install ${need[*]}" $((SECONDS - s))
fi
command -v dockerd >/dev/null || skip "dockerd is still not installed"

# ---- 2. a private dockerd ------------------------------------------------------
# --bridge=none --iptables=false: no docker0 and no iptables chains that could
# clash with another dockerd on this machine. Published ports then go through
# docker-proxy on a user-defined bridge network (step 4). A running system
# containerd would be shared: our own namespaces keep its state apart.
# setsid: its own process group, so a signal to ours (Ctrl-C, timeout(1))
# reaches this script first, which then removes containers and network and
# stops dockerd in order.
s=$SECONDS
setsid dockerd \
	--data-root "$T/data" --exec-root "$T/exec" --pidfile "$T/dockerd.pid" \
	-H "unix://$T/docker.sock" \
	--bridge=none --iptables=false --ip-masq=false \
	--containerd-namespace "sr-ci-$$" --containerd-plugins-namespace "sr-ci-$$-plugins" \
	>"$T/dockerd.log" 2>&1 &
dockerd_pid=$!
export DOCKER_HOST=unix://$T/docker.sock
for ((i = 0; i < 300; i++)); do
	kill -0 "$dockerd_pid" 2>/dev/null || { tail -20 "$T/dockerd.log"; skip "dockerd exited at start-up (log above)"; }
	docker version >/dev/null 2>&1 && break
	sleep 0.2
done
docker version >/dev/null 2>&1 || { tail -20 "$T/dockerd.log"; skip "dockerd did not answer within 60 s (log above)"; }
timing "dockerd start" $((SECONDS - s))
say "dockerd $(docker version --format '{{.Server.Version}}') up (pid $dockerd_pid, storage $(docker info --format '{{.Driver}}'))"
# From here on every failure fails the stage.

# ---- 3. the local bases and the Codex CLI, in the background -----------------
export CACHE_DIR=${CACHE_DIR:-/var/cache/sandbox-runtime-ci}
CODEX_VERSION=${CODEX_VERSION:-0.169.0}
python_include=python3,python3-pip,python3-venv,python3-pandas,python3-sklearn,python3-matplotlib
codex_include=nodejs,git,ca-certificates,procps
# shellcheck disable=SC2016 # expanded by the inner shell / by jq
background base 'INCLUDE=$2 docker/local-base.sh local/python:bookworm && echo $SECONDS >"$1"' _ "$T/base.secs" "$python_include"
base_pid=$bg_pid
# shellcheck disable=SC2016 # expanded by the inner shell / by jq
background codexbase 'INCLUDE=$2 IMAGE_CMD='"'"'["bash"]'"'"' docker/local-base.sh local/codex:bookworm && echo $SECONDS >"$1"' \
	_ "$T/codexbase.secs" "$codex_include"
codexbase_pid=$bg_pid

# The Codex CLI is npm-installed here on the host, not in the build: this
# dockerd has no bridge (build containers have no network at all), and the
# legacy builder has no cache mounts, so an install in the build would fetch
# ~130 MB on every cold build. The installed tree (its package-lock pins
# every integrity hash) is kept in $CACHE_DIR per version and platform (npm
# picks the optional @openai/codex-linux-<arch> package of this host, which
# is the image's platform), checked with codex --version, and hard-linked
# into dist/codex, which the codex-prebuilt target copies to /opt/codex.
# shellcheck disable=SC2016 # expanded by the inner shell
background codexcli '
	set -euo pipefail
	ver=$1 dir=$CACHE_DIR/codex-$1-linux-$(uname -m)
	launcher=node_modules/@openai/codex/bin/codex.js
	if [[ $(node "$dir/$launcher" --version 2>/dev/null) != "codex-cli $ver" ]]; then
		mkdir -p "$CACHE_DIR"
		tmp=$(mktemp -d "$CACHE_DIR/.codex.XXXXXX")
		trap "rm -rf \"$tmp\"" EXIT
		printf "{\"private\": true, \"dependencies\": {\"@openai/codex\": \"%s\"}}\n" "$ver" >"$tmp/package.json"
		echo "npm install @openai/codex@$ver"
		(cd "$tmp" && npm install --omit=dev --no-audit --no-fund --cache "$CACHE_DIR/npm")
		[[ $(node "$tmp/$launcher" --version) == "codex-cli $ver" ]]
		rm -rf "$dir"
		# A concurrent run may have put its own there first: that one will do.
		mv -T "$tmp" "$dir" 2>/dev/null || [[ $(node "$dir/$launcher" --version) == "codex-cli $ver" ]]
	else
		echo "using cached $dir"
	fi
	chmod 755 "$dir" # mktemp -d made it 0700: the image user must read it
	mkdir -p dist
	rm -rf dist/codex
	cp -al "$dir" dist/codex 2>/dev/null || cp -a "$dir" dist/codex
	echo "dist/codex: $(du -sh dist/codex | cut -f1)"
	echo $SECONDS >"$2"' _ "$CODEX_VERSION" "$T/codexcli.secs"
codexcli_pid=$bg_pid

# ---- helpers -------------------------------------------------------------------
mode=${DOCKER_CI_NETWORK:-bridge}
if [[ $mode == bridge ]]; then
	if docker network create "sr-ci-$$" >"$T/network.log" 2>&1; then
		network=sr-ci-$$
		network_if=br-$(head -c 12 "$T/network.log")
	else
		say "cannot create a bridge network ($(tail -1 "$T/network.log")): using --network host"
		mode=host
	fi
fi
say "container networking: $mode"

# free_port prints a TCP port on 127.0.0.1 that nothing listens on.
free_port() {
	local p i
	for ((i = 0; i < 100; i++)); do
		p=$((20000 + RANDOM % 40000))
		(exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { echo "$p"; return 0; }
	done
	return 1
}

# start NAME IMAGE [DOCKER_RUN_ARGS...]: run the image detached, publish its
# port on 127.0.0.1:$port and wait until GET /v1/health answers {"status":"ok"}.
start() {
	local name=$1 image=$2 try out i
	local extra=("${@:3}")
	for ((try = 0; try < 3; try++)); do
		port=$(free_port) || fail "no free port"
		containers+=("$name")
		if [[ $mode == bridge ]]; then
			out=$(docker run -d --name "$name" "${extra[@]}" --network "$network" -p "127.0.0.1:$port:8888" "$image" 2>&1)
		else
			out=$(docker run -d --name "$name" "${extra[@]}" --network host -e "SANDBOX_RUNTIME_ADDR=127.0.0.1:$port" "$image" 2>&1)
		fi && break
		docker rm -f "$name" >/dev/null 2>&1
		[[ $out == *"address already in use"* ]] || fail "docker run $image: $out"
	done
	base=http://127.0.0.1:$port
	for ((i = 0; i < 100; i++)); do
		[[ $(curl -sS -m 2 "$base/v1/health" 2>/dev/null) == '{"status":"ok"}' ]] && break
		[[ $(docker inspect -f '{{.State.Running}}' "$name") == true ]] || fail "$name exited at start-up"
		sleep 0.2
	done
	[[ $(curl -sS -m 2 "$base/v1/health") == '{"status":"ok"}' ]] || fail "$name: GET /v1/health did not answer ok within 20 s"
	say "$name ($image) healthy on $base"
}

# call METHOD PATH [JSON]: the body goes to $body, the status to $code.
call() {
	local args=(-sS -m 40 -o "$T/body" -w '%{http_code}' -X "$1")
	[[ $# -ge 3 ]] && args+=(-H 'Content-Type: application/json' --data-binary "$3")
	code=$(curl "${args[@]}" "$base$2") || fail "$1 $2: curl failed"
	body=$(cat "$T/body")
}

expect_code() { [[ $code == "$1" ]] || fail "$2: HTTP $code, want $1: $body"; }

# run_command ARGV_JSON: create a managed command and wait for its end; the
# final status goes to $body, the id to $cid.
run_command() {
	local i state
	call POST /v1/commands "{\"argv\":$1}"
	expect_code 201 "POST /v1/commands $1"
	cid=$(jq -r .command_id <<<"$body")
	for ((i = 0; i < 5; i++)); do
		call GET "/v1/commands/$cid?wait=20"
		expect_code 200 "GET /v1/commands/$cid"
		state=$(jq -r .state <<<"$body")
		[[ $state != running ]] && return 0
	done
	fail "command $1 still running after 100 s"
}

# stdout_of ID: the command's retained stdout.
stdout_of() {
	call GET "/v1/commands/$1/output?follow=false"
	expect_code 200 "GET /v1/commands/$1/output"
	jq -rj 'select(.type == "output" and .stream == "stdout") | if .encoding == "base64" then (.data | @base64d) else .data end' <<<"$body"
}

# stderr_of ID: the command's retained stderr, JSON-quoted (for messages).
stderr_of() {
	curl -sS -m 40 "$base/v1/commands/$1/output?follow=false" |
		jq -rj 'select(.type == "output" and .stream == "stderr") | if .encoding == "base64" then (.data | @base64d) else .data end' | jq -Rsc .
}

# expect_exited ARGV_JSON WANT_STDOUT: run it; it must exit 0 in /app with that stdout.
expect_exited() {
	local out
	run_command "$1"
	[[ $(jq -r '"\(.state) \(.exit_code) \(.cwd)"' <<<"$body") == "exited 0 /app" ]] ||
		fail "command $1 did not exit 0 in /app: $body; stderr: $(stderr_of "$cid")"
	out=$(stdout_of "$cid")
	[[ $out == "$2" ]] || fail "command $1: stdout $(q "$out"), want $(q "$2")"
	say "  /v1/commands $1 -> exited 0, stdout $(q "$out")"
}

# expect_execute COMMAND WANT_JSON: legacy POST /execute must answer exactly that.
expect_execute() {
	local got
	call POST /execute "$(jq -cn --arg c "$1" '{command: $c}')"
	expect_code 200 "POST /execute $1"
	got=$(jq -cS . <<<"$body") || fail "POST /execute $1: not JSON: $body"
	[[ $got == "$(jq -cS . <<<"$2")" ]] || fail "POST /execute $1: got $got, want $2"
	say "  /execute $(q "$1") -> $got"
}

# log_has NAME JQ_CONDITION [JQ_ARGS...]: some JSON log line of the container
# satisfies the condition.
log_has() {
	local name=$1 cond=$2
	shift 2
	docker logs "$name" 2>&1 | jq -nRe "$@" "any(inputs | fromjson? | objects; $cond)" >/dev/null
}

# expect_basics NAME UID: version, PID 1, user.
expect_basics() {
	local name=$1 uid=$2 hostpid
	call GET /v1/info
	expect_code 200 "GET /v1/info"
	[[ $(jq -r .version <<<"$body") == "$VERSION" ]] || fail "$name: /v1/info version is not $VERSION: $body"
	call GET /
	expect_code 200 "GET / (the legacy probe)"
	[[ $(jq -r .status <<<"$body") == ok ]] || fail "$name: GET / answered $body"
	log_has "$name" '.msg == "listening" and .pid == 1 and .base_dir == "/app"' ||
		fail "$name: no \"listening\" log line with pid 1 and base_dir /app"
	hostpid=$(docker inspect -f '{{.State.Pid}}' "$name")
	[[ $(awk '/^Uid:/ { print $2 }' "/proc/$hostpid/status") == "$uid" ]] || fail "$name: the daemon does not run as uid $uid"
	say "  version $VERSION, PID 1 in the container, uid $uid, base dir /app"
}

# expect_graceful_stop NAME ARGV_JSON [RUNNING_ID...]: start a long command,
# docker stop the container; the daemon must exit 0 by itself with the
# command, and every RUNNING_ID, "terminated".
expect_graceful_stop() {
	local name=$1 id s took ec other
	call POST /v1/commands "{\"argv\":$2}"
	expect_code 201 "POST /v1/commands $2"
	id=$(jq -r .command_id <<<"$body")
	sleep 0.5
	for other in "$id" "${@:3}"; do
		call GET "/v1/commands/$other"
		[[ $(jq -r .state <<<"$body") == running ]] || fail "$name: command $other is not running before docker stop: $body"
	done
	s=${EPOCHREALTIME/[.,]/}
	docker stop -t 30 "$name" >/dev/null || fail "docker stop $name"
	took=$(((${EPOCHREALTIME/[.,]/} - s) / 1000)) # ms
	ec=$(docker inspect -f '{{.State.ExitCode}}' "$name")
	[[ $ec == 0 ]] || fail "$name: exit code $ec after docker stop (137 = SIGKILL after the 30 s timeout)"
	((took < 25000)) || fail "$name: docker stop took ${took} ms, over the 25 s shutdown budget"
	# shellcheck disable=SC2016 # expanded by the inner shell / by jq
	for other in "$id" "${@:3}"; do
		# shellcheck disable=SC2016 # expanded by jq
		log_has "$name" '.msg == "command finished" and .command_id == $id and .state == "terminated"' --arg id "$other" ||
			fail "$name: no \"command finished\" log line with state terminated for $other"
	done
	log_has "$name" '.msg == "stopped"' || fail "$name: no \"stopped\" log line"
	say "  docker stop: exit 0 after ${took} ms, $2 and $(($# - 2)) other command(s) ended \"terminated\""
}

# zombies NAME: the processes in state Z inside the container, read from
# /proc by docker exec (independent of the daemon).
zombies() {
	docker exec "$1" python3 -c '
import os
for p in os.listdir("/proc"):
    if p.isdigit():
        try:
            s = open("/proc/%s/stat" % p).read()
        except OSError:
            continue
        if s[s.rindex(")") + 2] == "Z":
            print(s[: s.rindex(")") + 3])
'
}

# sh_argv SCRIPT: the argv JSON of sh -c SCRIPT.
sh_argv() { jq -cn --arg s "$1" '["sh", "-c", $s]'; }

# put_file PATH CONTENT: write a file under /app through PUT /v1/files.
put_file() {
	code=$(printf '%s' "$2" | curl -sS -m 40 -o "$T/body" -w '%{http_code}' -X PUT --data-binary @- "$base/v1/files/$1") ||
		fail "PUT /v1/files/$1: curl failed"
	[[ $code == 204 ]] || fail "PUT /v1/files/$1: HTTP $code: $(cat "$T/body")"
}

orphans_reaped() {
	call GET /metrics
	expect_code 200 "GET /metrics"
	awk '$1 == "sandbox_runtime_orphans_reaped_total" { print $2 + 0; found = 1 } END { if (!found) print "none" }' <<<"$body"
}

# ---- 4. runtime-prebuilt: the binary alone -------------------------------------
finish "$gobuild_pid" || { cat "$T/gobuild.log"; fail "go build ./cmd/sandbox-runtime"; }
timing "go build (host, background)" "$(cat "$T/gobuild.secs")"
[[ $(dist/sandbox-runtime --version) == "sandbox-runtime $VERSION" ]] || fail "dist/sandbox-runtime --version: $(dist/sandbox-runtime --version)"

s=$SECONDS
docker build --target runtime-prebuilt --build-arg "VERSION=$VERSION" -t sandbox-runtime:ci . >"$T/build-runtime.log" 2>&1 ||
	{ tail -30 "$T/build-runtime.log"; fail "docker build --target runtime-prebuilt"; }
timing "docker build runtime-prebuilt" $((SECONDS - s))
[[ $(docker inspect -f '{{.Config.User}} {{json .Config.Entrypoint}} {{json .Config.ExposedPorts}}' sandbox-runtime:ci) == \
	'65532:65532 ["/usr/local/bin/sandbox-runtime"] {"8888/tcp":{}}' ]] || fail "sandbox-runtime:ci: unexpected user, entrypoint or ports"
say "sandbox-runtime:ci built: $(docker image inspect -f '{{.Size}}' sandbox-runtime:ci) bytes"

s=$SECONDS
start sr-runtime sandbox-runtime:ci
expect_basics sr-runtime 65532
expect_exited '["/usr/local/bin/sandbox-runtime","--version"]' "sandbox-runtime $VERSION"
expect_execute "/usr/local/bin/sandbox-runtime --version" \
	"{\"stdout\":\"sandbox-runtime $VERSION\\n\",\"stderr\":\"\",\"exit_code\":0}"
# scratch has no shell: a command that needs one is refused, not started.
call POST /v1/commands '{"argv":["sh","-c","true"]}'
[[ $code == 422 && $(jq -r .error.code <<<"$body") == spawn_failed ]] ||
	fail "sr-runtime: sh on scratch: HTTP $code $body, want 422 spawn_failed"
say "  /v1/commands [\"sh\",...] -> 422 spawn_failed (scratch has no shell)"
# scratch has no sleep: a second daemon on a free port is the long command.
expect_graceful_stop sr-runtime '["/usr/local/bin/sandbox-runtime","--addr","127.0.0.1:0"]'
timing "checks runtime-prebuilt" $((SECONDS - s))

# ---- 5. python-prebuilt: the binary in a Python image -------------------------
finish "$base_pid" || { cat "$T/base.log"; fail "docker/local-base.sh local/python:bookworm"; }
sed 's/^/    /' "$T/base.log"
timing "local python base (background)" "$(cat "$T/base.secs")"

s=$SECONDS
docker build --target python-prebuilt --build-arg "VERSION=$VERSION" --build-arg PYTHON_IMAGE=local/python:bookworm \
	-t sandbox-runtime-python:ci . >"$T/build-python.log" 2>&1 ||
	{ tail -30 "$T/build-python.log"; fail "docker build --target python-prebuilt"; }
timing "docker build python-prebuilt" $((SECONDS - s))
[[ $(docker inspect -f '{{.Config.User}} {{.Config.WorkingDir}} {{json .Config.Entrypoint}}' sandbox-runtime-python:ci) == \
	'1000:1000 /app ["/usr/local/bin/sandbox-runtime"]' ]] || fail "sandbox-runtime-python:ci: unexpected user, workdir or entrypoint"
docker inspect -f '{{json .Config.Env}}' sandbox-runtime-python:ci | jq -e 'index("SANDBOX_BASE_DIR=/app")' >/dev/null ||
	fail "sandbox-runtime-python:ci: SANDBOX_BASE_DIR=/app is not set"

s=$SECONDS
start sr-python sandbox-runtime-python:ci
expect_basics sr-python 1000
expect_exited '["python3","-c","import os, sys; print(os.getcwd(), os.getuid(), sys.version_info[0])"]' "/app 1000 3"
expect_execute 'python3 -c "print(6 * 7)"' '{"stdout":"42\n","stderr":"","exit_code":0}'
expect_execute "sh -c 'echo out; echo err >&2; exit 3'" '{"stdout":"out\n","stderr":"err\n","exit_code":3}'

# The README's first screen: the CLI on the host against the container.
cli_out=$(dist/sandbox-runtime exec --url "$base" -- python3 -c 'print(6 * 7)' 2>"$T/cli.err") ||
	fail "sandbox-runtime exec against the container: exit $? $(cat "$T/cli.err")"
[[ $cli_out == 42 ]] || fail "sandbox-runtime exec against the container printed $(q "$cli_out"), want 42"
cli_rc=0
dist/sandbox-runtime exec --url "$base" -- sh -c 'echo err >&2; exit 3' 2>"$T/cli.err" >/dev/null || cli_rc=$?
[[ $cli_rc == 3 && $(cat "$T/cli.err") == err ]] || fail "sandbox-runtime exec -- sh -c 'exit 3': exit $cli_rc, stderr $(q "$(cat "$T/cli.err")"), want 3 and err"
say "  host CLI against the container: exec -- python3 -c 'print(6 * 7)' printed 42; exit 3 and stderr passed through"

# Orphans: each ( sleep & ) leaves a sleep whose parent is gone; it is
# reparented to PID 1, the daemon, which must reap it when it exits.
before=$(orphans_reaped)
expect_exited '["sh","-c","for i in 1 2 3 4 5; do (sleep 0.3 &); done; echo spawned"]' "spawned"
sleep 1
for ((i = 0; i < 30; i++)); do
	z=$(zombies sr-python) || fail "reading /proc in sr-python"
	[[ -z $z ]] && break
	sleep 0.1
done
[[ -z $z ]] || fail "zombies left in sr-python: $z"
after=$(orphans_reaped)
if [[ $before == none || $after == none ]]; then
	fail "no sandbox_runtime_orphans_reaped_total in /metrics"
fi
((after - before >= 5)) || fail "orphans_reaped_total went from $before to $after, want +5"
say "  5 orphaned grandchildren reaped by PID 1 (orphans_reaped_total $before -> $after), no zombie in /proc"

# The image as its users run it: their own group, a HOME of their own, the
# data libraries, a venv, pip. PyPI is not reachable here, so pip installs a
# package written through /v1/files (--no-index).
expect_exited '["id"]' "uid=1000(sandbox) gid=1000(sandbox) groups=1000(sandbox)"
expect_exited "$(sh_argv 'cd && pwd && touch .sr-ci-probe && stat -c %U:%G . .sr-ci-probe && rm .sr-ci-probe')" \
	$'/home/sandbox\nsandbox:sandbox\nsandbox:sandbox'
expect_exited '["python3","-c","import pandas, sklearn; from sklearn.linear_model import LinearRegression; m = LinearRegression().fit(pandas.DataFrame({\"x\": [1, 2, 3]}), [2, 4, 6]); print(round(float(m.predict(pandas.DataFrame({\"x\": [10]}))[0])))"]' "20"
put_file sr-ci-pkg/pyproject.toml $'[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n\n[project]\nname = "sr-ci-demo"\nversion = "1.0"\n\n[tool.setuptools]\npy-modules = ["sr_ci_demo"]\n'
put_file sr-ci-pkg/sr_ci_demo.py $'ANSWER = 42\n'
# The wheel is built with Debian's pip, setuptools and wheel (a fresh venv has
# no wheel package, and no index to fetch one from here).
expect_exited "$(sh_argv 'pip wheel -q --no-index --no-build-isolation -w /app/sr-ci-wheels /app/sr-ci-pkg && ls /app/sr-ci-wheels')" \
	"sr_ci_demo-1.0-py3-none-any.whl"
expect_exited "$(sh_argv 'python3 -m venv /app/venv && /app/venv/bin/pip install -q --no-index /app/sr-ci-wheels/sr_ci_demo-1.0-py3-none-any.whl && /app/venv/bin/python -c "import sr_ci_demo, sys; print(sr_ci_demo.ANSWER, sys.prefix)"')" \
	"42 /app/venv"
expect_exited "$(sh_argv 'pip install -q --no-index /app/sr-ci-wheels/sr_ci_demo-1.0-py3-none-any.whl && cd / && python3 -c "import sr_ci_demo; print(sr_ci_demo.__file__)"')" \
	"/home/sandbox/.local/lib/python3.11/site-packages/sr_ci_demo.py"

# A code context (docs/contexts.md): its state kept between executions, a
# matplotlib chart as a PNG, a DataFrame as HTML.
call POST /v1/contexts '{}'
expect_code 201 "POST /v1/contexts"
ctx=$(jq -r .context_id <<<"$body")
call POST "/v1/contexts/$ctx/executions?stream=true" '{"code":"x = 6"}'
expect_code 201 "POST /v1/contexts/$ctx/executions"
call POST "/v1/contexts/$ctx/executions?stream=true" '{"code":"import matplotlib.pyplot as plt, pandas\nplt.plot([1, 2])\ndisplay(pandas.DataFrame({\"a\": [x]}))\nx * 7"}'
expect_code 201 "POST /v1/contexts/$ctx/executions"
jq -se 'any(.[]; .type == "display" and (.data["image/png"] | length) > 1000)
	and any(.[]; .type == "display" and (.data["text/html"] | contains("<table")))
	and any(.[]; .type == "result" and .data["text/plain"] == "42")
	and (last | .type == "end" and .status == "ok")' <<<"$body" >/dev/null ||
	fail "a code context: $body"
call DELETE "/v1/contexts/$ctx"
expect_code 204 "DELETE /v1/contexts/$ctx"
say "  /v1/contexts: state kept, a matplotlib PNG, a DataFrame as HTML"

expect_graceful_stop sr-python '["sleep","300"]'

# The pod of deploy/: a read-only root with a writable mount at each emptyDir
# path of pod.yaml (tmpfs here, exec allowed like an emptyDir; owned by user 1000,
# as an emptyDir with fsGroup 1000 is writable to it: docker ignores mode= on a
# path the image has), as user 1000.
# A command writes HOME, and pip install --user lands in ~/.local there.
mapfile -t ro_mounts < <(awk '
	/^ *- name: / { name = $3 }
	/^ *mountPath: / { path[name] = $2 }
	/^ *emptyDir:/ { empty[name] = 1 }
	END { for (n in empty) if (n in path) print path[n] }' deploy/pod.yaml | sort)
((${#ro_mounts[@]} >= 2)) || fail "deploy/pod.yaml: read ${#ro_mounts[@]} emptyDir mount paths (${ro_mounts[*]})"
ro_args=(--read-only)
for m in "${ro_mounts[@]}"; do ro_args+=(--tmpfs "$m:rw,exec,nosuid,nodev,uid=1000,gid=1000"); done
start sr-python-ro sandbox-runtime-python:ci "${ro_args[@]}"
expect_exited "$(sh_argv 'touch /etc/sr-ci-probe 2>/dev/null && echo root writable || echo root read-only')" "root read-only"
expect_exited "$(sh_argv 'cd && pwd && touch .sr-ci-probe && rm .sr-ci-probe && mkdir -p .cache/pip && echo HOME writable')" \
	$'/home/sandbox\nHOME writable'
put_file sr-ci-pkg/pyproject.toml $'[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n\n[project]\nname = "sr-ci-demo"\nversion = "1.0"\n\n[tool.setuptools]\npy-modules = ["sr_ci_demo"]\n'
put_file sr-ci-pkg/sr_ci_demo.py $'ANSWER = 42\n'
expect_exited "$(sh_argv 'pip wheel -q --no-index --no-build-isolation -w /app/sr-ci-wheels /app/sr-ci-pkg && pip install -q --user --no-index /app/sr-ci-wheels/sr_ci_demo-1.0-py3-none-any.whl && cd / && python3 -c "import sr_ci_demo; print(sr_ci_demo.__file__)"')" \
	"/home/sandbox/.local/lib/python3.11/site-packages/sr_ci_demo.py"
say "  read-only root with tmpfs at ${ro_mounts[*]} (deploy/pod.yaml's emptyDirs): HOME writable, pip install --user works"
docker rm -f sr-python-ro >/dev/null
timing "checks python-prebuilt" $((SECONDS - s))

# ---- 6. codex-prebuilt: the binary and the Codex CLI ---------------------------
finish "$codexbase_pid" || { cat "$T/codexbase.log"; fail "docker/local-base.sh local/codex:bookworm"; }
sed 's/^/    /' "$T/codexbase.log"
timing "local codex base (background)" "$(cat "$T/codexbase.secs")"
finish "$codexcli_pid" || { cat "$T/codexcli.log"; fail "staging @openai/codex@$CODEX_VERSION into dist/codex"; }
sed 's/^/    /' "$T/codexcli.log"
timing "stage codex CLI on the host (background)" "$(cat "$T/codexcli.secs")"

s=$SECONDS
docker build --target codex-prebuilt --build-arg "VERSION=$VERSION" --build-arg "CODEX_VERSION=$CODEX_VERSION" \
	--build-arg PYTHON_IMAGE=local/python:bookworm --build-arg CODEX_BASE=local/codex:bookworm \
	-t sandbox-runtime-codex:ci . >"$T/build-codex.log" 2>&1 ||
	{ tail -30 "$T/build-codex.log"; fail "docker build --target codex-prebuilt"; }
timing "docker build codex-prebuilt" $((SECONDS - s))
[[ $(docker inspect -f '{{.Config.User}} {{.Config.WorkingDir}} {{json .Config.Entrypoint}}' sandbox-runtime-codex:ci) == \
	'1000:1000 /app ["/usr/local/bin/sandbox-runtime"]' ]] || fail "sandbox-runtime-codex:ci: unexpected user, workdir or entrypoint"
[[ $(docker inspect -f '{{index .Config.Labels "org.opencontainers.image.version"}} {{index .Config.Labels "sandbox-runtime.codex.version"}}' sandbox-runtime-codex:ci) == \
	"$VERSION $CODEX_VERSION" ]] || fail "sandbox-runtime-codex:ci: version labels are not $VERSION $CODEX_VERSION"

s=$SECONDS
start sr-codex sandbox-runtime-codex:ci
expect_basics sr-codex 1000
call GET /v1/info
jq -e '.limits.max_timeout_seconds == 3600' <<<"$body" >/dev/null ||
	fail "sr-codex: /v1/info limits.max_timeout_seconds is not 3600: $body"
expect_exited '["codex","--version"]' "codex-cli $CODEX_VERSION"
expect_exited '["id"]' "uid=1000(sandbox) gid=1000(sandbox) groups=1000(sandbox)"
expect_exited "$(sh_argv 'cd && pwd && mkdir -p .codex && stat -c %U:%G . .codex && git --version >/dev/null && ps -p 1 -o comm=')" \
	$'/home/sandbox\nsandbox:sandbox\nsandbox:sandbox\nsandbox-runtime'

# The stand-in for the model API: docker/codex-stub/model-stub.js, written
# into the container through /v1/files and run there through /v1/commands,
# on 127.0.0.1 of the container. Only the model service is replaced.
put_file .sr-ci/model-stub.js "$(cat docker/codex-stub/model-stub.js)"

# start_stub PROOF_PATH PROOF_TEXT: a model stub scripted to write that text
# to that path; sets $stub_id and $stub_port.
start_stub() {
	local i
	call POST /v1/commands "$(jq -cn --arg path "$1" --arg text "$2" '{argv: ["node", "/app/.sr-ci/model-stub.js", $path, $text], timeout: 3600}')"
	expect_code 201 "POST /v1/commands (model stub)"
	stub_id=$(jq -r .command_id <<<"$body")
	stub_port=""
	for ((i = 0; i < 100; i++)); do
		call GET "/v1/commands/$stub_id/output?follow=false"
		stub_port=$(jq -rj 'select(.type == "output" and .stream == "stdout") | .data' <<<"$body" | awk '$1 == "listening" { print $2 }')
		[[ -n $stub_port ]] && break
		jq -e 'select(.type == "exit")' <<<"$body" >/dev/null && fail "the model stub exited: $body"
		sleep 0.1
	done
	[[ -n $stub_port ]] || fail "the model stub did not print its port within 10 s: $body"
	say "  model stub (command $stub_id) on 127.0.0.1:$stub_port in the container, writing $1"
}
proof=proof-$RANDOM$RANDOM
start_stub /app/proof.txt "$proof"

# codex_argv PROMPT: codex exec --json against the stub on $stub_port. No
# sandbox or approval flags: those must come from the image's
# /etc/codex/config.toml.
codex_argv() {
	jq -cn --arg port "$stub_port" --arg prompt "$1" '["codex", "exec", "--json", "--skip-git-repo-check",
		"-c", "model_provider=\"stub\"",
		"-c", "model_providers.stub={name=\"stub\",base_url=\"http://127.0.0.1:\($port)/v1\",wire_api=\"responses\",request_max_retries=0,stream_max_retries=0}",
		"-m", "stub-model", $prompt]'
}

# stream_to_exit ID FILE: append the command's events to FILE from where it
# stops (the last next_cursor) until the exit event.
stream_to_exit() {
	local id=$1 file=$2 cursor i
	for ((i = 0; i < 5; i++)); do
		[[ $(tail -n1 "$file" | jq -r .type) == exit ]] && return 0
		cursor=$(tail -n1 "$file" | jq -r .next_cursor)
		curl -sSN -m 90 "$base/v1/commands/$id/output?cursor=$cursor&max_wait=60" >>"$file" || fail "GET /v1/commands/$id/output: curl failed"
	done
	fail "command $id: no exit event after 5 windows"
}

# check_codex_events FILE: the NDJSON events of a codex exec --json run. Every
# output event starts where the one before ended (nothing lost, nothing
# twice, no gap); the stdout bytes, joined, are whole JSONL lines, each a JSON
# object, in the order Codex emits them; the run exits 0. Sets $events (the
# number of JSONL events).
check_codex_events() {
	local file=$1 jsonl
	jq -se '.[0].type == "started" and .[-1].type == "exit" and ([.[] | select(.type == "gap")] | length == 0)' "$file" >/dev/null ||
		fail "codex exec: the stream does not run from started to exit without a gap: $(head -c 2000 "$file")"
	jq -se 'reduce (.[] | select(.type == "output")) as $e ({ok: true, at: 0};
		{ok: (.ok and $e.cursor == .at), at: $e.next_cursor}) | .ok' "$file" >/dev/null ||
		fail "codex exec: output cursors are not contiguous"
	jq -se '.[-1].status | .state == "exited" and .exit_code == 0' "$file" >/dev/null ||
		fail "codex exec did not exit 0: $(tail -n1 "$file")"
	jsonl=$T/codex.jsonl
	jq -rj 'select(.type == "output" and .stream == "stdout") | if .encoding == "base64" then (.data | @base64d) else .data end' "$file" >"$jsonl"
	[[ -s $jsonl && $(tail -c1 "$jsonl" | od -An -c | tr -d ' ') == '\n' ]] || fail "codex exec: stdout does not end with a whole line"
	{ jq -ce 'objects' "$jsonl" >/dev/null 2>&1 && [[ $(jq -c 'objects' "$jsonl" | wc -l) == $(wc -l <"$jsonl") ]]; } ||
		fail "codex exec: a stdout line is not a JSON object: $(head -c 2000 "$jsonl")"
	# The order of a turn with one shell call and a final message.
	jq -se --arg proof "$proof" '
		(.[0].type == "thread.started") and (.[-1].type == "turn.completed") and
		([.[] | select(.type == "turn.started")] | length == 1) and
		([.[] | if .type == "turn.started" then "turn"
			elif (.type == "item.started" and .item.type == "command_execution" and (.item.command | contains($proof))) then "cmd-start"
			elif (.type == "item.completed" and .item.type == "command_execution" and .item.exit_code == 0) then "cmd-done"
			elif (.type == "item.completed" and .item.type == "agent_message" and (.item.text | startswith("stub model: proof written"))) then "message"
			else empty end] == ["turn", "cmd-start", "cmd-done", "message"])' "$jsonl" >/dev/null ||
		fail "codex exec: unexpected JSONL events: $(jq -c '[.type, .item.type?]' "$jsonl" | paste -sd' ')"
	events=$(wc -l <"$jsonl")
}

# expect_proof: /app/proof.txt, read through /v1/files, holds the stub's text.
expect_proof() {
	call GET /v1/files/proof.txt
	expect_code 200 "GET /v1/files/proof.txt"
	[[ $body == "$proof" ]] || fail "/app/proof.txt holds $(q "$body"), want $(q "$proof")"
}

# 1. codex exec --json, stdin /dev/null (the daemon's default).
started=${EPOCHREALTIME/[.,]/}
curl -sSN -m 90 -X POST "$base/v1/commands?stream=true&max_wait=60" -H 'Content-Type: application/json' \
	--data-binary "$(jq -c '{argv: ., timeout: 600}' <<<"$(codex_argv "Create /app/proof.txt")")" >"$T/codex1.ndjson" ||
	fail "POST /v1/commands?stream=true (codex exec): curl failed"
codex_id=$(head -n1 "$T/codex1.ndjson" | jq -r .status.command_id)
[[ $codex_id != null && -n $codex_id ]] || fail "codex exec: no started event: $(head -c 500 "$T/codex1.ndjson")"
stream_to_exit "$codex_id" "$T/codex1.ndjson"
took=$(((${EPOCHREALTIME/[.,]/} - started) / 1000))
check_codex_events "$T/codex1.ndjson"
expect_proof
say "  codex exec --json: exit 0 in ${took} ms, $events JSONL events intact and in order, /app/proof.txt $(q "$body") via /v1/files"

# What Codex told the model: the image's config made the pod the sandbox.
call GET "/v1/commands/$stub_id/output?follow=false"
stub_log=$(jq -rj 'select(.type == "output" and .stream == "stderr") | .data' <<<"$body")
jq -se 'map(select(.answered | tostring | startswith("tool call"))) | length >= 1 and all(.sandbox_mode == "danger-full-access" and .approval_policy == "never")' \
	<<<"$stub_log" >/dev/null || fail "codex did not run with sandbox_mode danger-full-access and approval never (stub log: $stub_log)"
say "  codex ran with sandbox_mode danger-full-access, approval never (from /etc/codex/config.toml)"

# 2. The same with a stdin pipe closed at once (as an SDK that keeps stdin
# for control messages, then closes it).
call DELETE /v1/files/proof.txt
expect_code 204 "DELETE /v1/files/proof.txt"
started=${EPOCHREALTIME/[.,]/}
call POST /v1/commands "$(jq -c '{argv: ., timeout: 600, stdin: true}' <<<"$(codex_argv "Create /app/proof.txt again")")"
expect_code 201 "POST /v1/commands (codex exec, stdin: true)"
codex_id=$(jq -r .command_id <<<"$body")
call POST "/v1/commands/$codex_id/stdin" '{"data":"","eof":true}'
expect_code 202 "POST /v1/commands/$codex_id/stdin (eof)"
# GET …/output has no "started" line: this one stands for the create.
printf '{"type":"started","next_cursor":0}\n' >"$T/codex2.ndjson"
stream_to_exit "$codex_id" "$T/codex2.ndjson"
took=$(((${EPOCHREALTIME/[.,]/} - started) / 1000))
check_codex_events "$T/codex2.ndjson"
expect_proof
say "  codex exec --json with \"stdin\": true and an immediate eof: exit 0 in ${took} ms, $events JSONL events"

# 3. The same on a terminal: "pty" in the create, output read through the
# NDJSON stream, where every event is stream "pty" (stdout and stderr merged,
# "\n" written as "\r\n"). Stdin is the terminal, which codex exec does not
# read when it is a TTY: nothing is typed, no eof sent. Its own stub, so the
# file is another one, with another text. Checked: started to exit with
# contiguous cursors and no gap, all bytes on stream pty and counted as
# pty_bytes, the terminal's \r\n line ends, the final message in the terminal
# output, the file through /v1/files, exit 0. Not checked: the exact bytes (on
# a TTY Codex's stderr progress, colours included, shares the lines).
main_stub_id=$stub_id main_stub_port=$stub_port
proof_pty=pty-proof-$RANDOM$RANDOM
start_stub /app/proof-pty.txt "$proof_pty"
started=${EPOCHREALTIME/[.,]/}
curl -sSN -m 90 -X POST "$base/v1/commands?stream=true&max_wait=60" -H 'Content-Type: application/json' \
	--data-binary "$(jq -c '{argv: ., timeout: 600, pty: {cols: 120, rows: 40}}' <<<"$(codex_argv "Create /app/proof-pty.txt on a terminal")")" \
	>"$T/codex-pty.ndjson" || fail "POST /v1/commands?stream=true (codex exec on a PTY): curl failed"
codex_id=$(head -n1 "$T/codex-pty.ndjson" | jq -r .status.command_id)
[[ $codex_id != null && -n $codex_id ]] || fail "codex exec on a PTY: no started event: $(head -c 500 "$T/codex-pty.ndjson")"
jq -e '.status.pty == {cols: 120, rows: 40, term: "xterm-256color"}' <(head -n1 "$T/codex-pty.ndjson") >/dev/null ||
	fail "codex exec on a PTY: the started status has no 120x40 terminal: $(head -n1 "$T/codex-pty.ndjson")"
stream_to_exit "$codex_id" "$T/codex-pty.ndjson"
took_pty=$(((${EPOCHREALTIME/[.,]/} - started) / 1000))
f=$T/codex-pty.ndjson
jq -se '.[0].type == "started" and .[-1].type == "exit" and ([.[] | select(.type == "gap")] | length == 0)' "$f" >/dev/null ||
	fail "codex exec on a PTY: the stream does not run from started to exit without a gap: $(head -c 2000 "$f")"
jq -se 'reduce (.[] | select(.type == "output")) as $e ({ok: true, at: 0};
	{ok: (.ok and $e.cursor == .at and $e.stream == "pty"), at: $e.next_cursor}) | .ok' "$f" >/dev/null ||
	fail "codex exec on a PTY: output cursors are not contiguous, or an event is not on stream pty"
jq -se '.[-1].status | .state == "exited" and .exit_code == 0 and .pty_bytes > 0 and .stdout_bytes == 0 and .stderr_bytes == 0' "$f" >/dev/null ||
	fail "codex exec on a PTY did not exit 0 with pty_bytes only: $(tail -n1 "$f"); terminal: $(jq -rj 'select(.type == "output") | .data' "$f" | head -c 2000 | jq -Rsc .)"
jq -rj 'select(.type == "output") | if .encoding == "base64" then (.data | @base64d) else .data end' "$f" >"$T/codex-pty.out"
pty_bytes=$(wc -c <"$T/codex-pty.out")
[[ $pty_bytes == "$(jq -s '.[-1].status.pty_bytes' "$f")" && $pty_bytes == "$(jq -s '.[-1].next_cursor' "$f")" ]] ||
	fail "codex exec on a PTY: $pty_bytes bytes in the output events, status says $(tail -n1 "$f" | jq -c '[.status.pty_bytes, .next_cursor]')"
# The line discipline's ONLCR: no "\n" reaches the stream without its "\r".
jq -Rse 'test("\r\n") and (test("(^|[^\r])\n") | not)' "$T/codex-pty.out" >/dev/null ||
	fail "codex exec on a PTY: not every line ends in \\r\\n: $(head -c 2000 "$T/codex-pty.out" | jq -Rsc .)"
grep -q 'stub model: proof written' "$T/codex-pty.out" ||
	fail "codex exec on a PTY: the final message is not in the terminal output: $(head -c 3000 "$T/codex-pty.out" | jq -Rsc .)"
pty_events=$(jq -s 'map(select(.type == "output")) | length' "$f")
pty_jsonl=$(tr -d '\r' <"$T/codex-pty.out" | jq -Rc 'fromjson? | objects | .type' | wc -l)
call GET /v1/files/proof-pty.txt
expect_code 200 "GET /v1/files/proof-pty.txt"
[[ $body == "$proof_pty" ]] || fail "/app/proof-pty.txt holds $(q "$body"), want $(q "$proof_pty")"
pty_file=$body
call POST "/v1/commands/$stub_id/kill"
expect_code 200 "POST /v1/commands/$stub_id/kill (the PTY run's model stub)"
stub_id=$main_stub_id stub_port=$main_stub_port
timing "codex exec on a PTY" $(((took_pty + 500) / 1000))
say "  codex exec --json on a 120x40 PTY: exit 0 in ${took_pty} ms, $pty_events output events, $pty_bytes bytes on stream pty" \
	"($pty_jsonl of its lines JSON events), \\r\\n line ends, final message on the terminal, /app/proof-pty.txt $(q "$pty_file") via /v1/files"

# An unreachable model: Codex does not give up by itself (it reports
# "Reconnecting... waiting for network" as error events and keeps trying;
# request_max_retries and stream_max_retries do not end that wait), so the
# command's timeout is what bounds it (docs/images.md, "The Codex image"). A model
# provider on a port where nothing listens (connections refused), timeout 15 s.
started=${EPOCHREALTIME/[.,]/}
call POST /v1/commands "$(jq -cn '{timeout: 15, argv: ["codex", "exec", "--json", "--skip-git-repo-check",
	"-c", "model_provider=\"down\"",
	"-c", "model_providers.down={name=\"down\",base_url=\"http://127.0.0.1:9/v1\",wire_api=\"responses\"}",
	"-m", "down-model", "hello"]}')"
expect_code 201 "POST /v1/commands (codex exec, model refusing connections)"
down_id=$(jq -r .command_id <<<"$body")
for ((i = 0; i < 3; i++)); do
	call GET "/v1/commands/$down_id?wait=20"
	[[ $(jq -r .state <<<"$body") != running ]] && break
done
took_down=$(((${EPOCHREALTIME/[.,]/} - started) / 1000))
[[ $(jq -r .state <<<"$body") == timed_out ]] ||
	fail "codex exec against a refusing model: state $(jq -r .state <<<"$body") after ${took_down} ms, want timed_out at the 15 s timeout: $body; stdout: $(stdout_of "$down_id" | head -c 2000 | jq -Rsc .)"
((took_down < 30000)) || fail "codex exec against a refusing model ended after ${took_down} ms, want the 15 s timeout plus the grace"
stdout_of "$down_id" | grep -q 'Reconnecting' ||
	fail "codex exec against a refusing model: no Reconnecting event on stdout: $(stdout_of "$down_id" | head -c 2000 | jq -Rsc .)"
say "  codex exec against a model refusing connections: still retrying at the timeout, timed_out after ${took_down} ms (timeout 15 s)"

# 4. docker stop while codex exec waits on a model that does not answer: the
# daemon ends it, the stub and a sleep, all "terminated", and exits 0.
call POST /v1/commands "$(jq -c '{argv: ., timeout: 600}' <<<"$(codex_argv "STUB-HANG")")"
expect_code 201 "POST /v1/commands (codex exec, hanging model)"
hang_id=$(jq -r .command_id <<<"$body")
for ((i = 0; i < 200; i++)); do
	call GET "/v1/commands/$stub_id/output?follow=false"
	jq -rj 'select(.type == "output" and .stream == "stderr") | .data' <<<"$body" | grep -q '"answered":"hang"' && break
	sleep 0.1
done
jq -rj 'select(.type == "output" and .stream == "stderr") | .data' <<<"$body" | grep -q '"answered":"hang"' ||
	fail "codex exec STUB-HANG did not reach the model stub within 20 s"
expect_graceful_stop sr-codex '["sleep","300"]' "$hang_id" "$stub_id"
timing "checks codex-prebuilt" $((SECONDS - s))

# ---- 7. the documents' docker examples, as written ---------------------------
# Every ```sh block of README.md and docs/*.md marked <!-- example: docker -->
# runs, in order, against the images under their names (docs/readme_test.go,
# README_EXAMPLES=docker; the "docker build" blocks are what this stage does
# offline). They publish 127.0.0.1:8888. This dockerd has no default bridge:
# docker run gets --network of ours.
if [[ $mode == bridge ]]; then
	s=$SECONDS
	docker tag sandbox-runtime:ci sandbox-runtime
	docker tag sandbox-runtime-python:ci sandbox-runtime-python
	docker tag sandbox-runtime-codex:ci sandbox-runtime-codex
	containers+=(sb sb-python codex codex-stub)
	README_EXAMPLES=docker README_DOCKER_RUN_ARGS="--network $network" \
		go test -count=1 -v -run '^TestREADMEExamples$' ./docs/ >"$T/readme-docker.log" 2>&1 ||
		{ tail -60 "$T/readme-docker.log"; fail "the documents' docker examples (log above)"; }
	say "the docker examples of README.md and docs/: $(grep -c ': ran:' "$T/readme-docker.log") blocks ran as written"
	timing "README docker examples" $((SECONDS - s))
else
	fail "the documents' docker examples need a bridge network (DOCKER_CI_NETWORK=$mode): they publish 127.0.0.1:8888"
fi

say "image sizes: $(for i in sandbox-runtime:ci sandbox-runtime-python:ci sandbox-runtime-codex:ci; do
	printf '%s %s MB; ' "$i" $(($(docker image inspect -f '{{.Size}}' "$i") / 1000000))
done)"
