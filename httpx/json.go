package httpx

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
)

// Marshal encodes v without HTML escaping and without a trailing newline.
func Marshal(v any) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		panic(err) // our own types always encode
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

// WriteJSON writes v as the whole response (Marshal's encoding, with its
// Content-Length).
func WriteJSON(w http.ResponseWriter, status int, v any) {
	body := Marshal(v)
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	w.Write(body)
}

// ErrorNoter is implemented by the server's response writer: it keeps the
// error code and message of an error answer for the request log and the
// refusals metric.
type ErrorNoter interface {
	NoteError(code, msg string)
}

// NoteError tells the server's request log (and metrics) the code and
// message of the error answer being written on w; nothing happens when no
// writer below w keeps them.
func NoteError(w http.ResponseWriter, code, msg string) {
	for {
		switch x := w.(type) {
		case ErrorNoter:
			x.NoteError(code, msg)
			return
		case interface{ Unwrap() http.ResponseWriter }:
			w = x.Unwrap()
		default:
			return
		}
	}
}

// CommandNote is the outcome of the one command a request ran to its end
// (legacy /execute), for the request's log line, which is then the
// command's one line too.
type CommandNote struct {
	Argv0                string
	Pid                  int
	ExitCode             int
	TimedOut, Terminated bool
}

// CommandNoter is implemented by the server's response writer: it keeps a
// CommandNote for the request log (NoteCommand), or the word that the
// command the request started logs its own line (NoteCommandLogged).
type CommandNoter interface {
	NoteCommand(CommandNote)
	NoteCommandLogged()
}

// NoteCommand tells the server's request log the outcome of the command the
// request on w ran; nothing happens when no writer below w keeps it.
func NoteCommand(w http.ResponseWriter, c CommandNote) {
	if n := noter(w); n != nil {
		n.NoteCommand(c)
	}
}

// NoteCommandLogged tells the server's request log that the request on w
// started a command whose own log line ("command finished", with the
// request id) records it: a successful request then logs its line at debug,
// so a command has one info line (issue 26). An error answer keeps its
// info line.
func NoteCommandLogged(w http.ResponseWriter) {
	if n := noter(w); n != nil {
		n.NoteCommandLogged()
	}
}

// noter finds the CommandNoter below w, or nil.
func noter(w http.ResponseWriter) CommandNoter {
	for {
		switch x := w.(type) {
		case CommandNoter:
			return x
		case interface{ Unwrap() http.ResponseWriter }:
			w = x.Unwrap()
		default:
			return nil
		}
	}
}

// StatusCode names an error status the way the v1 codes do, for answers
// that carry no code of their own (legacy bodies, net/http's own errors).
func StatusCode(status int) string {
	switch status {
	case http.StatusBadRequest, http.StatusUnprocessableEntity:
		return "invalid_request"
	case http.StatusForbidden:
		return "forbidden"
	case http.StatusNotFound:
		return "not_found"
	case http.StatusMethodNotAllowed:
		return "method_not_allowed"
	case http.StatusRequestEntityTooLarge:
		return "too_large"
	case http.StatusInternalServerError:
		return "internal"
	}
	return strings.ToLower(strings.ReplaceAll(http.StatusText(status), " ", "_"))
}
