#!/usr/bin/env python3
"""Drive upstream's Python SDK (k8s_agent_sandbox, kubernetes-sigs/agent-sandbox)
in its sandboxd mode against a running sandbox-runtime.

The SDK is used unmodified, from a copy of its source given with --sdk (the
test extracts it from upstream's repository at a pinned commit; nothing of it
is in this repository). Three things are adapted around it, none of them its
logic:

  * its kubectl port-forward step: SandboxdPodTunnelStrategy.connect() is
    replaced by one that hands back our addresses (--rest, --grpc), as the
    tunnel would once ready; close() and verify_connection() have no process
    to stop or watch. There is no cluster, so the Sandbox gets a stand-in
    for its Kubernetes helper, which that step alone used.
  * its vendored ProcessService stubs (k8s_agent_sandbox/_proto) are tried
    first, in a python of their own; when they do not load (upstream's need
    protobuf >= 7's runtime_version; Debian 12 has 4.21) they are generated
    again in the copy (a temporary directory), from upstream's own
    process.proto (--proto), with the protoc and grpc_python_plugin of this
    machine (Debian's protobuf-compiler and protobuf-compiler-grpc, the same
    releases as its python3-protobuf and python3-grpcio), for its
    protobuf/grpcio. Generated code from the same .proto: no logic changes.
  * Debian's pydantic is 1.10; the SDK's models use pydantic 2's
    field_validator, which is given here as pydantic 1's validator (same
    semantics for the SDK's two uses: plain after-validators).

Every call's outcome is printed on a line of its own ("PASS name: detail" or
"FAIL name: error"), then "N of M calls succeeded"; the exit status is 1 when any
call failed.
"""

import argparse
import os
import shutil
import subprocess
import sys
import time
import traceback


def vendored_stubs_load(sdk_dir):
    """None when the SDK's own stubs import with this python's protobuf and
    grpcio (as the SDK's _process_stubs shim imports them), else the error."""
    proto_root = os.path.join(sdk_dir, "k8s_agent_sandbox", "_proto")
    r = subprocess.run([sys.executable, "-c",
                        "import sys; sys.path.insert(0, sys.argv[1]); "
                        "from process.v1 import process_pb2, process_pb2_grpc", proto_root],
                       capture_output=True, text=True, timeout=60)
    if r.returncode == 0:
        return None
    lines = (r.stderr or r.stdout).strip().splitlines()
    return lines[-1] if lines else "exit %d" % r.returncode


def regenerate_stubs(sdk_dir, proto):
    """Generate process_pb2 / process_pb2_grpc into the SDK copy's _proto."""
    out = os.path.join(sdk_dir, "k8s_agent_sandbox", "_proto")
    spec_root = os.path.dirname(os.path.dirname(os.path.dirname(proto)))  # .../spec
    rel = os.path.relpath(proto, spec_root)
    for name in ("process_pb2.py", "process_pb2.pyi", "process_pb2_grpc.py"):
        p = os.path.join(out, "process", "v1", name)
        if os.path.exists(p):
            os.remove(p)
    plugin = shutil.which("grpc_python_plugin")
    protoc = shutil.which("protoc")
    if not plugin or not protoc:
        raise SystemExit("protoc and grpc_python_plugin are needed (Debian: protobuf-compiler, protobuf-compiler-grpc)")
    subprocess.run([protoc, "-I", spec_root, "-I", "/usr/include",
                    "--python_out=" + out, "--grpc_python_out=" + out,
                    "--plugin=protoc-gen-grpc_python=" + plugin, rel],
                   check=True, cwd=spec_root)


