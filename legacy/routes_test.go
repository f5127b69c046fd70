package legacy

import (
	"net/http/httptest"
	"strings"
	"testing"
)

// TestLegacyPathWithoutSlash: /list and /download (no slash) are the empty
// path: the server hands the Raw routes their prefix without its slash too
// (ServeMux would redirect).
func TestLegacyPathWithoutSlash(t *testing.T) {
	ts := newTestServer(t, nil)
	for prefix, want := range map[string]string{
		"/list/":     `[]`,
		"/download/": `{"message":"File not found"}`,
		"/exists/":   `{"path":"","exists":true}`,
	} {
		rec := httptest.NewRecorder()
		ts.Handler().ServeHTTP(rec, httptest.NewRequest("GET", strings.TrimSuffix(prefix, "/"), nil))
		if got := strings.TrimSpace(rec.Body.String()); got != want {
			t.Errorf("%s without slash: %d %s; want %s", prefix, rec.Code, got, want)
		}
	}
}
