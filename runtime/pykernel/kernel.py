# The interpreter side of a code context (docs/contexts.md), embedded in the
# daemon's binary and run as `python3 -u -c <this file>`. Standard library
# only. It reads requests from fd 3 and writes events to fd 4, each a frame:
# a 4-byte big-endian length, then that many bytes of UTF-8 JSON. The user
# code's fd 1 and 2 are pipes the daemon reads itself, so stdout and stderr
# (of subprocesses and C extensions too) never pass through this program.
import ast
import base64
import builtins
import json
import os
import signal
import struct
import sys
import time
import traceback

REQ_FD, EV_FD = 3, 4
MAX_EVENT = int(os.environ.pop("SANDBOX_CTX_MAX_EVENT", "524288"))
_mem = os.environ.pop("SANDBOX_CTX_MEMORY", "")
if _mem:
    import resource
    resource.setrlimit(resource.RLIMIT_AS, (int(_mem), int(_mem)))

_req = os.fdopen(REQ_FD, "rb", buffering=0)
_ev = os.fdopen(EV_FD, "wb", buffering=0)
for _fd in (REQ_FD, EV_FD):
    os.set_inheritable(_fd, False)  # subprocesses of the code never hold them


def _read_exact(n):
    buf = b""
    while len(buf) < n:
        chunk = _req.read(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf


def _read_frame():
    head = _read_exact(4)
    if head is None:
        return None
    (n,) = struct.unpack(">I", head)
    body = _read_exact(n)
    return None if body is None else json.loads(body)


def _send(obj):
    # Flush the code's own buffers first: the daemon orders the bytes it
    # finds in the pipes at this moment before the event.
    for f in (sys.stdout, sys.stderr):
        try:
            f.flush()
        except Exception:
            pass
    data = json.dumps(obj, default=repr).encode("utf-8", "replace")
    _ev.write(struct.pack(">I", len(data)) + data)


MIMES = [
    ("text/html", "_repr_html_"),
    ("text/markdown", "_repr_markdown_"),
    ("text/latex", "_repr_latex_"),
    ("image/svg+xml", "_repr_svg_"),
    ("image/png", "_repr_png_"),
    ("image/jpeg", "_repr_jpeg_"),
    ("application/json", "_repr_json_"),
]


def _norm(mime, v):
    if isinstance(v, tuple) and len(v) == 2:  # (data, metadata)
        v = v[0]
    if v is None:
        return None
    if mime.startswith("image/") and mime != "image/svg+xml":
        if isinstance(v, (bytes, bytearray)):
            return base64.b64encode(bytes(v)).decode("ascii")
        return str(v)
    if mime == "application/json" or mime.endswith("+json"):
        return v
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    return str(v)


def bundle(obj):
    """The MIME bundle of obj, by IPython's display protocol (duck typing)."""
    data = {}
    meth = getattr(obj, "_repr_mimebundle_", None)
    if callable(meth) and not isinstance(obj, type):
        try:
            got = meth(include=None, exclude=None)
            if isinstance(got, tuple):
                got = got[0]
            for k, v in (got or {}).items():
                v = _norm(k, v)
                if v is not None:
                    data[k] = v
        except Exception:
            pass
    for mime, name in MIMES:
        if mime in data:
            continue
        meth = getattr(obj, name, None)
        if callable(meth) and not isinstance(obj, type):
            try:
                v = _norm(mime, meth())
            except Exception:
                v = None
            if v is not None:
                data[mime] = v
    try:
        data["text/plain"] = repr(obj)
    except Exception as e:
        data["text/plain"] = "<repr failed: %s: %s>" % (type(e).__name__, e)
    return _bound(data)


def _bound(data):
    """Keep the bundle under MAX_EVENT bytes: the largest entries other than
    text/plain are left out (named in "omitted" with their sizes), and
    text/plain is cut if it alone is too large."""
    omitted = {}
    sizes = {k: len(json.dumps(v, default=repr)) for k, v in data.items()}
    budget = MAX_EVENT - 1024
    while sum(sizes.values()) > budget and len(sizes) > 1:
        k = max((k for k in sizes if k != "text/plain"), key=lambda k: sizes[k])
        omitted[k] = sizes.pop(k)
        del data[k]
    if sizes.get("text/plain", 0) > budget:
        omitted["text/plain"] = sizes["text/plain"]
        data["text/plain"] = data["text/plain"][: budget // 2] + "…"
    return data, omitted


def _emit(kind, obj):
    data, omitted = bundle(obj)
    ev = {"type": kind, "data": data}
    if omitted:
        ev["omitted"] = omitted
    _send(ev)


def display(*objs, **_kw):
    """IPython's display(): each object as a display event."""
    for o in objs:
        _emit("display", o)


class _Image:
    def __init__(self, png):
        self.png = png

    def _repr_png_(self):
        return self.png

    def __repr__(self):
        return "<Figure PNG, %d bytes>" % len(self.png)


def _figures():
    """Every open matplotlib figure as a PNG display, then closed. Only when
    the code imported pyplot itself (MPLBACKEND=Agg is in its environment)."""
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is None:
        return
    import io
    for num in plt.get_fignums():
        fig = plt.figure(num)
        buf = io.BytesIO()
        try:
            fig.savefig(buf, format="png")
        except Exception as e:
            _send({"type": "stderr_note", "text": "figure %s: %s" % (num, e)})
            continue
        img = _Image(buf.getvalue())
        data, omitted = _bound({"image/png": _norm("image/png", img.png), "text/plain": repr(img)})
        ev = {"type": "display", "data": data}
        if omitted:
            ev["omitted"] = omitted
        _send(ev)
    plt.close("all")


def _no_input(prompt=""):
    raise RuntimeError(
        "input() is not available in a code context: the code has no terminal "
        "and stdin is /dev/null; pass data in the code or in a file instead"
    )


_running = False


def _on_sigint(signum, frame):
    if _running:
        raise KeyboardInterrupt
    # between executions an interrupt has nothing to interrupt


ns = {"__name__": "__main__", "__builtins__": builtins}
builtins.display = display
builtins.input = _no_input
signal.signal(signal.SIGINT, _on_sigint)
import warnings
warnings.filterwarnings("ignore", message=".*non-interactive.*")


def _run(code):
    global _running
    tree = ast.parse(code, "<context>", "exec")
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(tree.body.pop().value)
    body = compile(tree, "<context>", "exec")
    lastc = compile(last, "<context>", "eval") if last is not None else None
    _running = True
    try:
        exec(body, ns)
        value = eval(lastc, ns) if lastc is not None else None
    finally:
        _running = False
    return value


def _error(e):
    tb = traceback.format_exception(type(e), e, e.__traceback__)
    # drop this program's own frames: the traceback starts at the code
    lines = [l for l in tb if 'File "<string>"' not in l]
    _send({"type": "error", "name": type(e).__name__, "value": str(e), "traceback": lines})


_send({"type": "ready", "pid": os.getpid(), "python": sys.version.split()[0]})
while True:
    try:
        req = _read_frame()
    except KeyboardInterrupt:
        continue
    if req is None:
        break
    status = "ok"
    try:
        value = _run(req.get("code", ""))
        if value is not None:
            ns["_"] = value
            _emit("result", value)
    except KeyboardInterrupt as e:
        status = "interrupted"
        _error(e)
    except SystemExit as e:
        status = "error"
        _send({"type": "error", "name": "SystemExit", "value": str(e.code),
               "traceback": ["SystemExit is not an exit in a code context: the interpreter keeps running\n"]})
    except BaseException as e:
        status = "error"
        _error(e)
    try:
        _figures()
    except BaseException as e:
        _error(e)
    _send({"type": "done", "status": status})
