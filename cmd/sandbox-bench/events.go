package main

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"unicode/utf8"
)

// event is one decoded line of the event stream (protocol.md §4). Slices point
// into the line they were parsed from and are valid until the next read.
type event struct {
	Type       string
	Stream     string
	Reason     string
	Encoding   string
	Cursor     int64
	HasCursor  bool
	NextCursor int64
	Dropped    int64
	rawData    []byte // the inside of the "data" string, still escaped
	Status     []byte // the raw "status" object, if any
}

// DataLen returns the number of bytes the event's data decodes to.
func (e *event) DataLen() (int64, error) {
	if e.Encoding == "base64" {
		n, err := base64.StdEncoding.Decode(make([]byte, base64.StdEncoding.DecodedLen(len(e.rawData))), e.rawData)
		return int64(n), err
	}
	return unescapedLen(e.rawData)
}

// Data returns the decoded data (allocating); for small outputs.
func (e *event) Data() ([]byte, error) {
	if e.Encoding == "base64" {
		return base64.StdEncoding.AppendDecode(nil, e.rawData)
	}
	s, err := strconv.Unquote(`"` + string(e.rawData) + `"`)
	return []byte(s), err
}

var errSyntax = errors.New("event: bad JSON")

// parseEvent decodes one event object without allocating. It is a small
// order-independent parser for the flat event objects; "status" is kept raw.
// It is fast enough that the client is not the bottleneck of a stream test
// on a 2-core machine.
func parseEvent(line []byte, e *event) error {
	*e = event{}
	p := skipWS(line, 0)
	if p >= len(line) || line[p] != '{' {
		return errSyntax
	}
	p = skipWS(line, p+1)
	if p < len(line) && line[p] == '}' {
		return nil
	}
	for {
		if p >= len(line) || line[p] != '"' {
			return errSyntax
		}
		kEnd := stringEnd(line, p+1)
		if kEnd < 0 {
			return errSyntax
		}
		key := line[p+1 : kEnd]
		p = skipWS(line, kEnd+1)
		if p >= len(line) || line[p] != ':' {
			return errSyntax
		}
		p = skipWS(line, p+1)
		vStart := p
		vEnd := skipValue(line, p)
		if vEnd < 0 {
			return errSyntax
		}
		val := line[vStart:vEnd]
		var err error
		switch string(key) {
		case "type":
			e.Type, err = plainString(val)
		case "stream":
			e.Stream, err = plainString(val)
		case "reason":
			e.Reason, err = plainString(val)
		case "encoding":
			e.Encoding, err = plainString(val)
		case "cursor":
			e.Cursor, err = strconv.ParseInt(string(val), 10, 64)
			e.HasCursor = true
		case "next_cursor":
			e.NextCursor, err = strconv.ParseInt(string(val), 10, 64)
		case "dropped_bytes":
			e.Dropped, err = strconv.ParseInt(string(val), 10, 64)
		case "data":
			if len(val) < 2 || val[0] != '"' {
				return errSyntax
			}
			e.rawData = val[1 : len(val)-1]
		case "status":
			e.Status = val
		}
		if err != nil {
			return fmt.Errorf("event field %s: %w", key, err)
		}
		p = skipWS(line, vEnd)
		if p >= len(line) {
			return errSyntax
		}
		if line[p] == '}' {
			return nil
		}
		if line[p] != ',' {
			return errSyntax
		}
		p = skipWS(line, p+1)
	}
}

func skipWS(b []byte, p int) int {
	for p < len(b) && (b[p] == ' ' || b[p] == '\t' || b[p] == '\n' || b[p] == '\r') {
		p++
	}
	return p
}

// stringEnd returns the index of the closing quote of the string whose
// contents start at p, or -1. It jumps with IndexByte, so long strings with
// few escapes cost little.
func stringEnd(b []byte, p int) int {
	for {
		q := bytes.IndexByte(b[p:], '"')
		if q < 0 {
			return -1
		}
		q += p
		// The quote is escaped iff an odd number of backslashes precede it.
		n := 0
		for i := q - 1; i >= p && b[i] == '\\'; i-- {
			n++
		}
		if n%2 == 0 {
			return q
		}
		p = q + 1
	}
}

// skipValue returns the index just past the JSON value starting at p, or -1.
func skipValue(b []byte, p int) int {
	if p >= len(b) {
		return -1
	}
	switch b[p] {
	case '"':
		q := stringEnd(b, p+1)
		if q < 0 {
			return -1
		}
		return q + 1
	case '{', '[':
		depth := 0
		for i := p; i < len(b); i++ {
			switch b[i] {
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			case '"':
				q := stringEnd(b, i+1)
				if q < 0 {
					return -1
				}
				i = q
			}
		}
		return -1
	default:
		i := p
		for i < len(b) && b[i] != ',' && b[i] != '}' && b[i] != ']' && b[i] != ' ' && b[i] != '\n' {
			i++
		}
		if i == p {
			return -1
		}
		return i
	}
}

// plainString decodes a short JSON string value.
func plainString(v []byte) (string, error) {
	if len(v) < 2 || v[0] != '"' {
		return "", errSyntax
	}
	if bytes.IndexByte(v, '\\') < 0 {
		return string(v[1 : len(v)-1]), nil
	}
	return strconv.Unquote(string(v))
}

