//go:build linux

package main

import (
	"net"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// TestWarnIfExposed: a listener beyond loopback without a token is warned
// about by name, with its address; loopback, or a token, is not (issue 20,
// item 18: `make run` served every interface with no token).
func TestWarnIfExposed(t *testing.T) {
	cases := []struct {
		addr  string
		token string
		warn  bool
	}{
		{"0.0.0.0:8888", "", true},
		{"[::]:8888", "", true},
		{"192.0.2.7:8888", "", true},
		{"127.0.0.1:8888", "", false},
		{"[::1]:8888", "", false},
		{"0.0.0.0:8888", "/run/token", false},
	}
	for _, c := range cases {
		core, logs := observer.New(zap.InfoLevel)
		addr, err := net.ResolveTCPAddr("tcp", c.addr)
		if err != nil {
			t.Fatal(err)
		}
		warnIfExposed(zap.New(core), addr, c.token)
		got := logs.FilterLevelExact(zap.WarnLevel).All()
		if !c.warn {
			if len(got) != 0 {
				t.Errorf("%s token %q: warned %q; want nothing", c.addr, c.token, got[0].Message)
			}
			continue
		}
		if len(got) != 1 || got[0].ContextMap()["addr"] != addr.String() {
			t.Errorf("%s without a token: logged %+v; want one warning naming the address", c.addr, got)
		}
	}
}
