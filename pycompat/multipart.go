package pycompat

import (
	"regexp"
	"strings"
)

// dispositionOption is python-multipart 0.0.5's OPTION_RE.
var dispositionOption = func() *regexp.Regexp {
	special := regexp.QuoteMeta(`()<>@,;:\"/[]?={} ` + "\t")
	quoted := `"(?:\\.|[^"])*"`
	value := `(?:[^` + special + `]+|` + quoted + `)`
	return regexp.MustCompile(`(?:;|^)\s*([^` + special + `]+)\s*=\s*(` + value + `)`)
}()

// PartDisposition parses a part's raw Content-Disposition like
// python-multipart 0.0.5 and Starlette 0.26: quoted values are unquoted
// (only \\ and \"), an IE-style "C:\dir\name" filename keeps what follows
// the last backslash, and the bytes are read as UTF-8, else Latin-1. The
// whole relative path is kept (unlike multipart.Part.FileName).
func PartDisposition(h string) (name, filename string, hasName, hasFilename bool) {
	_, rest, ok := strings.Cut(h, ";")
	if !ok {
		return "", "", false, false
	}
	for _, m := range dispositionOption.FindAllStringSubmatch(rest, -1) {
		key, v := strings.ToLower(m[1]), m[2]
		if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
			v = strings.ReplaceAll(strings.ReplaceAll(v[1:len(v)-1], `\\`, `\`), `\"`, `"`)
		}
		switch key {
		case "name":
			name, hasName = userSafeDecode(v), true
		case "filename":
			if (len(v) >= 3 && v[1:3] == `:\`) || strings.HasPrefix(v, `\\`) {
				v = v[strings.LastIndexByte(v, '\\')+1:]
			}
			filename, hasFilename = userSafeDecode(v), true
		}
	}
	return name, filename, hasName, hasFilename
}

// userSafeDecode is Starlette's _user_safe_decode: UTF-8, else Latin-1.
func userSafeDecode(b string) string {
	if utf8ValidStrict([]byte(b)) {
		return b
	}
	r := make([]rune, len(b))
	for i := 0; i < len(b); i++ {
		r[i] = rune(b[i])
	}
	return string(r)
}
