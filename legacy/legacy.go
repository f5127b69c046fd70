// Package legacy is the legacy API (protocol.md §5): what the Python runtime
// image served, answer for answer: GET /, POST /execute, POST /upload and GET
// /download, /list, /exists. It changes when that contract (the recorded
// corpus) does. The handlers are mounted on the api server as extra routes
// (Handlers.Routes, api.Options.Routes), behind its middleware; Python's own
// behaviours come from package pycompat, commands from runtime.
//
// The recorded corpus in testdata/legacy pins the details; the replay test
// in legacy_test.go checks every case. Where this file follows a Python
// quirk on purpose, the comment says which.
//
// Decisions where the corpus leaves a choice:
//   - A non-string "command" is coerced like pydantic 1 did (5 → "5",
//     true → "True", 1.5 → "1.5"), as recorded, rather than refused.
//   - Bodies are decoded like Python's json.loads on bytes: a UTF-8 BOM and
//     UTF-16/32 bodies are accepted, as recorded.
//   - /download ignores Range and conditional headers (200 with the whole
//     file), as recorded.
//   - /upload has no size limit of its own (the disk is the limit); the part
//     is streamed to a temporary file in the base dir and moved into place.
package legacy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"mime"
	"mime/multipart"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/sandbox-runtime/sandbox-runtime/fsroot"
	"github.com/sandbox-runtime/sandbox-runtime/httpx"
	sysErrno "github.com/sandbox-runtime/sandbox-runtime/internal/errno"
	"github.com/sandbox-runtime/sandbox-runtime/pycompat"
	"github.com/sandbox-runtime/sandbox-runtime/runtime"
	"github.com/sandbox-runtime/sandbox-runtime/shlex"
)

// legacyParseError is FastAPI's answer to a body it could not decode.
const legacyParseError = "There was an error parsing the body"

func (s *Handlers) legacyRoot(w http.ResponseWriter, r *http.Request) {
	// A struct, not a map: the keys in the order the Python runtime sent them.
	writeJSON(w, http.StatusOK, struct {
		Status  string `json:"status"`
		Message string `json:"message"`
	}{"ok", "Sandbox Runtime is active."})
}

// legacyDetail writes a framework-style {"detail": …} error.
func legacyDetail(w http.ResponseWriter, status int, detail any) {
	writeJSON(w, status, map[string]any{"detail": detail})
}

// legacyMessage writes a handler-style {"message": …} answer.
func legacyMessage(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"message": msg})
}

// pydanticError is one item of a pydantic 1 validation error list.
type pydanticError struct {
	Loc  []any  `json:"loc"`
	Msg  string `json:"msg"`
	Type string `json:"type"`
	Ctx  any    `json:"ctx,omitempty"`
}

// legacyFailure is a refusal of a legacy request before anything ran.
type legacyFailure struct {
	status int
	detail any
}

func validationFailure(msg, typ string, loc ...any) *legacyFailure {
	return &legacyFailure{status: http.StatusUnprocessableEntity, detail: []pydanticError{{Loc: loc, Msg: msg, Type: typ}}}
}

// pydanticJSONError is the pydantic 1 item FastAPI made of a JSONDecodeError.
func pydanticJSONError(e *pycompat.JSONError, doc []rune) pydanticError {
	lineno, colno := e.LineCol(doc)
	type ctx struct {
		Msg    string `json:"msg"`
		Doc    string `json:"doc"`
		Pos    int    `json:"pos"`
		Lineno int    `json:"lineno"`
		Colno  int    `json:"colno"`
	}
	return pydanticError{
		Loc:  []any{"body", e.Pos},
		Msg:  fmt.Sprintf("%s: line %d column %d (char %d)", e.Msg, lineno, colno, e.Pos),
		Type: "value_error.jsondecode",
		Ctx:  ctx{Msg: e.Msg, Doc: string(doc), Pos: e.Pos, Lineno: lineno, Colno: colno},
	}
}

// ---- POST /execute -------------------------------------------------------

// legacyExecResponse is the body of every answer of /execute once the
// request is valid (keys in Python's order).
type legacyExecResponse struct {
	Stdout   string `json:"stdout"`
	Stderr   string `json:"stderr"`
	ExitCode int    `json:"exit_code"`
}

