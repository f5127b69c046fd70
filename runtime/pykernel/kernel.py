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
FRAME_MAX = 2 * MAX_EVENT  # the daemon's frame bound (contextFrameMax)
ERROR_VALUE_MAX = 64 << 10  # an error's value, bytes encoded
ERROR_LINE_MAX = 16 << 10  # one traceback line
ERROR_TB_MAX = 256 << 10  # the whole traceback
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


# A frame is atomic: SIGINT is blocked while one is read or written, and
# one that still arrives (delivered to another thread) is held by the
# handler until the frame is whole (_in_frame, _pending); a short write is
# continued. A frame cut by a KeyboardInterrupt would desync the framing.
_in_frame = False
_pending = False
_SIGINT = {signal.SIGINT}


class _Atomic:
    def __enter__(self):
        global _in_frame
        self.old = signal.pthread_sigmask(signal.SIG_BLOCK, _SIGINT)
        _in_frame = True

    def __exit__(self, *exc):
        global _in_frame, _pending
        _in_frame = False
        signal.pthread_sigmask(signal.SIG_SETMASK, self.old)
        if _pending and exc[0] is None:
            _pending = False
            if _running:
                raise KeyboardInterrupt
        return False


def _read_frame():
    with _Atomic():
        head = _read_exact(4)
        if head is None:
            return None
        (n,) = struct.unpack(">I", head)
        body = _read_exact(n)
    return None if body is None else json.loads(body)


def _jlen(v):
    """The size of v in a frame (UTF-8 JSON, NaN refused)."""
    return len(json.dumps(v, default=repr, ensure_ascii=False, allow_nan=False).encode("utf-8", "replace"))


_child = False  # this process is a fork of the interpreter (see _in_child)


def _send(obj):
    if _child:
        return
    # Flush the code's own buffers first: the daemon orders the bytes it
    # finds in the pipes at this moment before the event.
    for f in (sys.stdout, sys.stderr):
        try:
            f.flush()
        except Exception:
            pass
    try:
        data = json.dumps(obj, default=repr, ensure_ascii=False, allow_nan=False).encode("utf-8", "replace")
    except (ValueError, TypeError, RecursionError) as e:
        data = json.dumps({"type": "stderr_note", "text": "a %s event was left out: not valid JSON (%s)" % (obj.get("type"), e)}).encode()
    if len(data) > FRAME_MAX:  # the last guard: no event ever exceeds the frame bound
        data = json.dumps({"type": "stderr_note", "text": "a %s event of %d bytes was left out: above the frame bound of %d" % (obj.get("type"), len(data), FRAME_MAX)}).encode()
    frame = memoryview(struct.pack(">I", len(data)) + data)
    with _Atomic():
        while frame:
            frame = frame[os.write(EV_FD, frame):]


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


def _cut(s, limit):
    """s cut to at most limit bytes encoded, marked when cut."""
    n = _jlen(s)
    if n <= limit:
        return s
    k = len(s)
    while k > 0:
        m = _jlen(s[:k])
        if m <= limit - 100:
            break
        k = min(k - 1, k * (limit - 100) // m)
    return s[:max(k, 0)] + "… [truncated: %d bytes encoded in all]" % n


def _name(k):
    """A MIME key as named in "omitted": at most 256 characters."""
    k = str(k)
    return k if len(k) <= 256 else k[:256] + "…"


def _bound(data):
    """Keep the bundle under MAX_EVENT bytes, keys counted: the largest
    entries other than text/plain are left out (named in "omitted" with
    their sizes, a name cut at 256 characters), an entry that is no valid
    JSON (NaN, Infinity) is left out whatever its size (its size -1, and a
    stderr note says why), and text/plain is cut if it alone is too large."""
    omitted = {}
    sizes = {}
    for k, v in list(data.items()):
        if not isinstance(k, str):
            del data[k]
            k = str(k)
            data[k] = v
        try:
            sizes[k] = _jlen(k) + _jlen(v) + 2
        except (ValueError, TypeError, RecursionError) as e:
            del data[k]
            omitted[_name(k)] = -1
            _send({"type": "stderr_note", "text": "%s left out of the bundle: not valid JSON (%s)" % (_name(k), e)})
    budget = MAX_EVENT - 4096
    while sum(sizes.values()) > budget and len(sizes) > 1:
        k = max((k for k in sizes if k != "text/plain"), key=lambda k: sizes[k])
        omitted[_name(k)] = sizes.pop(k)
        del data[k]
        budget = MAX_EVENT - 4096 - _jlen(omitted)
    if sizes.get("text/plain", 0) > budget:
        omitted["text/plain"] = sizes["text/plain"]
        data["text/plain"] = _cut(data["text/plain"], budget // 2)
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
    global _pending
    if _in_frame:  # held until the frame is whole
        _pending = True
        return
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
    """The error event of e, bounded: its value at ERROR_VALUE_MAX bytes, each
    traceback line at ERROR_LINE_MAX, the traceback at ERROR_TB_MAX (its
    last lines kept); what is cut says so."""
    try:
        value = str(e)
    except Exception as x:
        value = "<str failed: %s>" % type(x).__name__
    tb = traceback.format_exception(type(e), e, e.__traceback__)
    # drop this program's own frames: the traceback starts at the code
    lines = [_cut(l, ERROR_LINE_MAX) for l in tb if 'File "<string>"' not in l]
    total, keep = 0, []
    for l in reversed(lines):
        total += _jlen(l)
        if total > ERROR_TB_MAX:
            keep.append("… %d traceback lines left out (truncated)\n" % (len(lines) - len(keep)))
            break
        keep.append(l)
    _send({"type": "error", "name": type(e).__name__, "value": _cut(value, ERROR_VALUE_MAX), "traceback": keep[::-1]})


def _in_child():
    """A fork of the interpreter (os.fork() in the code) must not speak for
    it: its copies of fds 3 and 4 are closed, its events dropped, and it
    exits when its code returns to the kernel (its fd 1 and 2 stay)."""
    global _child
    _child = True
    for fd in (REQ_FD, EV_FD):
        try:
            os.close(fd)
        except OSError:
            pass


os.register_at_fork(after_in_child=_in_child)


def _child_exit(code):
    for f in (sys.stdout, sys.stderr):
        try:
            f.flush()
        except Exception:
            pass
    os._exit(code)


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
        if _child:
            _child_exit(1)
        status = "interrupted"
        _error(e)
    except SystemExit as e:
        if _child:
            _child_exit(e.code if isinstance(e.code, int) else (0 if e.code is None else 1))
        status = "error"
        _send({"type": "error", "name": "SystemExit", "value": str(e.code),
               "traceback": ["SystemExit is not an exit in a code context: the interpreter keeps running\n"]})
    except BaseException as e:
        if _child:
            traceback.print_exc()
            _child_exit(1)
        status = "error"
        _error(e)
    if _child:
        _child_exit(0)
    try:
        _figures()
    except BaseException as e:
        _error(e)
    _send({"type": "done", "status": status})
