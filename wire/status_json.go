package wire

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"time"
	"unicode/utf8"
)

// AppendJSON appends the JSON encoding of s to b: exactly the bytes of
// encoding/json's Encoder with SetEscapeHTML(false) (what the daemon sends),
// without reflection. A status is encoded twice per streamed command (the
// started and exit events) and once per create answer. Values encoding/json
// would refuse (a NaN timeout, a year past 9999) go to encoding/json, which
// refuses them the same way.
//
// long: one field after another in encoding/json's order; a split would
// only cut that list in places.
func (s *Status) AppendJSON(b []byte) []byte {
	if !s.plain() {
		return appendSlow(b, s)
	}
	b = append(b, `{"command_id":`...)
	b = appendString(b, s.CommandID)
	b = append(b, `,"argv":`...)
	if s.Argv == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i, a := range s.Argv {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, a)
		}
		b = append(b, ']')
	}
	b = append(b, `,"cwd":`...)
	b = appendString(b, s.Cwd)
	b = append(b, `,"state":`...)
	b = appendString(b, string(s.State))
	b = append(b, `,"pid":`...)
	b = strconv.AppendInt(b, int64(s.PID), 10)
	b = append(b, `,"exit_code":`...)
	if s.ExitCode == nil {
		b = append(b, "null"...)
	} else {
		b = strconv.AppendInt(b, int64(*s.ExitCode), 10)
	}
	b = append(b, `,"signal":`...)
	if s.Signal == nil {
		b = append(b, "null"...)
	} else {
		b = appendString(b, *s.Signal)
	}
	b = append(b, `,"stdin":`...)
	b = strconv.AppendBool(b, s.Stdin)
	b = append(b, `,"stdin_closed":`...)
	b = strconv.AppendBool(b, s.StdinClosed)
	b = append(b, `,"timeout_seconds":`...)
	b = appendFloat(b, s.TimeoutSeconds)
	b = append(b, `,"created_at":`...)
	b = appendTime(b, s.CreatedAt)
	b = append(b, `,"started_at":`...)
	b = appendTimePtr(b, s.StartedAt)
	b = append(b, `,"finished_at":`...)
	b = appendTimePtr(b, s.FinishedAt)
	b = append(b, `,"expires_at":`...)
	b = appendTimePtr(b, s.ExpiresAt)
	b = append(b, `,"stdout_bytes":`...)
	b = strconv.AppendInt(b, s.StdoutBytes, 10)
	b = append(b, `,"stderr_bytes":`...)
	b = strconv.AppendInt(b, s.StderrBytes, 10)
	b = append(b, `,"retained_from":`...)
	b = strconv.AppendInt(b, s.RetainedFrom, 10)
	b = append(b, `,"next_cursor":`...)
	b = strconv.AppendInt(b, s.NextCursor, 10)
	b = append(b, `,"output_truncated":`...)
	b = strconv.AppendBool(b, s.OutputTruncated)
	b = append(b, `,"resources":`...)
	if r := s.Resources; r == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, `{"user_cpu_ms":`...)
		b = strconv.AppendInt(b, r.UserCPUMillis, 10)
		b = append(b, `,"system_cpu_ms":`...)
		b = strconv.AppendInt(b, r.SystemCPUMillis, 10)
		b = append(b, `,"max_rss_kb":`...)
		b = strconv.AppendInt(b, r.MaxRSSKB, 10)
		b = append(b, '}')
	}
	b = append(b, `,"pty":`...)
	if p := s.PTY; p == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, `{"cols":`...)
		b = strconv.AppendInt(b, int64(p.Cols), 10)
		b = append(b, `,"rows":`...)
		b = strconv.AppendInt(b, int64(p.Rows), 10)
		b = append(b, `,"term":`...)
		b = appendString(b, p.Term)
		b = append(b, '}')
	}
	b = append(b, `,"pty_bytes":`...)
	b = strconv.AppendInt(b, s.PTYBytes, 10)
	b = append(b, `,"waiting_for_input":`...)
	if s.WaitingForInput == nil {
		b = append(b, "null"...)
	} else {
		b = strconv.AppendBool(b, *s.WaitingForInput)
	}
	b = append(b, `,"oom_killed":`...)
	b = strconv.AppendBool(b, s.OOMKilled)
	return append(b, '}')
}

// AppendStatusEvent appends the started or exit event (typ) carrying s:
// exactly the encoding of Event{Type: typ, Status: s, NextCursor: next}.
func AppendStatusEvent(b []byte, typ string, s *Status, next int64) []byte {
	b = append(b, `{"type":`...)
	b = appendString(b, typ)
	b = append(b, `,"status":`...)
	b = s.AppendJSON(b)
	b = append(b, `,"next_cursor":`...)
	b = strconv.AppendInt(b, next, 10)
	return append(b, '}')
}

// plain reports whether every value of s has an encoding (encoding/json
// refuses NaN and infinite numbers, and times it cannot write as RFC 3339).
func (s *Status) plain() bool {
	if s.Listeners != nil || s.WaitPortResult != "" { // GET /v1/commands/{id} only: encoding/json
		return false
	}
	if math.IsNaN(s.TimeoutSeconds) || math.IsInf(s.TimeoutSeconds, 0) {
		return false
	}
	for _, t := range [...]*time.Time{&s.CreatedAt, s.StartedAt, s.FinishedAt, s.ExpiresAt} {
		if t != nil && !rfc3339able(*t) {
			return false
		}
	}
	return true
}

// rfc3339able: the year has four digits and the zone offset is whole
// minutes of less than a day (time.Time.MarshalJSON's conditions).
func rfc3339able(t time.Time) bool {
	if y := t.Year(); y < 0 || y > 9999 {
		return false
	}
	_, off := t.Zone()
	return off%60 == 0 && off > -24*3600 && off < 24*3600
}

func appendTime(b []byte, t time.Time) []byte {
	b = append(b, '"')
	b = t.AppendFormat(b, time.RFC3339Nano)
	return append(b, '"')
}

func appendTimePtr(b []byte, t *time.Time) []byte {
	if t == nil {
		return append(b, "null"...)
	}
	return appendTime(b, *t)
}

// appendFloat is encoding/json's float64 encoding (ES6 number formatting).
func appendFloat(b []byte, f float64) []byte {
	abs := math.Abs(f)
	format := byte('f')
	if abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		// clean up e-09 to e-9
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b
}

// appendString appends s as a JSON string. Printable ASCII other than '"'
// and '\\', and valid UTF-8 other than U+2028 and U+2029, go as they are (as
// encoding/json writes them); a string with anything else goes to
// encoding/json.
func appendString(b []byte, s string) []byte {
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c < 0x20 || c == '"' || c == '\\' {
				return appendSlow(b, s)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 || r == '\u2028' || r == '\u2029' {
			return appendSlow(b, s)
		}
		i += size
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// appendSlow appends encoding/json's encoding of v (HTML left unescaped).
func appendSlow(b []byte, v any) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		panic(err) // as httpx.Marshal: our own types always encode
	}
	return append(b, bytes.TrimSuffix(buf.Bytes(), []byte("\n"))...)
}
