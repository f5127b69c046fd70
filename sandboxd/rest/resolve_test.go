package rest

import (
	"net/http/httptest"
	"testing"
)

func TestResolve(t *testing.T) {
	base := t.TempDir()
	s := New(Options{BaseDir: base})
	for _, c := range []struct{ in, want, code string }{
		{"", "", ""},
		{".", "", ""},
		{"a/b.txt", "a/b.txt", ""},
		{"a//b/./c", "a/b/c", ""},
		{"a/../b", "b", ""},
		{"a/b/", "a/b", ""},
		{"..", "", CodePermissionDenied},
		{"../x", "", CodePermissionDenied},
		{"a/../../x", "", CodePermissionDenied},
		{"/", "", ""},
		{"/etc/passwd", "etc/passwd", ""},
		{"/../../etc", "etc", ""},
		{base, "", ""},
		{base + "/x/y", "x/y", ""},
		{base + "-evil/x", base[1:] + "-evil/x", ""}, // not under the base dir: re-rooted
		{"a\x00b", "", CodeInvalidArgument},
	} {
		got, err := s.resolve(c.in)
		code := ""
		if fe, ok := err.(*fileErr); ok {
			code = fe.code
		} else if err != nil {
			code = err.Error()
		}
		if got != c.want || code != c.code {
			t.Errorf("resolve(%q) = %q, %q; want %q, %q", c.in, got, code, c.want, c.code)
		}
	}
}

func TestMetadataFilter(t *testing.T) {
	s := New(Options{BaseDir: t.TempDir(), Environ: []string{
		"SANDBOX_ID=abc", "SANDBOX_ID=second", "SANDBOX_API_KEY=k", "SANDBOX_db_password=p", "SANDBOX_RUNTIME_TOKEN_FILE=/t",
		"SANDBOX_OWNER=the-token", "AWS_SECRET_ACCESS_KEY=x", "HOME=/root", "SANDBOXNOUNDERSCORE=1",
	}, IsSecret: func(v string) bool { return v == "the-token" }})
	got := s.metadataNow()
	if len(got) != 1 || got["SANDBOX_ID"] != "abc" {
		t.Errorf("metadata %v; want only SANDBOX_ID=abc", got)
	}
}

func TestRefuseShapes(t *testing.T) {
	for v1, want := range map[string]string{"forbidden": CodePermissionDenied, "unauthorized": CodeUnauthenticated,
		"too_busy": CodeResourceExhausted, "internal": CodeInternal} {
		w := httptest.NewRecorder()
		Refuse(w, 503, v1, "m")
		if body := w.Body.String(); body != `{"code":"`+want+`","message":"m"}` {
			t.Errorf("Refuse(%q) wrote %s", v1, body)
		}
	}
}
