package api

import (
	"encoding/base64"
	"strconv"
	"syscall"

	"github.com/sandbox-runtime/sandbox-runtime/runtime"
	"github.com/sandbox-runtime/sandbox-runtime/wire"
)

// The requests of the v1 API are decoded into the wire package's types
// (decodeJSON, decodeFrame: strictly, see checkKeys) and mapped to what the
// runtime takes here, one function per wire type, for the HTTP routes and
// the WebSocket frames alike. The runtime's request is the one domain
// shape; a wire type is its JSON adapter, and there is no other.
// TestWireRequestFieldsAreMapped fails when a wire field is not mapped.

// createRequest maps the body of POST /v1/commands to the runtime's
// request. It checks what the decoder cannot: an env value must be a
// string (null is 400), and a command_id that is given must be a UUID, so
// "" is 400 rather than "no id". A command and a timeout are the
// request's when given (and not null), even as "" or 0.
func createRequest(b *wire.CreateRequest, m members) (runtime.CreateRequest, error) {
	req := runtime.CreateRequest{Argv: b.Argv, Envs: b.Envs, Cwd: b.Cwd, Stdin: b.Stdin, PTY: ptyRequest(b.PTY)}
	if m.has("command") {
		command := b.Command // a copy: the caller may clear b
		req.Command = &command
	}
	if m.has("timeout") {
		timeout := b.Timeout
		req.Timeout = &timeout
	}
	if m.nullInMap("envs") {
		// Never the name: it may carry a secret ("SECRET=hunter2").
		return req, badRequest(`every value of field "envs" must be a string; one is null (names and values are not repeated here)`)
	}
	if m.has("command_id") && b.CommandID == "" {
		return req, badRequest(`command_id must be a UUID (got "")`)
	}
	req.CommandID = b.CommandID
	return req, nil
}

// ptyRequest maps the "pty" member of a create; nil: pipes.
func ptyRequest(p *wire.PTYRequest) *runtime.PTYRequest {
	if p == nil {
		return nil
	}
	return &runtime.PTYRequest{Cols: p.Cols, Rows: p.Rows, Term: p.Term}
}

// stdinOf maps the body of POST /v1/commands/{id}/stdin, or a stdin frame,
// to the bytes to write and whether stdin ends after them.
func stdinOf(b wire.StdinRequest) (data []byte, eof bool, err error) {
	switch b.Encoding {
	case "", "utf-8", "text":
		return []byte(b.Data), b.EOF, nil
	case wire.EncodingBase64:
		data, err := base64.StdEncoding.DecodeString(b.Data)
		if err != nil {
			return nil, false, badRequest("data is not valid base64: " + err.Error())
		}
		return data, b.EOF, nil
	}
	return nil, false, badRequest(`encoding must be "base64", "utf-8" or "text" (or absent: utf-8), not ` + strconv.Quote(b.Encoding))
}

// signalOf maps the body of POST /v1/commands/{id}/signal, or a signal
// frame, to the signal. A number arrives as its digits (wire.Signal), which
// runtime.ParseSignal reads as a number.
func signalOf(b wire.SignalRequest, m members) (syscall.Signal, error) {
	if !m.has("signal") {
		return 0, badRequest(`field "signal" is required`)
	}
	return runtime.ParseSignal(string(b.Signal))
}

// resizeOf maps the body of POST /v1/commands/{id}/resize, or a resize
// frame, to the terminal size. Both fields are required.
func resizeOf(b wire.ResizeRequest, m members) (cols, rows int, err error) {
	if !m.has("cols") || !m.has("rows") {
		return 0, 0, badRequest(`fields "cols" and "rows" are required`)
	}
	return b.Cols, b.Rows, nil
}