// execFailed is the answer for a command that could not be run.
func execFailed(reason string) legacyExecResponse {
	return legacyExecResponse{Stderr: "Failed to execute command: " + reason, ExitCode: 1}
}

// legacyExecute is POST /execute. Once the body is valid the answer is
// always 200: the headers go out with the answer when it comes within
// answerHeaderHold, else at that moment, then a space is written every
// HeartbeatInterval while the command runs, then the JSON follows (leading
// whitespace is valid JSON). Legacy clients retry on 5xx and on a read
// timeout before the headers, which would run the command twice.
//
// Its steps: readExecute (the body, parsed and split in a decode turn),
// runExecution (the execution place, then the run) in a goroutine of its
// own, and answerExecution (heartbeats, then the answer).
//
// At most MaxExecutions calls run at once (runtime's ClassExecution, the one
// count of executions): a call beyond that gets the same 200 and heartbeats
// while it waits for a place, and runs when one frees; its timeout starts
// then. A call whose client leaves while it waits never runs. The answer is
// encoded as it is written (writeLegacyExecAnswer).
func (s *Handlers) legacyExecute(w http.ResponseWriter, r *http.Request) {
	cmd, ok := s.readExecute(w, r)
	if !ok {
		return
	}
	timeout, seconds := s.legacyTimeout(r)
	done := make(chan execOutcome, 1) // buffered: the runner never waits for a gone client
	go s.runExecution(r.Context(), cmd, timeout, done)
	s.answerExecution(w, r, seconds, done)
}

// pendingExec is a valid /execute command waiting for its place: its argv,
// or, for a command over runtime.LargeBody, the command alone (argv nil),
// split again once it has a place.
type pendingExec struct {
	argv    []string
	command string
}

// execOutcome is what runExecution hands the answer.
type execOutcome struct {
	res  runtime.ExecResult // holds the execution place until released
	argv []string
	err  error
}

// readExecute reads, parses and splits the body of /execute; false means it
// answered (a refusal, or a command that does not split) or the client
// left. A large body is parsed and split in its decode turn
// (Manager.EnterDecode).
func (s *Handlers) readExecute(w http.ResponseWriter, r *http.Request) (pendingExec, bool) {
	body, err := readLegacyBody(w, r)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			legacyDetail(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("Request body is over %d bytes", httpx.MaxJSONBody))
			return pendingExec{}, false
		}
		legacyDetail(w, http.StatusBadRequest, legacyParseError)
		return pendingExec{}, false
	}
	leave, err := s.m.EnterDecode(r.Context(), len(body))
	if err != nil {
		return pendingExec{}, false // the client left
	}
	command, fail := parseExecuteBody(r.Header.Get("Content-Type"), body)
	body = nil
	if fail != nil {
		leave() // before the answer: a slow reader must not hold the turn
		legacyDetail(w, fail.status, fail.detail)
		return pendingExec{}, false
	}
	argv, failed := splitCommand(command)
	if failed != "" {
		leave()
		writeJSON(w, http.StatusOK, execFailed(failed))
		return pendingExec{}, false
	}
	defer leave()
	if len(command) > runtime.LargeBody {
		// The words of a large command cost many times its size (16 bytes a
		// word and more): a call that waits for an execution place keeps the
		// command only (a copy of its own, holding nothing of the body or
		// the parser), and splits it again once it has a place.
		return pendingExec{command: strings.Clone(command)}, true
	}
	return pendingExec{argv: argv}, true
}

