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
  * its vendored ProcessService stubs need protobuf >= 7; they are generated
    again here, from upstream's own process.proto (--proto), with the
    protoc and grpc_python_plugin of this machine (Debian's), for its
    protobuf/grpcio.
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
import traceback


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

    regenerate_stubs(a.sdk, a.proto)
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
    call("files.delete (non-empty, not recursive: 409)", delete_nonempty, equal(409))
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

    sb.connector.close()
    passed = sum(results)
    print("%d of %d calls succeeded" % (passed, len(results)))
    return 0 if all(results) else 1


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
