// repr() and str(): values formatted the way CPython does, so that Python
// error messages can be reproduced byte for byte.
//
// The behaviour matches CPython 3.11 on Linux with glibc: String follows
// Python 3's repr(str) with the str.isprintable() rules of Unicode 14.0.0
// (the database Python 3.11 uses, independent of the Unicode version of
// the Go standard library), Float follows repr(float), and OSError uses
// glibc's strerror() texts.
//
// Python strings are sequences of code points while Go strings are
// arbitrary bytes. String decodes its argument as UTF-8 and renders each
// byte of an invalid UTF-8 sequence as U+FFFD REPLACEMENT CHARACTER, which
// Python considers printable and therefore emits as is (the three bytes
// EF BF BD). This is what Python shows for text decoded with
// errors="replace"; text decoded with errors="surrogateescape" (as
// os.fsdecode does) would instead show '\udcXX' escapes, which this
// package does not attempt to reproduce.

package pycompat

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"syscall"
	"unicode"
	"unicode/utf8"
)

const hexDigits = "0123456789abcdef"

// isPrintable reports whether Python 3.11's str.isprintable() is true for
// the single code point r.
func isPrintable(r rune) bool {
	if r < utf8.RuneSelf {
		return ' ' <= r && r < 0x7f
	}
	return unicode.Is(pyPrintable, r)
}

// String returns Python 3's repr() of the str s.
//
// The result is enclosed in single quotes, unless s contains a single
// quote and no double quote, in which case double quotes are used.
// Backslashes and the enclosing quote character are escaped with a
// backslash; tab, newline and carriage return become \t, \n and \r; other
// characters that are not printable by Python's str.isprintable() rules
// become \xhh, \uhhhh or \Uhhhhhhhh (lowercase hex, shortest form that
// fits). Printable non-ASCII characters, such as 'é' or '😀', are kept as
// is, while for example U+00A0 becomes '\xa0' and U+2028 becomes
// '\u2028'. Invalid UTF-8 is rendered as U+FFFD (see the package
// documentation).
func String(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 2)
	appendString(&b, s)
	return b.String()
}

func appendString(b *strings.Builder, s string) {
	quote := byte('\'')
	if strings.IndexByte(s, '\'') >= 0 && strings.IndexByte(s, '"') < 0 {
		quote = '"'
	}
	b.WriteByte(quote)
	for _, r := range s {
		switch {
		case r == rune(quote) || r == '\\':
			b.WriteByte('\\')
			b.WriteByte(byte(r))
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case isPrintable(r):
			// Includes utf8.RuneError, which is what invalid
			// UTF-8 decodes to.
			b.WriteRune(r)
		case r <= 0xff:
			b.WriteString(`\x`)
			appendHex(b, uint32(r), 2)
		case r <= 0xffff:
			b.WriteString(`\u`)
			appendHex(b, uint32(r), 4)
		default:
			b.WriteString(`\U`)
			appendHex(b, uint32(r), 8)
		}
	}
	b.WriteByte(quote)
}

func appendHex(b *strings.Builder, v uint32, digits int) {
	for shift := 4 * (digits - 1); shift >= 0; shift -= 4 {
		b.WriteByte(hexDigits[(v>>uint(shift))&0xf])
	}
}

// List returns Python's repr() of a list of str, for example
// "['sleep', '5']"; an empty (or nil) items gives "[]".
func List(items []string) string {
	var b strings.Builder
	b.WriteByte('[')
	for i, s := range items {
		if i > 0 {
			b.WriteString(", ")
		}
		appendString(&b, s)
	}
	b.WriteByte(']')
	return b.String()
}

// Float returns Python's repr() of the float f: the shortest decimal
// string that rounds back to f, written in positional notation with at
// least one digit after the point ("3.0", "0.5", "300.0", "-0.0") when
// the decimal exponent is between -5 and 15 inclusive (that is
// 1e-4 <= |f| < 1e16), and in exponent notation with a sign and at least
// two exponent digits otherwise ("1e+16", "1.5e-07", "5e-324"). Infinities
// are "inf" and "-inf", and every NaN is "nan".
func Float(f float64) string {
	switch {
	case math.IsNaN(f):
		return "nan"
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	case f == 0:
		if math.Signbit(f) {
			return "-0.0"
		}
		return "0.0"
	}
	// Go's shortest round-trip digits are the same as those of Python's
	// dtoa mode 0, and Go's exponent format ("1.5e-07", "1e+100")
	// matches Python's.
	e := strconv.FormatFloat(f, 'e', -1, 64)
	i := strings.LastIndexByte(e, 'e')
	exp, err := strconv.Atoi(e[i+1:])
	if err != nil {
		panic("pycompat: unexpected float format " + e)
	}
	// Python's float_repr_style "short" uses exponent notation when the
	// decimal point position decpt = exp+1 satisfies decpt <= -4 or
	// decpt > 16.
	if exp < -4 || exp >= 16 {
		return e
	}
	s := strconv.FormatFloat(f, 'f', -1, 64)
	if strings.IndexByte(s, '.') < 0 {
		s += ".0"
	}
	return s
}

// Strerror returns the message glibc's strerror() (and hence Python's
// os.strerror()) gives for errno, for example "No such file or directory"
// for ENOENT. Unknown values give "Unknown error N", like glibc.
//
// Go's syscall.Errno.Error() is not used because its texts differ from
// glibc's (for one, they are not capitalised).
func Strerror(errno syscall.Errno) string {
	if uint64(errno) < uint64(len(strerrors)) {
		return strerrors[errno]
	}
	return "Unknown error " + strconv.FormatUint(uint64(errno), 10)
}

// OSError returns str() of a Python OSError carrying errno, its strerror
// text and filename, as printed for example in the traceback of a failed
// subprocess.Popen: "[Errno 2] No such file or directory: 'nosuchcmd'".
// The filename is rendered with String; an empty filename still yields
// a pair of empty quotes after the colon, as in Python when filename is
// the empty string rather than None.
func OSError(errno syscall.Errno, filename string) string {
	return fmt.Sprintf("[Errno %d] %s: %s", uint64(errno), Strerror(errno), String(filename))
}