// runExecution waits for the execution place and runs the command in it,
// and sends the outcome to done. A large command (argv nil) waits for its
// place with the command string only, then is split in a decode turn, so
// that no call waits holding its words.
func (s *Handlers) runExecution(ctx context.Context, cmd pendingExec, timeout time.Duration, done chan<- execOutcome) {
	defer func() {
		if p := recover(); p != nil {
			s.log.Error("legacy execute panic", zap.Any("panic", p), zap.Stack("stack"))
			done <- execOutcome{err: fmt.Errorf("internal error: %v", p)}
		}
	}()
	if cmd.argv != nil {
		res, err := s.m.Execute(ctx, cmd.argv, timeout)
		done <- execOutcome{res: res, argv: cmd.argv, err: err}
		return
	}
	slot, err := s.m.AdmitExecution(ctx)
	if err != nil {
		done <- execOutcome{err: err}
		return
	}
	leave, err := s.m.EnterDecode(ctx, len(cmd.command))
	if err != nil {
		slot.Release()
		done <- execOutcome{err: ctx.Err()}
		return
	}
	argv, _ := splitCommand(cmd.command) // it split once already
	cmd.command = ""
	leave()
	res, err := s.m.ExecuteIn(slot, argv, timeout)
	done <- execOutcome{res: res, argv: argv, err: err}
}

// answerHeaderHold is how long /execute holds its 200's headers for the
// outcome: an answer that comes within it goes out with them in one write
// (with Content-Length when it is short), one that does not is preceded by
// the headers at this moment, far inside the routers' 30 s and any
// client's read timeout (protocol.md §1).
const answerHeaderHold = 250 * time.Millisecond

// answerExecution sends the 200, at the latest after answerHeaderHold, and
// a heartbeat space every HeartbeatInterval until the outcome comes, then
// the answer.
func (s *Handlers) answerExecution(w http.ResponseWriter, r *http.Request, seconds float64, done <-chan execOutcome) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	hold := time.NewTimer(answerHeaderHold)
	defer hold.Stop()
	heartbeat := time.NewTicker(s.opts.HeartbeatInterval)
	defer heartbeat.Stop()
	for {
		select {
		case <-hold.C:
			// The headers: the command is still running. Every write has a
			// deadline, these too (a client that never reads is cut).
			rc.SetWriteDeadline(time.Now().Add(answerWriteTimeout))
			rc.Flush()
		case o := <-done:
			if o.err == nil {
				httpx.NoteCommand(w, httpx.CommandNote{Argv0: o.argv[0], Pid: o.res.Pid, ExitCode: o.res.ExitCode,
					TimedOut: o.res.TimedOut, Terminated: o.res.Terminated})
			}
			// The answer is encoded as it is written; the execution place is
			// held until it is out (or the client is cut for not reading).
			dw := newDeadlineWriter(w, rc)
			err := writeLegacyExecAnswer(dw, o.argv, seconds, &o.res, o.err)
			o.res.Release()
			if err == nil {
				dw.armTail() // cleared once the response is out (ConnState: idle)
			}
			return
		case <-heartbeat.C:
			rc.SetWriteDeadline(time.Now().Add(answerWriteTimeout))
			w.Write([]byte(" "))
			rc.Flush()
		case <-r.Context().Done():
			// The command goes on (a disconnect never cancels one that has
			// started; a call still waiting for a place never runs); its
			// result is dropped and its place given back.
			go func() {
				o := <-done
				o.res.Release()
			}()
			return
		}
	}
}

// splitCommand splits a legacy command as shlex.split would, or returns
// the message of Popen's failure for it.
func splitCommand(command string) (argv []string, failed string) {
	argv, err := shlex.Split(command)
	switch {
	case err != nil:
		return nil, err.Error()
	case len(argv) == 0:
		// CPython 3.11's error for Popen([]); 3.14 words it differently.
		return nil, "list index out of range"
	}
	for _, a := range argv {
		if strings.IndexByte(a, 0) >= 0 {
			return nil, "embedded null byte"
		}
	}
	return argv, ""
}

// readLegacyBody reads a body of at most httpx.MaxJSONBody bytes, growing its
// buffer only as bytes arrive (readBody): never from the Content-Length.
func readLegacyBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	return httpx.ReadBody(w, r, httpx.MaxJSONBody)
}

