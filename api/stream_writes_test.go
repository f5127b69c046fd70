package api

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestStreamLastLineWithClosingChunk: a command's stream ends in one write,
// the exit line together with HTTP's closing chunk (sink.last), not a flush
// of the exit line and a write of 5 bytes after it; an `end` line likewise.
func TestStreamLastLineWithClosingChunk(t *testing.T) {
	hs, log := recordingServer(t, newTestServer(t, nil), nil)

	do := func(method, path, body string) string {
		t.Helper()
		req, err := http.NewRequest(method, hs.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	lastWrite := func() string {
		t.Helper()
		w := log.Writes()
		if len(w) == 0 {
			t.Fatal("no writes recorded")
		}
		return string(w[len(w)-1].Data)
	}

	body := do("POST", "/v1/commands?stream=true", `{"argv":["echo","hi"]}`)
	if !strings.Contains(body, `"type":"exit"`) {
		t.Fatalf("no exit line in %q", body)
	}
	last := lastWrite()
	if !strings.Contains(last, `"type":"exit"`) || !strings.HasSuffix(last, "0\r\n\r\n") {
		t.Errorf("the last write is %q; want the exit line and the closing chunk in one write", last)
	}
	if n := len(log.Writes()); n > 3 {
		t.Errorf("%d writes for an echo hi stream; want at most 3 (headers and started, output, exit and the closing chunk)", n)
	}

	// A replay that ends caught up (no follow) ends with its `end` line.
	id := between(body, `"command_id":"`, `"`)
	before := len(log.Writes())
	body = do("GET", "/v1/commands/"+id+"/output?cursor=0&follow=false", "")
	if !strings.Contains(body, `"type":"end"`) && !strings.Contains(body, `"type":"exit"`) {
		t.Fatalf("replay %q has no last line", body)
	}
	last = lastWrite()
	if len(log.Writes()) == before || !strings.HasSuffix(last, "0\r\n\r\n") || !strings.Contains(last, `{"type":`) {
		t.Errorf("the replay's last write is %q; want its last line and the closing chunk in one write", last)
	}
}

// between returns what s holds between the first from and the next to.
func between(s, from, to string) string {
	_, after, ok := strings.Cut(s, from)
	if !ok {
		return ""
	}
	v, _, _ := strings.Cut(after, to)
	return v
}
