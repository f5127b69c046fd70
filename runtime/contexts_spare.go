package runtime

import (
	"maps"

	"go.uber.org/zap"

	"github.com/sandbox-runtime/sandbox-runtime/wire"
)

// The spare interpreter (Config.ContextSpare, docs/contexts.md): one
// interpreter started ahead of time with the default cwd and no envs
// overrides, handed to the next create that asks for exactly that, and
// replaced in the background. It holds no ClassContext place until it is
// taken (a create takes its place as usual), it is never expired, and
// shutdown kills it like any interpreter. A spare that died before it was
// taken is dropped and replaced.

// Prestart starts the spare interpreter when Config.ContextSpare is set
// (main calls it at start-up, so that even the first create is warm).
func (cs *Contexts) Prestart() {
	if cs.m.cfg.ContextSpare {
		go cs.refill()
	}
}

// refill starts a spare if there is none.
func (cs *Contexts) refill() {
	m := cs.m
	cs.mu.Lock()
	if cs.spare != nil || cs.refilling {
		cs.mu.Unlock()
		return
	}
	cs.refilling = true
	cs.mu.Unlock()
	c := &CodeContext{
		cs: cs, log: cs.log.With(zap.Bool("spare", true)), cwd: m.cfg.BaseDir, sum: envsDigest(nil),
		state: wire.ContextReady, execs: map[int]*execution{}, byClient: map[string]*execution{}, nextN: 1,
	}
	err := c.start()
	cs.mu.Lock()
	cs.refilling = false
	if err == nil {
		cs.spare = c
	}
	cs.mu.Unlock()
	if err != nil {
		cs.log.Info("no spare interpreter", zap.Error(err))
	}
}

// takeSpareLocked hands the spare to a create of id with cwd and envs, if
// it fits and is alive; nil otherwise. Called with cs.mu held.
func (cs *Contexts) takeSpareLocked(id, cwd string, envs map[string]string, place func()) *CodeContext {
	c := cs.spare
	if c == nil || cwd != c.cwd || len(envs) != 0 {
		return nil
	}
	cs.spare = nil
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.in == nil { // it died while it waited: a fresh one is started
		go cs.refill()
		return nil
	}
	now := cs.m.cfg.Clock.Now()
	c.id, c.place, c.envs = id, place, maps.Clone(envs)
	c.log = cs.log.With(zap.String("context_id", id))
	c.created, c.lastUsed = now, now
	go cs.refill()
	return c
}