// legacyTimeout is SANDBOX_EXEC_TIMEOUT_SECONDS, or X-Sandbox-Timeout when
// that is a smaller positive number. seconds is the value as printed in the
// timeout message.
func (s *Handlers) legacyTimeout(r *http.Request) (time.Duration, float64) {
	timeout := s.m.Config().MaxTimeout
	seconds := timeout.Seconds()
	if h := strings.TrimSpace(r.Header.Get("X-Sandbox-Timeout")); h != "" {
		v, err := strconv.ParseFloat(h, 64)
		if err == nil && v > 0 && !math.IsInf(v, 0) && v < seconds {
			d := time.Duration(v * float64(time.Second))
			if d <= 0 {
				d = 1 // not zero: Execute reads zero as "the maximum"
			}
			return d, v
		}
	}
	return timeout, seconds
}

// parseExecuteBody does what FastAPI 0.92 with pydantic 1 did with the body
// of POST /execute, and returns the command or the refusal.
func parseExecuteBody(contentType string, body []byte) (string, *legacyFailure) {
	if len(body) == 0 {
		return "", validationFailure("field required", "value_error.missing", "body")
	}
	if !legacyIsJSON(contentType) {
		// The bytes themselves are validated as the model: not a dict.
		return "", validationFailure("value is not a valid dict", "type_error.dict", "body")
	}
	doc, ok := pycompat.DecodeJSONBytes(body)
	if !ok {
		return "", &legacyFailure{status: http.StatusBadRequest, detail: legacyParseError}
	}
	v, err := pycompat.ParseJSON(doc)
	if err != nil {
		var je *pycompat.JSONError
		if errors.As(err, &je) {
			return "", &legacyFailure{status: http.StatusUnprocessableEntity, detail: []pydanticError{pydanticJSONError(je, doc)}}
		}
		return "", &legacyFailure{status: http.StatusBadRequest, detail: legacyParseError}
	}
	// The parser has already reduced a top-level object or array to its
	// last "command" (pyParser: the tree of a body is never built).
	switch v.Kind() {
	case 'z':
		return "", validationFailure("field required", "value_error.missing", "body")
	case 'o':
	case 'a':
		// pydantic 1 tries dict(value): a list of pairs is a dict.
		if v.NotDict() {
			return "", validationFailure("value is not a valid dict", "type_error.dict", "body")
		}
	default:
		return "", validationFailure("value is not a valid dict", "type_error.dict", "body")
	}
	cmd, has := v.Command() // duplicate keys: the last one wins
	if !has {
		return "", validationFailure("field required", "value_error.missing", "body", "command")
	}
	switch cmd.Kind() {
	case 's':
		return cmd.Text(), nil
	case 'z':
		return "", validationFailure("none is not an allowed value", "type_error.none.not_allowed", "body", "command")
	case 'b':
		if cmd.Bool() {
			return "True", nil
		}
		return "False", nil
	case 'i', 'f':
		return cmd.Str(), nil
	}
	return "", validationFailure("str type expected", "type_error.str", "body", "command")
}

// legacyIsJSON is FastAPI's test: no Content-Type, or application/json, or
// application/*+json (parameters ignored; a malformed type is text/plain).
func legacyIsJSON(contentType string) bool {
	if contentType == "" {
		return true
	}
	mt, _, _ := strings.Cut(contentType, ";")
	mt = strings.ToLower(strings.TrimSpace(mt))
	if strings.Count(mt, "/") != 1 {
		return false
	}
	main, sub, _ := strings.Cut(mt, "/")
	return main == "application" && (sub == "json" || strings.HasSuffix(sub, "+json"))
}

// ---- POST /upload --------------------------------------------------------

// legacyUpload is POST /upload: the multipart part "file" is written to the
// path its filename names, relative to the base dir. Like the Python server,
// the whole body is read before anything is decided (the last "file" part
// wins), but parts are streamed to a temporary file, never held in memory.
//
// Its steps: the media type, the base dir opened once (everything happens
// relative to it: the temporary file lives at its top, the target is
// reached through it), the parts (upload.readParts), then the target
// (upload.place).
func (s *Handlers) legacyUpload(w http.ResponseWriter, r *http.Request) {
	mt, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "multipart/form-data" {
		uploadMissing(w) // Starlette finds no form fields in other bodies
		return
	}
	if params["boundary"] == "" {
		legacyDetail(w, http.StatusBadRequest, legacyParseError)
		return
	}
	base := pycompat.RealBase(s.opts.BaseDir)
	root, err := os.OpenRoot(base)
	if err != nil {
		legacyMessage(w, http.StatusInternalServerError, "File upload failed: "+pycompat.OSErrorText(&os.PathError{Op: "open", Path: base, Err: errnoOrErr(err)}))
		return
	}
	defer root.Close()
	u := &upload{root: root, base: base}
	defer u.discard()
	if !u.readParts(w, multipart.NewReader(r.Body, params["boundary"])) {
		return
	}
	switch {
	case !u.seen:
		uploadMissing(w)
	case !u.isFile:
		f := validationFailure("Expected UploadFile, received: <class 'str'>", "value_error", "body", "file")
		legacyDetail(w, f.status, f.detail)
	default:
		u.place(w)
	}
}

