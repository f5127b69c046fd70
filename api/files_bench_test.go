package api

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// BenchmarkFilesGet is one GET of a small file under a three-level path
// over a keep-alive connection: the cost of resolution plus the os.Root
// open of every request.
func BenchmarkFilesGet(b *testing.B) {
	ts := newTestServer(b, nil)
	dir := filepath.Join(ts.BaseDir, "a", "b", "c")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "f.txt"), []byte(strings.Repeat("x", 4096)), 0o644); err != nil {
		b.Fatal(err)
	}
	client := &http.Client{}
	b.ResetTimer()
	for b.Loop() {
		resp, err := client.Get(ts.URL + "/v1/files/a/b/c/f.txt")
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatalf("status %d", resp.StatusCode)
		}
	}
}

// BenchmarkFilesPut is one PUT of 4 KiB into an existing directory (temp
// file, fsync of file and directory, rename).
func BenchmarkFilesPut(b *testing.B) {
	ts := newTestServer(b, nil)
	if err := os.MkdirAll(filepath.Join(ts.BaseDir, "a", "b"), 0o755); err != nil {
		b.Fatal(err)
	}
	body := strings.Repeat("x", 4096)
	client := &http.Client{}
	b.ResetTimer()
	for b.Loop() {
		req, _ := http.NewRequest("PUT", ts.URL+"/v1/files/a/b/f.txt", strings.NewReader(body))
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 204 {
			b.Fatalf("status %d", resp.StatusCode)
		}
	}
}

// BenchmarkFilesGetLarge is one GET of a 64 MiB file to a client that
// reads as fast as it can, through /v1/files and legacy /download: the
// cost of the connection's unsent limit (httpx.DefaultUnsent) and of the
// per-chunk write deadlines on a fast reader.
// go test -run '^$' -bench FilesGetLarge -benchtime 20x ./api/
func BenchmarkFilesGetLarge(b *testing.B) {
	ts := newTestServer(b, nil)
	const size = 64 << 20
	if err := os.WriteFile(filepath.Join(ts.BaseDir, "big.bin"), []byte(strings.Repeat("x", size)), 0o644); err != nil {
		b.Fatal(err)
	}
	for _, path := range []string{"/v1/files/big.bin", "/download/big.bin"} {
		b.Run(strings.Split(path, "/")[1], func(b *testing.B) {
			client := &http.Client{}
			b.SetBytes(size)
			for b.Loop() {
				resp, err := client.Get(ts.URL + path)
				if err != nil {
					b.Fatal(err)
				}
				n, _ := io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 || n != size {
					b.Fatalf("status %d, %d bytes", resp.StatusCode, n)
				}
			}
		})
	}
}
