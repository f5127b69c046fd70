#!/usr/bin/env bash
# .ci/docker.sh: the CI "docker" stage. It builds the images of ./Dockerfile and
# runs them for real on this machine, against a private dockerd (its own
# data-root, exec-root, socket and pidfile under a temp dir, stopped by PID in
# a trap) that needs no image registry:
#
#   * the binary is built on the host (CGO_ENABLED=0, -trimpath, version
#     stamped) into dist/sandbox-runtime; the targets runtime-prebuilt
#     (scratch + binary) and python-prebuilt (on a local Debian python3 base
#     made by docker/local-base.sh with debootstrap, cached) are built with
#     the legacy builder;
#   * each container answers GET /v1/health on a published port, reports the
#     stamped version, runs a command through /v1/commands and one through the
#     legacy POST /execute, as the image's non-root user, in /app;
#   * python: orphaned grandchildren are reaped by the daemon as PID 1: no
#     process inside is left in state Z and orphans_reaped_total counts them;
#   * docker stop (SIGTERM) ends a running command with state "terminated"
#     and the daemon exits 0 by itself, well inside docker stop's 30 s.
#
# If Docker cannot be installed or its daemon cannot start here, the stage
# prints SKIP with the reason and exits 0. Once dockerd is up, any failure
# fails the stage. Run from anywhere: bash .ci/docker.sh
#
# Environment:
#   VERSION       version stamped into the binary     (git describe, else "dev")
#   CACHE_DIR     cache of the debootstrap base       (/var/cache/sandbox-runtime-ci)
#   CACHE_DAYS    rebuild that base when older        (7)
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
		CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=$1" \
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

# ---- 3. the local python base, in the background ------------------------------
export CACHE_DIR=${CACHE_DIR:-/var/cache/sandbox-runtime-ci}
# shellcheck disable=SC2016 # expanded by the inner shell / by jq
background base 'docker/local-base.sh local/python:bookworm && echo $SECONDS >"$1"' _ "$T/base.secs"
base_pid=$bg_pid

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

# start NAME IMAGE: run the image detached, publish its port on 127.0.0.1:$port
# and wait until GET /v1/health answers {"status":"ok"}.
start() {
	local name=$1 image=$2 try out i
	for ((try = 0; try < 3; try++)); do
		port=$(free_port) || fail "no free port"
		containers+=("$name")
		if [[ $mode == bridge ]]; then
			out=$(docker run -d --name "$name" --network "$network" -p "127.0.0.1:$port:8888" "$image" 2>&1)
		else
			out=$(docker run -d --name "$name" --network host -e "SANDBOX_RUNTIME_ADDR=127.0.0.1:$port" "$image" 2>&1)
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

# expect_exited ARGV_JSON WANT_STDOUT: run it; it must exit 0 in /app with that stdout.
expect_exited() {
	local out
	run_command "$1"
	[[ $(jq -r '"\(.state) \(.exit_code) \(.cwd)"' <<<"$body") == "exited 0 /app" ]] ||
		fail "command $1 did not exit 0 in /app: $body"
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

# expect_graceful_stop NAME ARGV_JSON: start a long command, docker stop the
# container; the daemon must exit 0 by itself with the command "terminated".
expect_graceful_stop() {
	local name=$1 id s took ec
	call POST /v1/commands "{\"argv\":$2}"
	expect_code 201 "POST /v1/commands $2"
	id=$(jq -r .command_id <<<"$body")
	sleep 0.5
	call GET "/v1/commands/$id"
	[[ $(jq -r .state <<<"$body") == running ]] || fail "$name: $2 is not running: $body"
	s=${EPOCHREALTIME/[.,]/}
	docker stop -t 30 "$name" >/dev/null || fail "docker stop $name"
	took=$(((${EPOCHREALTIME/[.,]/} - s) / 1000)) # ms
	ec=$(docker inspect -f '{{.State.ExitCode}}' "$name")
	[[ $ec == 0 ]] || fail "$name: exit code $ec after docker stop (137 = SIGKILL after the 30 s timeout)"
	((took < 25000)) || fail "$name: docker stop took ${took} ms, over the 25 s shutdown budget"
	# shellcheck disable=SC2016 # expanded by the inner shell / by jq
	log_has "$name" '.msg == "command finished" and .command_id == $id and .state == "terminated"' --arg id "$id" ||
		fail "$name: no \"command finished\" log line with state terminated for $id"
	log_has "$name" '.msg == "stopped"' || fail "$name: no \"stopped\" log line"
	say "  docker stop: exit 0 after ${took} ms, $2 ended \"terminated\""
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

expect_graceful_stop sr-python '["sleep","300"]'
timing "checks python-prebuilt" $((SECONDS - s))