// uploadMissing is the answer to an /upload without a "file" field.
func uploadMissing(w http.ResponseWriter) {
	f := validationFailure("field required", "value_error.missing", "body", "file")
	legacyDetail(w, f.status, f.detail)
}

// upload is an /upload in progress, relative to the base dir opened once.
type upload struct {
	root     *os.Root
	base     string // the base dir's real path, for messages
	tmp      string // the temporary file (relative to root) holding the last "file" part
	filename string // that part's filename: the target
	seen     bool   // a field named "file" was sent
	isFile   bool   // the last one was a file part (not a plain field)
}

// discard removes the temporary file, if any.
func (u *upload) discard() {
	if u.tmp != "" {
		u.root.Remove(u.tmp)
		u.tmp = ""
	}
}

// readParts reads every part of the body: a "file" part with a filename
// is streamed to a new temporary file (replacing an earlier one), any
// other part is read and dropped. false means it answered.
func (u *upload) readParts(w http.ResponseWriter, mr *multipart.Reader) bool {
	for {
		part, err := mr.NextRawPart()
		if err == io.EOF {
			return true
		}
		if err != nil {
			legacyDetail(w, http.StatusBadRequest, legacyParseError)
			return false
		}
		name, fname, hasName, hasFilename := pycompat.PartDisposition(part.Header.Get("Content-Disposition"))
		if !hasName {
			legacyDetail(w, http.StatusBadRequest, legacyParseError)
			return false
		}
		if name != "file" || !hasFilename {
			if _, err := io.Copy(io.Discard, part); err != nil {
				legacyDetail(w, http.StatusBadRequest, legacyParseError)
				return false
			}
			if name == "file" { // a plain field named file replaces any earlier file
				u.seen, u.isFile = true, false
			}
			continue
		}
		if !u.readFile(w, part) {
			return false
		}
		u.seen, u.isFile, u.filename = true, true, fname
	}
}

// readFile streams a file part to a new temporary file, which replaces
// the previous one. false means it answered.
func (u *upload) readFile(w http.ResponseWriter, part io.Reader) bool {
	u.discard()
	f, path, err := createUploadTemp(u.root)
	if err != nil {
		legacyMessage(w, http.StatusInternalServerError, "File upload failed: "+pycompat.OSErrorText(absPathError(err, u.base)))
		return false
	}
	u.tmp = path
	readErr, writeErr := fsroot.Copy(f, part)
	if cerr := f.Close(); writeErr == nil {
		writeErr = cerr
	}
	if readErr != nil {
		legacyDetail(w, http.StatusBadRequest, legacyParseError)
		return false
	}
	if writeErr != nil {
		legacyMessage(w, http.StatusInternalServerError, "File upload failed: "+pycompat.OSErrorText(writeErr))
		return false
	}
	return true
}

// place moves the upload to the path its filename names (parents
// created), and answers.
func (u *upload) place(w http.ResponseWriter) {
	full, err := pycompat.ResolveUnder(u.base, u.filename)
	if err != nil {
		legacyMessage(w, http.StatusForbidden, "Access denied")
		return
	}
	rel := pycompat.RelOf(u.base, full)
	if rel != "" { // the base dir itself exists; writing it fails below
		dir, _ := pycompat.Split(rel)
		if _, err := fsroot.MkdirAll(u.root, dir, 0o777); err != nil {
			legacyMessage(w, http.StatusInternalServerError, "File upload failed: "+pycompat.OSErrorText(absPathError(err, u.base)))
			return
		}
	}
	if err := placeUpload(u.root, u.tmp, rel, full); err != nil {
		legacyMessage(w, http.StatusInternalServerError, "File upload failed: "+pycompat.OSErrorText(err))
		return
	}
	u.tmp = "" // moved (or copied and removed)
	legacyMessage(w, http.StatusOK, "File '"+u.filename+"' uploaded successfully.")
}

