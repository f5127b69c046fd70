package runtime

import (
	"testing"

	"github.com/sandbox-runtime/sandbox-runtime/wire"
)

// BenchmarkContextCreateFirst: a context's create (its interpreter started,
// its ready frame read) and its first `1+1`, cold (no spare interpreter),
// then its delete. Beside it, BenchmarkPythonCommand runs `python3 -c
// 'print(1+1)'` as a managed command, and BenchmarkContextExecute a trivial
// execution on a warm context (go test -bench Context -run '^$' ./runtime/).
func BenchmarkContextCreateFirst(b *testing.B) {
	_, cs := newContexts(b, nil)
	for b.Loop() {
		st, _, err := cs.Create(ContextRequest{})
		if err != nil {
			b.Fatal(err)
		}
		c, _ := cs.Get(st.ContextID)
		if _, end := run(b, c, "1+1", 0); end.Status != wire.ExecOK {
			b.Fatal(end)
		}
		if err := cs.Delete(st.ContextID); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkContextExecute(b *testing.B) {
	_, cs := newContexts(b, nil)
	c := mustContext(b, cs)
	for b.Loop() {
		if _, end := run(b, c, "1+1", 0); end.Status != wire.ExecOK {
			b.Fatal(end)
		}
	}
}

func BenchmarkPythonCommand(b *testing.B) {
	py := testPython(b)
	m := newManager(b, nil)
	for b.Loop() {
		st, _, err := m.Create(CreateRequest{Argv: []string{py, "-c", "print(1+1)"}})
		if err != nil {
			b.Fatal(err)
		}
		c, _ := m.Get(st.CommandID)
		<-c.Done()
	}
}

// BenchmarkContextCreateFirstSpare is BenchmarkContextCreateFirst with a
// spare interpreter ready before each create (the wait for it is not timed).
func BenchmarkContextCreateFirstSpare(b *testing.B) {
	_, cs := newContexts(b, func(c *Config) { c.ContextSpare = true })
	cs.Prestart()
	for b.Loop() {
		b.StopTimer()
		spareReady(b, cs)
		b.StartTimer()
		st, _, err := cs.Create(ContextRequest{})
		if err != nil {
			b.Fatal(err)
		}
		c, _ := cs.Get(st.ContextID)
		if _, end := run(b, c, "1+1", 0); end.Status != wire.ExecOK {
			b.Fatal(end)
		}
		if err := cs.Delete(st.ContextID); err != nil {
			b.Fatal(err)
		}
	}
}
