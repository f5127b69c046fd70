package main

import (
	"io"
	"testing"
)

// A `bool` setting is a bool flag: bare --context-spare is true, and
// --context-spare=false still works.
func TestBoolSettingBareFlag(t *testing.T) {
	env := func(string) string { return "" }
	for _, tc := range []struct {
		args []string
		want bool
	}{
		{[]string{"--context-spare"}, true},
		{[]string{"--context-spare=true"}, true},
		{[]string{"--context-spare=false"}, false},
		{nil, false},
	} {
		c, err := loadConfig(tc.args, env, io.Discard)
		if err != nil {
			t.Fatalf("%q: %v", tc.args, err)
		}
		if c.ContextSpare != tc.want {
			t.Fatalf("%q: ContextSpare %v, want %v", tc.args, c.ContextSpare, tc.want)
		}
	}
	if _, err := loadConfig([]string{"--context-spare=maybe"}, env, io.Discard); err == nil {
		t.Fatal("--context-spare=maybe accepted")
	}
}