// createUploadTemp creates an empty file at the top of root with mode 0666
// less the umask, the mode a file created by Python's open(…, "wb") gets.
func createUploadTemp(root *os.Root) (*os.File, string, error) {
	for {
		name := fsroot.UploadTempPrefix + uuid.NewString() + ".tmp"
		f, err := root.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o666)
		if errors.Is(err, os.ErrExist) {
			continue
		}
		return f, name, err
	}
}

// placeUpload moves the upload tmp to rel (both relative to root; full is
// rel's absolute path, for the error text) with the effect of Python's
// open(full, "wb").write(…): a new file is renamed into place, an existing
// one is truncated and rewritten in place (keeping its inode and mode; a
// directory fails with EISDIR). tmp is gone afterwards on success. An error
// is a *PathError naming full, as Python's OSError would.
func placeUpload(root *os.Root, tmp, rel, full string) error {
	target := pycompat.DotIfEmpty(rel)
	if _, err := root.Lstat(target); errors.Is(err, os.ErrNotExist) {
		err := root.Rename(tmp, target)
		if err == nil {
			return nil
		}
		if sysErrno.Of(err) != syscall.EXDEV || fsroot.IsEscape(err) {
			return &os.PathError{Op: "open", Path: full, Err: rootErrno(err)}
		}
	}
	// O_NONBLOCK: a FIFO without a reader fails (ENXIO) instead of hanging.
	dst, err := root.OpenFile(target, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|syscall.O_NONBLOCK, 0o666)
	if err != nil {
		return &os.PathError{Op: "open", Path: full, Err: rootErrno(err)}
	}
	src, err := root.OpenFile(tmp, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		dst.Close()
		return err
	}
	defer src.Close()
	_, werr := fsroot.Copy(dst, src)
	if cerr := dst.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		return werr
	}
	return root.Remove(tmp)
}

// absPathError makes the path of a *PathError from an os.Root operation
// (relative to the root) absolute, as the Python server's messages have it.
// os.Root's refusal of an escaping path (a swap under a race) reads as
// EXDEV, the errno openat2(RESOLVE_BENEATH) gives for it.
func absPathError(err error, base string) error {
	var pe *os.PathError
	if !errors.As(err, &pe) {
		return err
	}
	return &os.PathError{Op: pe.Op, Path: pycompat.Join(base, pe.Path), Err: rootErrno(err)}
}

// rootErrno is the errno of an os.Root error; its refusal of an escaping
// path (a swap under a race) reads as EXDEV, which openat2 with
// RESOLVE_BENEATH gives for it.
func rootErrno(err error) error {
	if fsroot.IsEscape(err) {
		return syscall.EXDEV
	}
	return errnoOrErr(err)
}

func errnoOrErr(err error) error {
	if e := sysErrno.Of(err); e != 0 {
		return e
	}
	return err
}

// ---- GET /download, /list, /exists ---------------------------------------

// pathRoute serves GET prefix… (/download/…, /list/…, /exists/…). The
// route is Raw (httpx.Route): the server hands it every path under prefix
// before ServeMux sees it, so `..`, `.` and `//` are never cleaned or
// redirected. The path after prefix is percent-decoded once (RawPath, so
// that both a%2Fb and a/b work), and invalid UTF-8 becomes U+FFFD as
// uvicorn did. The prefix without its slash (/list) is the empty path.
func pathRoute(prefix string, serve func(w http.ResponseWriter, p string)) httpx.Route {
	return httpx.Route{
		Pattern: prefix + "{path...}",
		Methods: map[string]http.HandlerFunc{"GET": func(w http.ResponseWriter, r *http.Request) {
			var p string
			if esc := r.URL.EscapedPath(); strings.HasPrefix(esc, prefix) {
				dec, err := url.PathUnescape(esc[len(prefix):])
				if err != nil {
					dec = esc[len(prefix):]
				}
				p = dec
			} else if strings.HasPrefix(r.URL.Path, prefix) {
				p = r.URL.Path[len(prefix):]
			}
			serve(w, pycompat.DecodeUTF8([]byte(p)))
		}},
		NoHead: true,
		Raw:    true,
		Refuse: Refuse,
	}
}

