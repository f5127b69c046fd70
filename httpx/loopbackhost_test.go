package httpx

import "testing"

func TestLoopbackHost(t *testing.T) {
	for host, want := range map[string]bool{
		"127.0.0.1": true, "127.0.0.1:8080": true, "127.5.6.7:1": true,
		"[::1]": true, "[::1]:9": true, "::1": true, "localhost": true, "LOCALHOST:80": true,
		"": false, "rebind.attacker.example:8080": false, "rebind.attacker.example": false,
		"localhost.attacker.example": false, "10.0.0.1:80": false, "0.0.0.0:80": false,
		"127.0.0.1:x": false, "127.0.0.1:": false, "[fe80::1%lo]:1": false, "[::ffff:127.0.0.1]:1": true,
		"2130706433": false, "127.1": false,
	} {
		if got := LoopbackHost(host); got != want {
			t.Errorf("LoopbackHost(%q) = %v, want %v", host, got, want)
		}
	}
}