// unescapedLen returns the number of bytes the inside of a JSON string
// decodes to.
func unescapedLen(s []byte) (int64, error) {
	var n int64
	for {
		i := bytes.IndexByte(s, '\\')
		if i < 0 {
			return n + int64(len(s)), nil
		}
		n += int64(i)
		s = s[i:]
		if len(s) < 2 {
			return 0, errSyntax
		}
		switch s[1] {
		case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			n++
			s = s[2:]
		case 'u':
			if len(s) < 6 {
				return 0, errSyntax
			}
			r, err := strconv.ParseUint(string(s[2:6]), 16, 32)
			if err != nil {
				return 0, errSyntax
			}
			s = s[6:]
			if r >= 0xd800 && r < 0xdc00 && len(s) >= 6 && s[0] == '\\' && s[1] == 'u' {
				// A surrogate pair is one 4-byte character.
				n += 4
				s = s[6:]
				continue
			}
			n += int64(utf8.RuneLen(rune(r)))
		default:
			return 0, errSyntax
		}
	}
}

// lineSource yields one event object at a time: NDJSON lines or WebSocket
// text frames.
type lineSource interface {
	next() ([]byte, error)
	Close() error
}

// ndjsonSource reads lines of an HTTP response body.
type ndjsonSource struct {
	body io.ReadCloser
	r    *bufio.Reader
	long []byte
}

// readers recycles the 1 MiB line readers: allocating (and zeroing) one per
// request would cost this client more than a short command costs the daemon.
var readers = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 1<<20) }}

func newNDJSONSource(body io.ReadCloser) *ndjsonSource {
	r := readers.Get().(*bufio.Reader)
	r.Reset(body)
	return &ndjsonSource{body: body, r: r}
}

func (s *ndjsonSource) next() ([]byte, error) {
	for {
		line, err := s.r.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			s.long = append(s.long[:0], line...)
			for err == bufio.ErrBufferFull {
				line, err = s.r.ReadSlice('\n')
				s.long = append(s.long, line...)
			}
			line = s.long
		}
		if err != nil {
			if err == io.EOF && len(bytes.TrimSpace(line)) > 0 {
				return nil, io.ErrUnexpectedEOF
			}
			return nil, err
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		return line, nil
	}
}

// Close closes the body and recycles the reader; the last line returned by
// next is invalid afterwards.
func (s *ndjsonSource) Close() error {
	err := s.body.Close()
	if s.r != nil {
		s.r.Reset(nil)
		readers.Put(s.r)
		s.r = nil
	}
	return err
}

// followStats is what a follower saw.
type followStats struct {
	Bytes      int64 // output bytes received (decoded)
	Events     int64 // output events
	Gaps       int64 // gap events
	Dropped    int64 // bytes the gaps reported lost
	Heartbeats int64
	Reopens    int64  // windows that ended with "end" and were re-opened
	Next       int64  // the cursor after the last event
	Started    []byte // the status of the "started" event, if any
	Exit       []byte // the status of the "exit" event
	Stdout     []byte // decoded stdout, when keepData is set
}

// errWindowEnd is returned by consume when the stream ended with an "end"
// event: the caller re-opens from st.Next.
var errWindowEnd = errors.New("window ended")

// consume reads events from src until "exit" (nil) or "end" (errWindowEnd),
// checking that every output event continues exactly where the previous one
// (or the last gap) left off and that its data is next_cursor-cursor bytes.
func consume(src lineSource, st *followStats, keepData bool) error {
	var e event
	for {
		line, err := src.next()
		if err != nil {
			return fmt.Errorf("reading events at cursor %d: %w", st.Next, err)
		}
		if err := parseEvent(line, &e); err != nil {
			return fmt.Errorf("%w: %.200q", err, line)
		}
		switch e.Type {
		case "started":
			st.Started = append(st.Started[:0], e.Status...)
		case "output":
			if !e.HasCursor || e.Cursor != st.Next {
				return fmt.Errorf("output event at cursor %d; want %d (not contiguous)", e.Cursor, st.Next)
			}
			n, err := e.DataLen()
			if err != nil {
				return fmt.Errorf("output event at cursor %d: data: %w", e.Cursor, err)
			}
			if e.NextCursor != e.Cursor+n {
				return fmt.Errorf("output event at cursor %d: %d data bytes but next_cursor %d", e.Cursor, n, e.NextCursor)
			}
			if keepData && e.Stream == "stdout" {
				d, err := e.Data()
				if err != nil {
					return err
				}
				st.Stdout = append(st.Stdout, d...)
			}
			st.Bytes += n
			st.Events++
			st.Next = e.NextCursor
		case "gap":
			if e.Cursor != st.Next || e.NextCursor-e.Cursor != e.Dropped {
				return fmt.Errorf("gap event cursor %d dropped %d next %d; want cursor %d", e.Cursor, e.Dropped, e.NextCursor, st.Next)
			}
			st.Gaps++
			st.Dropped += e.Dropped
			st.Next = e.NextCursor
		case "heartbeat":
			st.Heartbeats++
		case "exit":
			if e.NextCursor != st.Next {
				return fmt.Errorf("exit event next_cursor %d; want %d", e.NextCursor, st.Next)
			}
			st.Exit = append(st.Exit[:0], e.Status...)
			return nil
		case "end":
			if e.NextCursor != st.Next {
				return fmt.Errorf("end event next_cursor %d; want %d", e.NextCursor, st.Next)
			}
			if e.Reason == "shutting_down" {
				return fmt.Errorf("the daemon is shutting down")
			}
			st.Reopens++
			return errWindowEnd
		default:
			return fmt.Errorf("unknown event type %q", e.Type)
		}
	}
}