// legacyResolve resolves a legacy path and opens the base dir (the caller
// closes in.Root); false means it answered: 403 for a path outside (a NUL
// byte, which Python's realpath refuses with ValueError, is 403 too), 404
// with notFound when the base dir cannot be opened.
func (s *Handlers) legacyResolve(w http.ResponseWriter, p, notFound string) (pycompat.InBase, bool) {
	in, err := pycompat.ResolveInBase(s.opts.BaseDir, p)
	switch {
	case errors.Is(err, pycompat.ErrOutside), errors.Is(err, pycompat.ErrNULPath):
		legacyMessage(w, http.StatusForbidden, "Access denied")
		return in, false
	case err != nil:
		legacyMessage(w, http.StatusNotFound, notFound)
		return in, false
	}
	return in, true
}

// legacyDownloadPath answers like Starlette 0.26's FileResponse: the whole
// file (Range and conditional headers are ignored), named by the requested
// path in Content-Disposition.
func (s *Handlers) legacyDownloadPath(w http.ResponseWriter, p string) {
	in, ok := s.legacyResolve(w, p, "File not found")
	if !ok {
		return
	}
	defer in.Root.Close()
	// Anything but a regular file is 404, refused before it is opened; the
	// file is opened once, through the root, and answered from that
	// descriptor (fsroot.OpenReadable).
	f, fi, err := fsroot.OpenReadable(in.Root, in.Rel, false)
	if err != nil {
		if errors.Is(err, os.ErrPermission) {
			legacyMessage(w, http.StatusForbidden, "Access denied")
			return
		}
		legacyMessage(w, http.StatusNotFound, "File not found")
		return
	}
	defer f.Close()
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Content-Disposition", contentDisposition(p))
	h.Set("Content-Length", strconv.FormatInt(fi.Size(), 10))
	h.Set("Last-Modified", fi.ModTime().UTC().Format(http.TimeFormat))
	w.WriteHeader(http.StatusOK)
	if _, err := io.CopyN(w, f, fi.Size()); err != nil {
		s.log.Debug("legacy download cut short", zap.Error(err))
	}
}

// contentDisposition is Starlette's: filename="…" when urllib's quote
// leaves the name unchanged, else the RFC 5987 form filename*=utf-8 with
// two single quotes, then the quoted name.
func contentDisposition(name string) string {
	q := pycompat.Quote(name)
	if q == name {
		return `attachment; filename="` + name + `"`
	}
	return "attachment; filename*=utf-8''" + q
}

// legacyEntry is one element of a /list answer (keys in Python's order).
type legacyEntry struct {
	Name    string  `json:"name"`
	Size    int64   `json:"size"`
	Type    string  `json:"type"`
	ModTime pyFloat `json:"mod_time"`
	// EscapedName: only for a name that is not valid UTF-8 (Name then
	// shows U+FFFD): its exact bytes percent-encoded, for /download/….
	EscapedName string `json:"escaped_name,omitempty"`
}

// pyFloat is a float64 that encodes like Python's json (1700000200.0 keeps
// its ".0").
type pyFloat float64

func (f pyFloat) MarshalJSON() ([]byte, error) { return []byte(pycompat.Float(float64(f))), nil }

