package pycompat

// json.loads: Python's json module on bytes, as POST /execute's body is read.

import (
	"errors"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Value is a JSON value as Python's json.loads sees it, reduced to what
// parseExecuteBody looks at (see pyParser): the body's tree is never built.
// It is passed by value: reading a body allocates nothing per value but
// the strings.
type Value struct {
	Scalar
	n     int       // 'a': elements; 'o': keys, duplicates counted
	elems [2]Scalar // 'a' at depth 2: the first two elements (kind only for a composite)
	keys  [3]string // 'o' at depth 2: the first nkeys distinct keys, in order
	nkeys int
	// At depth 1 (the body itself): the value of the last "command" key (an
	// object), or of the last pair whose key is "command" (an array); and
	// whether an element of the array is not a pair.
	command    Scalar
	hasCommand bool
	notDict    bool
}

// Scalar is a value without its contents: all of a scalar, the kind of a
// composite.
type Scalar struct {
	kind byte // 'z' null, 'b' bool, 'i' int, 'f' float, 's' string, 'a' array, 'o' object
	b    bool
	text string // 's': the string; 'i' and 'f': the number token or NaN/Infinity/-Infinity
}

// Kind is the value's type: 'z' null, 'b' bool, 'i' int, 'f' float, 's'
// string, 'a' array, 'o' object.
func (v *Scalar) Kind() byte { return v.kind }

// Bool is the value of a 'b'.
func (v *Scalar) Bool() bool { return v.b }

// Text is the string of an 's', the number token of an 'i' or 'f'.
func (v *Scalar) Text() string { return v.text }

// Command is, for the body itself, the value of its last "command" key (an
// object) or of its last pair whose key is "command" (an array), and
// whether there was one.
func (v *Value) Command() (Scalar, bool) { return v.command, v.hasCommand }

// NotDict reports, for an array body, whether an element is not a pair
// (dict(value) would fail).
func (v *Value) NotDict() bool { return v.notDict }

// Str is str() of a number.
func (v *Scalar) Str() string {
	if v.kind == 'i' {
		if strings.Trim(v.text, "-0") == "" {
			return "0"
		}
		return v.text
	}
	f, _ := strconv.ParseFloat(v.text, 64) // ±Inf on overflow, like float()
	switch v.text {
	case "NaN":
		f = math.NaN()
	case "Infinity":
		f = math.Inf(1)
	case "-Infinity":
		f = math.Inf(-1)
	}
	return Float(f)
}

// pair is one element of dict(list): a 2-element list, a 2-character
// string, or a 2-key object (its keys). Lists and objects are unhashable.
func (v *Value) pair() (k, val Scalar, ok bool) {
	switch v.kind {
	case 'a':
		if k := v.elems[0]; v.n == 2 && k.kind != 'a' && k.kind != 'o' {
			return k, v.elems[1], true
		}
	case 's':
		if utf8.RuneCountInString(v.text) == 2 {
			r0, n := utf8.DecodeRuneInString(v.text)
			r1, _ := utf8.DecodeRuneInString(v.text[n:])
			return Scalar{kind: 's', text: string(r0)}, Scalar{kind: 's', text: string(r1)}, true
		}
	case 'o':
		if v.nkeys == 2 { // the distinct keys, when there are at most three
			return Scalar{kind: 's', text: v.keys[0]}, Scalar{kind: 's', text: v.keys[1]}, true
		}
	}
	return Scalar{}, Scalar{}, false
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// JSONError is json.JSONDecodeError: Msg at the code-point position Pos.
type JSONError struct {
	Msg string
	Pos int
}

func (e *JSONError) Error() string { return e.Msg }

// LineCol is the JSONDecodeError's lineno and colno of e in doc.
func (e *JSONError) LineCol(doc []rune) (lineno, colno int) {
	lineno, colno = 1, e.Pos+1
	for i := 0; i < e.Pos && i < len(doc); i++ {
		if doc[i] == '\n' {
			lineno++
			colno = e.Pos - i
		}
	}
	return lineno, colno
}

// ErrJSONLimit is a body Python refuses with something other than a
// JSONDecodeError (RecursionError, the 4300-digit int limit): FastAPI
// answered those with 400.
var ErrJSONLimit = errors.New("json: nesting or number too large")

const (
	jsonMaxDepth     = 900  // CPython's recursion limit is 1000, less the server's frames
	jsonMaxIntDigits = 4300 // sys.int_info.default_max_str_digits
)

// DecodeJSONBytes is json.loads' decoding of bytes: the encoding is
// sniffed from a BOM or the NUL pattern (json.detect_encoding).
func DecodeJSONBytes(b []byte) ([]rune, bool) {
	has := func(p ...byte) bool { return len(b) >= len(p) && string(b[:len(p)]) == string(p) }
	switch {
	case has(0, 0, 0xFE, 0xFF):
		return decodeUTF32(b[4:], true)
	case has(0xFF, 0xFE, 0, 0):
		return decodeUTF32(b[4:], false)
	case has(0xFE, 0xFF):
		return decodeUTF16(b[2:], true)
	case has(0xFF, 0xFE):
		return decodeUTF16(b[2:], false)
	case has(0xEF, 0xBB, 0xBF):
		b = b[3:]
	case len(b) >= 4 && b[0] == 0:
		if b[1] != 0 {
			return decodeUTF16(b, true)
		}
		return decodeUTF32(b, true)
	case len(b) >= 4 && b[1] == 0:
		if b[2] != 0 || b[3] != 0 {
			return decodeUTF16(b, false)
		}
		return decodeUTF32(b, false)
	case len(b) == 2 && b[0] == 0:
		return decodeUTF16(b, true)
	case len(b) == 2 && b[1] == 0:
		return decodeUTF16(b, false)
	}
	if !utf8.Valid(b) { // Python's strict UTF-8: surrogates are invalid too
		return nil, false
	}
	out := make([]rune, 0, utf8.RuneCount(b)) // exactly once, no string in between
	for i := 0; i < len(b); {
		r, size := utf8.DecodeRune(b[i:])
		out = append(out, r)
		i += size
	}
	return out, true
}

func utf8ValidStrict(b []byte) bool { return DecodeUTF8(b) == string(b) }

func decodeUTF16(b []byte, bigEndian bool) ([]rune, bool) {
	if len(b)%2 != 0 {
		return nil, false
	}
	out := make([]rune, 0, len(b)/2)
	for i := 0; i < len(b); i += 2 {
		u := rune(b[i])<<8 | rune(b[i+1])
		if !bigEndian {
			u = rune(b[i+1])<<8 | rune(b[i])
		}
		if u >= 0xD800 && u < 0xDC00 && i+3 < len(b) {
			l := rune(b[i+2])<<8 | rune(b[i+3])
			if !bigEndian {
				l = rune(b[i+3])<<8 | rune(b[i+2])
			}
			if l >= 0xDC00 && l < 0xE000 {
				out = append(out, 0x10000+(u-0xD800)<<10+(l-0xDC00))
				i += 2
				continue
			}
		}
		out = append(out, u) // a lone surrogate ends up as U+FFFD in Go strings
	}
	return out, true
}

func decodeUTF32(b []byte, bigEndian bool) ([]rune, bool) {
	if len(b)%4 != 0 {
		return nil, false
	}
	out := make([]rune, 0, len(b)/4)
	for i := 0; i < len(b); i += 4 {
		var u uint32
		if bigEndian {
			u = uint32(b[i])<<24 | uint32(b[i+1])<<16 | uint32(b[i+2])<<8 | uint32(b[i+3])
		} else {
			u = uint32(b[i+3])<<24 | uint32(b[i+2])<<16 | uint32(b[i+1])<<8 | uint32(b[i])
		}
		if u > 0x10FFFF {
			return nil, false
		}
		out = append(out, rune(u))
	}
	return out, true
}

// ParseJSON is json.loads on a str, following CPython 3.11's C scanner so
// that error messages and positions match.
func ParseJSON(doc []rune) (Value, error) {
	p := &pyParser{s: doc}
	idx := p.ws(0)
	v, end, err := p.scan(idx)
	if err != nil {
		return Value{}, err
	}
	if end = p.ws(end); end != len(doc) {
		return Value{}, &JSONError{"Extra data", end}
	}
	return v, nil
}

// pyParser is the scanner. It keeps only what parseExecuteBody needs, so
// that what a body costs is its text, whatever its shape (a 1 MiB array of
// 350,000 empty arrays is no more than 1 MiB of anything else): at depth 1
// (the body) an object keeps its last "command" value and an array is
// reduced to pairs as it is read; at depth 2 an array keeps its first two
// elements and an object its first three distinct keys; deeper composites
// keep only their kind. Syntax errors are found and placed as before.
type pyParser struct {
	s     []rune
	depth int // of the composite being read: 1 for the body itself
}

func (p *pyParser) ws(i int) int {
	for i < len(p.s) && (p.s[i] == ' ' || p.s[i] == '\t' || p.s[i] == '\n' || p.s[i] == '\r') {
		i++
	}
	return i
}

func (p *pyParser) word(i int, w string) bool {
	r := []rune(w)
	if i+len(r) > len(p.s) {
		return false
	}
	for j, c := range r {
		if p.s[i+j] != c {
			return false
		}
	}
	return true
}

// scan is scan_once: the value at idx and the index after it.
func (p *pyParser) scan(idx int) (Value, int, error) {
	if idx >= len(p.s) {
		return Value{}, 0, &JSONError{"Expecting value", idx}
	}
	switch p.s[idx] {
	case '"':
		str, end, err := p.str(idx + 1)
		return Value{Scalar: Scalar{kind: 's', text: str}}, end, err
	case '{', '[':
		if p.depth++; p.depth > jsonMaxDepth {
			return Value{}, 0, ErrJSONLimit
		}
		defer func() { p.depth-- }()
		if p.s[idx] == '{' {
			return p.object(idx + 1)
		}
		return p.array(idx + 1)
	case 'n':
		if p.word(idx, "null") {
			return Value{Scalar: Scalar{kind: 'z'}}, idx + 4, nil
		}
	case 't':
		if p.word(idx, "true") {
			return Value{Scalar: Scalar{kind: 'b', b: true}}, idx + 4, nil
		}
	case 'f':
		if p.word(idx, "false") {
			return Value{Scalar: Scalar{kind: 'b'}}, idx + 5, nil
		}
	case 'N':
		if p.word(idx, "NaN") {
			return Value{Scalar: Scalar{kind: 'f', text: "NaN"}}, idx + 3, nil
		}
	case 'I':
		if p.word(idx, "Infinity") {
			return Value{Scalar: Scalar{kind: 'f', text: "Infinity"}}, idx + 8, nil
		}
	case '-':
		if p.word(idx, "-Infinity") {
			return Value{Scalar: Scalar{kind: 'f', text: "-Infinity"}}, idx + 9, nil
		}
	}
	return p.number(idx)
}

func isDigit(r rune) bool { return r >= '0' && r <= '9' }

// number is _match_number_unicode.
func (p *pyParser) number(start int) (Value, int, error) {
	s, idx, last := p.s, start, len(p.s)-1
	if s[idx] == '-' {
		if idx++; idx > last {
			return Value{}, 0, &JSONError{"Expecting value", start}
		}
	}
	switch {
	case s[idx] >= '1' && s[idx] <= '9':
		for idx++; idx <= last && isDigit(s[idx]); idx++ {
		}
	case s[idx] == '0':
		idx++
	default:
		return Value{}, 0, &JSONError{"Expecting value", start}
	}
	kind := byte('i')
	if idx < last && s[idx] == '.' && isDigit(s[idx+1]) {
		kind = 'f'
		for idx += 2; idx <= last && isDigit(s[idx]); idx++ {
		}
	}
	if idx < last && (s[idx] == 'e' || s[idx] == 'E') {
		eStart := idx
		idx++
		if idx < last && (s[idx] == '-' || s[idx] == '+') {
			idx++
		}
		for idx <= last && isDigit(s[idx]) {
			idx++
		}
		if isDigit(s[idx-1]) {
			kind = 'f'
		} else {
			idx = eStart
		}
	}
	text := string(s[start:idx])
	if kind == 'i' && len(strings.TrimPrefix(text, "-")) > jsonMaxIntDigits {
		return Value{}, 0, ErrJSONLimit
	}
	return Value{Scalar: Scalar{kind: kind, text: text}}, idx, nil
}

// str is scanstring_unicode; end is the index after the opening quote.
func (p *pyParser) str(end int) (string, int, error) {
	s, begin := p.s, end-1
	var sb strings.Builder
	for {
		next := end
		for ; next < len(s); next++ {
			d := s[next]
			if d == '"' || d == '\\' {
				break
			}
			if d <= 0x1f {
				return "", 0, &JSONError{"Invalid control character at", next}
			}
		}
		if next >= len(s) {
			return "", 0, &JSONError{"Unterminated string starting at", begin}
		}
		c := s[next]
		sb.WriteString(string(s[end:next]))
		next++
		if c == '"' {
			return sb.String(), next, nil
		}
		if next == len(s) {
			return "", 0, &JSONError{"Unterminated string starting at", begin}
		}
		c = s[next]
		if c != 'u' {
			end = next + 1
			switch c {
			case '"', '\\', '/':
			case 'b':
				c = '\b'
			case 'f':
				c = '\f'
			case 'n':
				c = '\n'
			case 'r':
				c = '\r'
			case 't':
				c = '\t'
			default:
				return "", 0, &JSONError{"Invalid \\escape", end - 2}
			}
		} else {
			next++
			end = next + 4
			if end >= len(s) {
				return "", 0, &JSONError{"Invalid \\uXXXX escape", next - 1}
			}
			var ok bool
			if c, ok = hex4(s[next:end]); !ok {
				return "", 0, &JSONError{"Invalid \\uXXXX escape", end - 5}
			}
			if c >= 0xD800 && c <= 0xDBFF && end+6 < len(s) && s[end] == '\\' && s[end+1] == 'u' {
				c2, ok := hex4(s[end+2 : end+6])
				if !ok {
					return "", 0, &JSONError{"Invalid \\uXXXX escape", end + 1}
				}
				if c2 >= 0xDC00 && c2 <= 0xDFFF {
					c = 0x10000 + (c-0xD800)<<10 + (c2 - 0xDC00)
					end += 6
				}
			}
		}
		sb.WriteRune(c)
	}
}

func hex4(r []rune) (rune, bool) {
	var v rune
	for _, d := range r {
		switch {
		case d >= '0' && d <= '9':
			v = v<<4 | (d - '0')
		case d >= 'a' && d <= 'f':
			v = v<<4 | (d - 'a' + 10)
		case d >= 'A' && d <= 'F':
			v = v<<4 | (d - 'A' + 10)
		default:
			return 0, false
		}
	}
	return v, true
}

func (p *pyParser) object(idx int) (Value, int, error) {
	s, v := p.s, Value{Scalar: Scalar{kind: 'o'}}
	idx = p.ws(idx)
	if idx >= len(s) || s[idx] != '}' {
		for {
			if idx >= len(s) || s[idx] != '"' {
				return Value{}, 0, &JSONError{"Expecting property name enclosed in double quotes", idx}
			}
			key, next, err := p.str(idx + 1)
			if err != nil {
				return Value{}, 0, err
			}
			if idx = p.ws(next); idx >= len(s) || s[idx] != ':' {
				return Value{}, 0, &JSONError{"Expecting ':' delimiter", idx}
			}
			val, next, err := p.scan(p.ws(idx + 1))
			if err != nil {
				return Value{}, 0, err
			}
			v.n++
			switch p.depth {
			case 1:
				if key == "command" {
					v.command, v.hasCommand = val.Scalar, true
				}
			case 2:
				if v.nkeys < len(v.keys) && !contains(v.keys[:v.nkeys], key) {
					v.keys[v.nkeys] = key
					v.nkeys++
				}
			}
			if idx = p.ws(next); idx < len(s) && s[idx] == '}' {
				break
			}
			if idx >= len(s) || s[idx] != ',' {
				return Value{}, 0, &JSONError{"Expecting ',' delimiter", idx}
			}
			idx = p.ws(idx + 1)
		}
	}
	return v, idx + 1, nil
}

func (p *pyParser) array(idx int) (Value, int, error) {
	s, v := p.s, Value{Scalar: Scalar{kind: 'a'}}
	idx = p.ws(idx)
	if idx >= len(s) || s[idx] != ']' {
		for {
			val, next, err := p.scan(idx)
			if err != nil {
				return Value{}, 0, err
			}
			v.n++
			switch p.depth {
			case 1:
				if k, pv, ok := val.pair(); !ok {
					v.notDict = true
				} else if k.kind == 's' && k.text == "command" {
					v.command, v.hasCommand = pv, true
				}
			case 2:
				if v.n <= len(v.elems) {
					v.elems[v.n-1] = val.Scalar
				}
			}
			if idx = p.ws(next); idx < len(s) && s[idx] == ']' {
				break
			}
			if idx >= len(s) || s[idx] != ',' {
				return Value{}, 0, &JSONError{"Expecting ',' delimiter", idx}
			}
			idx = p.ws(idx + 1)
		}
	}
	return v, idx + 1, nil
}