def pydantic_compat():
    import pydantic
    if hasattr(pydantic, "field_validator"):
        return "pydantic " + pydantic.VERSION
    def field_validator(*fields, mode="after", **_):
        return pydantic.validator(*fields, pre=(mode == "before"), allow_reuse=True)
    pydantic.field_validator = field_validator
    return "pydantic %s with field_validator as validator" % pydantic.VERSION


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sdk", required=True, help="the agentic-sandbox-client directory (a copy: its _proto is regenerated)")
    ap.add_argument("--proto", required=True, help="upstream's packages/sandboxd/spec/process/v1/process.proto")
    ap.add_argument("--rest", required=True, help="http://127.0.0.1:PORT of SANDBOXD_REST_ADDR")
    ap.add_argument("--grpc", required=True, help="127.0.0.1:PORT of SANDBOXD_GRPC_ADDR")
    ap.add_argument("--prefix", default="sdk-harness", help="the directory below the base dir the calls use")
    a = ap.parse_args()

    os.environ["PYTHONDONTWRITEBYTECODE"] = "1"
    why = vendored_stubs_load(a.sdk)
    if why is None:
        print("setup: the SDK's vendored stubs load as they are")
    else:
        regenerate_stubs(a.sdk, a.proto)
        print("setup: the SDK's vendored stubs do not load here (%s): regenerated from process.proto with this machine's protoc and grpc_python_plugin" % why)
    import google.protobuf, grpc
    print("setup: %s %s, protobuf %s, grpcio %s" % (sys.executable, sys.version.split()[0], google.protobuf.__version__, grpc.__version__))
    print("setup: " + pydantic_compat())
    sys.path.insert(0, a.sdk)

    from k8s_agent_sandbox import connector as conn
    from k8s_agent_sandbox.models import SandboxdPodTunnelConnectionConfig
    from k8s_agent_sandbox.sandbox import Sandbox

    # The one replaced step: the tunnel. What connect() returns and sets is
    # what the real one sets once kubectl port-forward is ready.
    def connect(self):
        self.base_url, self.grpc_target = a.rest, a.grpc
        return self.base_url

    def close(self):
        self.base_url, self.grpc_target = None, None

    conn.SandboxdPodTunnelStrategy.connect = connect
    conn.SandboxdPodTunnelStrategy.close = close
    conn.SandboxdPodTunnelStrategy.verify_connection = lambda self: None

    class NoCluster:
        def get_sandbox(self, *args, **kwargs):
            return {}

    sb = Sandbox(claim_name="harness", sandbox_id="harness", namespace="default",
                 connection_config=SandboxdPodTunnelConnectionConfig(), k8s_helper=NoCluster())
    if not sb.connector.is_sandboxd():
        raise SystemExit("the SDK is not in its sandboxd mode")

    p = a.prefix
    results = []

    def call(name, fn, check):
        try:
            got = fn()
            problem = check(got)
        except Exception as e:  # the SDK raises; the harness reports
            got, problem = None, "%s: %s" % (type(e).__name__, e)
            if os.environ.get("SDK_HARNESS_TRACEBACK"):
                traceback.print_exc()
        results.append(problem is None)
        if problem is None:
            print("PASS %s: %r" % (name, got)[:400])
        else:
            print("FAIL %s: %s" % (name, problem)[:2000])
        sys.stdout.flush()

    def equal(want):
        return lambda got: None if got == want else "got %r, want %r" % (got, want)

    content = b"hello from upstream's SDK\n\x00\xff"
    call("files.write", lambda: sb.files.write(p + "/hello.txt", content), equal(None))
    call("files.write (str, nested)", lambda: sb.files.write(p + "/sub/dir/note.txt", "a note"), equal(None))
    call("files.read", lambda: sb.files.read(p + "/hello.txt"), equal(content))
    call("files.read (nested)", lambda: sb.files.read(p + "/sub/dir/note.txt"), equal(b"a note"))

    def listing():
        return sorted((e.name, e.type, e.size) for e in sb.files.list(p))
    call("files.list", listing, equal([("hello.txt", "file", len(content)), ("sub", "directory", listing_size(a, p))]))
    call("files.exists (file)", lambda: sb.files.exists(p + "/hello.txt"), equal(True))
    call("files.exists (directory)", lambda: sb.files.exists(p + "/sub"), equal(True))
    call("files.exists (missing)", lambda: sb.files.exists(p + "/missing.txt"), equal(False))
    call("files.delete (file)", lambda: sb.files.delete(p + "/hello.txt"), equal(None))
    call("files.exists (after delete)", lambda: sb.files.exists(p + "/hello.txt"), equal(False))

    def delete_nonempty():
        try:
            sb.files.delete(p + "/sub")
        except Exception as e:
            return getattr(e, "status_code", None)
        return "no error"
    call("files.delete (non-empty, not recursive, 409)", delete_nonempty, equal(409))
    call("files.delete (recursive)", lambda: sb.files.delete(p + "/sub", recursive=True), equal(None))
    call("files.list (after deletes)", lambda: [e.name for e in sb.files.list(p)], equal([]))

    # gRPC ProcessService (Execute): needs SANDBOXD_GRPC_ADDR.
    def run():
        r = sb.commands.run("echo hi; echo err >&2; exit 3", timeout=30)
        return (r.stdout, r.stderr, r.exit_code)
    call("commands.run", run, equal(("hi\n", "err\n", 3)))
    call("commands.run (reads what files.write wrote)",
         lambda: (sb.files.write(p + "/cat.txt", "via the command"), sb.commands.run("cat " + p + "/cat.txt").stdout)[1],
         equal("via the command"))

    # What the SDK's own limits do, measured (docs/sandboxd-rest.md, "The
    # SDK run"): its channel keeps grpcio's 4 MiB receive limit, so 3 MiB
    # of stdout arrives whole and 5 MiB fails on the SDK's side with
    # RESOURCE_EXHAUSTED although the daemon sent it all; the connection
    # stays usable.
    call("commands.run (3 MiB of stdout, whole)",
         lambda: len(sb.commands.run("head -c 3145728 /dev/zero | tr '\\0' x").stdout), equal(3 << 20))

    def five_mib():
        try:
            r = sb.commands.run("head -c 5242880 /dev/zero | tr '\\0' x")
        except RuntimeError as e:
            return "RESOURCE_EXHAUSTED" if "RESOURCE_EXHAUSTED" in str(e) else str(e)
        return "no error: %d bytes" % len(r.stdout)
    call("commands.run (5 MiB of stdout over the SDK's 4 MiB receive limit, RESOURCE_EXHAUSTED)", five_mib, equal("RESOURCE_EXHAUSTED"))
    call("commands.run (after the 5 MiB refusal)", lambda: sb.commands.run("echo still here").stdout, equal("still here\n"))

    # The SDK's timeout is the call's gRPC deadline: the SDK raises
    # DEADLINE_EXCEEDED and the daemon kills the process group at that
    # moment (nothing of it is left).
    # Both sleeps (a background child and the leader) carry a marker of
    # this run in their arguments, so /proc shows whether either is left.
    marker = ".9%07d" % os.getpid()

    def deadline():
        t0 = time.monotonic()
        try:
            sb.commands.run("sleep 30%s & sleep 31%s" % (marker, marker), timeout=1)
        except RuntimeError as e:
            if "DEADLINE_EXCEEDED" not in str(e):
                return "raised %s" % e
        else:
            return "no error"
        took = time.monotonic() - t0
        left = wait_gone(marker, 10)
        return "DEADLINE_EXCEEDED" if took < 10 and not left else "after %.1fs, left: %s" % (took, left)
    call("commands.run (timeout=1 on sleep 31, DEADLINE_EXCEEDED, the group killed)", deadline, equal("DEADLINE_EXCEEDED"))

    sb.connector.close()
    passed = sum(results)
    print("%d of %d calls succeeded" % (passed, len(results)))
    return 0 if all(results) else 1


def procs_named(marker):
    """The pids whose command line contains marker (from /proc)."""
    pids = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % d, "rb") as f:
                if marker.encode() in f.read():
                    pids.append(int(d))
        except OSError:
            pass
    return pids


def wait_gone(marker, bound):
    """Polls /proc until no process carries marker, for at most bound
    seconds; returns the pids still there."""
    end = time.monotonic() + bound
    while True:
        left = procs_named(marker)
        if not left or time.monotonic() > end:
            return left
        time.sleep(0.05)


def listing_size(a, p):
    """A directory's size as the server's file system reports it (st_size),
    read through the REST API itself would be circular: the harness is told
    the base dir by SDK_HARNESS_BASE_DIR."""
    base = os.environ.get("SDK_HARNESS_BASE_DIR")
    if not base:
        return None
    return os.lstat(os.path.join(base, p, "sub")).st_size


if __name__ == "__main__":
    sys.exit(main())