// legacyListPath lists a directory with each entry stat'ed through
// symlinks. Entries that cannot be stat'ed (dangling or looping links) are
// left out instead of failing the listing (protocol.md §5), and so are
// symlinks that resolve outside the base dir: the listing shows only what
// /download and /exists can reach (the Python server showed the outside
// target's size and mtime).
func (s *Handlers) legacyListPath(w http.ResponseWriter, p string) {
	in, ok := s.legacyResolve(w, p, "Path is not a directory")
	if !ok {
		return
	}
	defer in.Root.Close()
	// The directory is opened once: names and plain entries come from that
	// descriptor, whatever is renamed meanwhile.
	dir, closeDir, err := fsroot.Sub(in.Root, in.Rel)
	if err != nil {
		legacyMessage(w, http.StatusNotFound, "Path is not a directory")
		return
	}
	defer closeDir()
	// Entries are stat'ed and written as the names are read, in directory
	// order (the Python server's os.listdir order too): memory does not
	// grow with the directory. An error after the first entry can only
	// cut the answer short.
	f, err := dir.Open(".")
	if err != nil {
		legacyMessage(w, http.StatusInternalServerError, "List files failed: "+pycompat.OSErrorText(errnoOrErr(err)))
		return
	}
	defer f.Close()
	var bw *bufio.Writer
	n := 0
	err = fsroot.EachName(f, func(name string) error {
		fi, err := dir.Lstat(name)
		if err == nil && fi.Mode()&os.ModeSymlink != 0 {
			fi, err = s.statLink(in, name)
		}
		if err != nil {
			return nil
		}
		typ := "file"
		if fi.IsDir() {
			typ = "directory"
		}
		mt := fi.ModTime()
		// os.stat's st_mtime: sec + nsec*1e-9 in double precision.
		e := legacyEntry{Name: name, Size: fi.Size(), Type: typ,
			ModTime: pyFloat(float64(mt.Unix()) + float64(mt.Nanosecond())*1e-9)}
		if !utf8.ValidString(name) {
			e.EscapedName = pycompat.Quote(name)
		}
		if bw == nil {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusOK)
			// Every write has a deadline (httpx.WriteBound): a client
			// that stops reading is cut within httpx.WriteWait instead
			// of holding the handler and the directory open for ever.
			bound := &httpx.WriteBound{RC: http.NewResponseController(w), Wait: httpx.WriteWait}
			bw = bufio.NewWriterSize(httpx.BoundedWriter{W: w, B: bound}, 32<<10)
			bw.WriteByte('[')
		}
		if n > 0 {
			bw.WriteByte(',')
		}
		n++
		_, err = bw.Write(httpx.Marshal(e))
		return err
	})
	switch {
	case bw == nil && err != nil:
		legacyMessage(w, http.StatusInternalServerError, "List files failed: "+pycompat.OSErrorText(errnoOrErr(err)))
	case bw == nil:
		writeJSON(w, http.StatusOK, []legacyEntry{})
	case err != nil:
		s.log.Debug("legacy list cut short", zap.Error(err))
		panic(http.ErrAbortHandler) // the client must not take a cut array for a listing
	default:
		bw.WriteByte(']')
		bw.Flush()
	}
}

// statLink stats the symlink name in the directory in.Rel through its
// target, resolved like every request path (Python's realpath, so absolute
// links into the base dir work too) and then reached through in.Root; a
// target outside the base dir is pycompat.ErrOutside.
func (s *Handlers) statLink(in pycompat.InBase, name string) (os.FileInfo, error) {
	full, err := pycompat.ResolveUnder(in.Base, pycompat.Join(in.Rel, name))
	if err != nil {
		return nil, err
	}
	return in.Root.Stat(pycompat.DotIfEmpty(pycompat.RelOf(in.Base, full)))
}

func (s *Handlers) legacyExistsPath(w http.ResponseWriter, p string) {
	in, err := pycompat.ResolveInBase(s.opts.BaseDir, p)
	if errors.Is(err, pycompat.ErrOutside) || errors.Is(err, pycompat.ErrNULPath) {
		legacyMessage(w, http.StatusForbidden, "Access denied")
		return
	}
	if err == nil { // else the base dir itself is missing: nothing exists
		defer in.Root.Close()
		_, err = in.Root.Stat(pycompat.DotIfEmpty(in.Rel))
	}
	writeJSON(w, http.StatusOK, struct {
		Path   string `json:"path"`
		Exists bool   `json:"exists"`
	}{p, err == nil})
}
