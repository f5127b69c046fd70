#!/usr/bin/env bash
# docker/local-base.sh — make a local stand-in for a Debian base image (the
# Python one by default, or the Codex one with INCLUDE=nodejs,git,...) when no
# image registry is reachable (CI, air-gapped hosts).
#
#   docker/local-base.sh IMAGE_TAG
#
# Bootstraps a Debian minbase root filesystem with python3 (debootstrap, from
# the Debian mirror this host's apt already uses), caches it as a tarball and
# imports it into the Docker daemon that DOCKER_HOST points at, as IMAGE_TAG
# (e.g. local/python:bookworm). Then build the python target against it:
#
#   docker build --build-arg PYTHON_IMAGE=local/python:bookworm --target python-prebuilt .
#
# Needs root and debootstrap. Environment:
#   SUITE        Debian suite to bootstrap              (bookworm)
#   INCLUDE      extra packages, comma-separated         (python3); their
#                Depends are resolved, Recommends are not
#   IMAGE_CMD    CMD of the imported image, JSON         (["python3"])
#   MIRROR       Debian mirror                           (first one in /etc/apt/sources.list*
#                                                         serving $SUITE, else deb.debian.org)
#   CACHE_DIR    where the rootfs tarball is kept        (/var/cache/sandbox-runtime-ci)
#   CACHE_DAYS   rebuild the tarball when older than this (7; 0 = always rebuild)
#   DOCKER       docker client                           (docker)
set -euo pipefail

tag=${1:?usage: docker/local-base.sh IMAGE_TAG}
suite=${SUITE:-bookworm}
include=${INCLUDE:-python3}
cache_dir=${CACHE_DIR:-/var/cache/sandbox-runtime-ci}
cache_days=${CACHE_DAYS:-7}
docker=${DOCKER:-docker}
image_cmd=${IMAGE_CMD:-'["python3"]'}

log() { printf '[local-base] %s\n' "$*" >&2; }

# find_mirror prints the first Debian archive URI (not the security archive)
# that the host's apt sources list for $suite, in one-line or deb822 format.
find_mirror() {
	local f
	for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
		[[ -r $f ]] || continue
		awk -v suite="$suite" '
			# one-line format: deb [opts] URI suite comp...
			/^[[:space:]]*deb[[:space:]]/ {
				i = 2; if ($i ~ /^\[/) { while ($i !~ /\]$/) i++; i++ }
				if ($(i+1) == suite && $i !~ /security/) { print $i; exit }
			}
			# deb822 format: a paragraph with URIs: and Suites:
			/^URIs:/   { uris = $2 }
			/^Suites:/ { for (j = 2; j <= NF; j++) if ($j == suite) hit = 1 }
			/^[[:space:]]*$/ { if (hit && uris !~ /security/) { print uris; exit } uris = ""; hit = 0 }
			END { if (hit && uris !~ /security/) print uris }
		' "$f" | head -n1
	done | head -n1
}

mirror=${MIRROR:-$(find_mirror)}
mirror=${mirror:-http://deb.debian.org/debian}
key=$(printf '%s' "$suite-minbase-${include//,/-}" | tr -c 'A-Za-z0-9._-' '_')
tarball=$cache_dir/$key.tar

fresh=""
if [[ -s $tarball && $cache_days != 0 ]] && [[ -n $(find "$tarball" -mtime "-$cache_days" 2>/dev/null) ]]; then
	fresh=1
fi

if [[ -z $fresh ]]; then
	command -v debootstrap >/dev/null || { log "debootstrap is not installed"; exit 1; }
	mkdir -p "$cache_dir"
	work=$(mktemp -d "$cache_dir/.bootstrap.XXXXXX")
	# debootstrap mounts /proc and /sys inside the target; make sure nothing
	# stays mounted whatever happens.
	cleanup() {
		awk -v w="$work/" 'index($2, w) == 1 { print $2 }' /proc/mounts | sort -r |
			while read -r m; do umount -l "$m" 2>/dev/null || true; done
		rm -rf "$work"
	}
	trap cleanup EXIT
	trap "exit 143" TERM INT
	log "debootstrap --variant=minbase --include=$include $suite from $mirror"
	start=$SECONDS
	if ! debootstrap --variant=minbase --include="$include" "$suite" "$work/root" "$mirror" >"$work/debootstrap.log" 2>&1; then
		tail -n 30 "$work/debootstrap.log" >&2
		[[ -f $work/root/debootstrap/debootstrap.log ]] && tail -n 30 "$work/root/debootstrap/debootstrap.log" >&2
		log "debootstrap failed"
		exit 1
	fi
	# Slim it down: package caches and lists are not needed in the image.
	rm -rf "$work/root/var/cache/apt/archives/"*.deb "$work/root/var/lib/apt/lists/"* "$work/root/debootstrap"
	tar --numeric-owner -C "$work/root" -cf "$work/rootfs.tar" .
	mv -f "$work/rootfs.tar" "$tarball"   # atomic: concurrent runs see a whole file or none
	log "bootstrapped in $((SECONDS - start))s: $tarball ($(du -h "$tarball" | cut -f1))"
else
	log "using cached $tarball"
fi

start=$SECONDS
"$docker" import \
	--change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
	--change 'ENV LANG=C.UTF-8' \
	--change "CMD $image_cmd" \
	"$tarball" "$tag" >/dev/null
log "imported $tag in $((SECONDS - start))s"
