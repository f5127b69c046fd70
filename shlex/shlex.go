// Package shlex splits command lines exactly like Python 3.11's
// shlex.split and quotes strings exactly like shlex.quote.
//
// Split reproduces shlex.split(s) with its default arguments, that is a
// shlex.shlex(s, posix=True) lexer with whitespace_split=True and
// commenters set to the empty string (so '#' is an ordinary character):
//
//   - Whitespace is exactly space, tab, newline and carriage return
//     (" \t\r\n"). Every other character, including vertical tab, form
//     feed, NUL and all non-ASCII characters (even Unicode spaces such as
//     U+00A0), is part of a word.
//   - The quote characters are ' and ". Inside single quotes every
//     character is literal. Inside double quotes a backslash escapes only
//     a following backslash or double quote; before any other character
//     the backslash is kept literally.
//   - Outside quotes a backslash escapes any following character,
//     including a newline (there is no line continuation: "a\\\nb" yields
//     the single token "a\nb").
//   - Adjacent quoted and unquoted pieces are joined into one token, and
//     an empty quoted string (a pair of double or of single quotes)
//     produces an empty token.
//   - An unterminated quote yields ErrNoClosingQuotation and a trailing
//     unescaped backslash yields ErrNoEscapedCharacter, mirroring
//     Python's ValueError messages.
//
// The input is processed byte by byte. Because every character with a
// special meaning is ASCII, this is equivalent to Python's code point
// processing for valid UTF-8, and bytes of invalid UTF-8 sequences are
// passed through unchanged inside words.
package shlex

import (
	"errors"
	"strings"
)

// ErrNoClosingQuotation is returned by Split when the input ends inside a
// single- or double-quoted section. Its message matches Python's
// ValueError("No closing quotation").
var ErrNoClosingQuotation = errors.New("No closing quotation")

// ErrNoEscapedCharacter is returned by Split when the input ends with an
// escaping backslash that has no character to escape. Its message matches
// Python's ValueError("No escaped character").
var ErrNoEscapedCharacter = errors.New("No escaped character")

// Lexer states, named after the corresponding values of Python's
// shlex.shlex.state.
const (
	stateSpace  = ' '  // between tokens
	stateWord   = 'a'  // inside a token, outside quotes
	stateSingle = '\'' // inside single quotes
	stateDouble = '"'  // inside double quotes
	stateEscape = '\\' // just after an escaping backslash
)

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\r' || c == '\n'
}

// Split splits s into tokens using the rules of Python 3.11's
// shlex.split(s) (posix=True, comments=False); see the package
// documentation for the details.
//
// On success the result is never nil: an empty or whitespace-only s yields
// an empty slice. On failure the returned error is ErrNoClosingQuotation
// or ErrNoEscapedCharacter and the token slice is nil.
//
// long: one state machine read character by character, as Python's
// read_token; its states only make sense together.
func Split(s string) ([]string, error) {
	tokens := []string{}
	var tok strings.Builder
	state := byte(stateSpace)
	// escapedState is the state to return to after an escape sequence
	// (stateWord or stateDouble).
	escapedState := byte(stateWord)

	emit := func() {
		tokens = append(tokens, tok.String())
		tok.Reset()
	}

	for i := 0; i < len(s); i++ {
		c := s[i]
		switch state {
		case stateSpace:
			// The token is always empty in this state.
			switch {
			case isSpace(c):
				// Skip.
			case c == '\\':
				escapedState = stateWord
				state = stateEscape
			case c == '\'' || c == '"':
				state = c
			default:
				tok.WriteByte(c)
				state = stateWord
			}
		case stateWord:
			switch {
			case isSpace(c):
				// Every way into stateWord either added a character
				// or closed a quote, so the token is always emitted.
				emit()
				state = stateSpace
			case c == '\'' || c == '"':
				state = c
			case c == '\\':
				escapedState = stateWord
				state = stateEscape
			default:
				tok.WriteByte(c)
			}
		case stateSingle:
			if c == '\'' {
				state = stateWord
			} else {
				tok.WriteByte(c)
			}
		case stateDouble:
			switch c {
			case '"':
				state = stateWord
			case '\\':
				escapedState = stateDouble
				state = stateEscape
			default:
				tok.WriteByte(c)
			}
		case stateEscape:
			// In POSIX shells only the quote itself or the escape
			// character may be escaped within quotes.
			if escapedState == stateDouble && c != '\\' && c != '"' {
				tok.WriteByte('\\')
			}
			tok.WriteByte(c)
			state = escapedState
		}
	}

	switch state {
	case stateWord:
		emit()
	case stateSingle, stateDouble:
		return nil, ErrNoClosingQuotation
	case stateEscape:
		return nil, ErrNoEscapedCharacter
	}
	return tokens, nil
}

// isSafe reports whether c may appear unquoted in the output of Quote; it
// matches Python's [\w@%+=:,./-] with the re.ASCII flag.
func isSafe(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("_@%+=:,./-", c) >= 0
}

// Quote returns a shell-escaped version of s, exactly like Python's
// shlex.quote: the empty string becomes a pair of single quotes, a
// string consisting only of ASCII letters, digits and the characters
// _@%+=:,./- is returned unchanged, and anything else is wrapped in
// single quotes with each embedded single quote written as '"'"'.
//
// For every s, Split(Quote(s)) returns []string{s}.
func Quote(s string) string {
	if s == "" {
		return "''"
	}
	safe := true
	for i := 0; i < len(s); i++ {
		if !isSafe(s[i]) {
			safe = false
			break
		}
	}
	if safe {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'"'"'`) + "'"
}

// Join quotes each element of args with Quote and joins the results with
// single spaces, like Python's shlex.join. For every args,
// Split(Join(args)) returns args (an empty slice for empty args).
func Join(args []string) string {
	quoted := make([]string, len(args))
	for i, a := range args {
		quoted[i] = Quote(a)
	}
	return strings.Join(quoted, " ")
}
