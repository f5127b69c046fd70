package runtime

import (
	"context"
	"errors"
	"sync"
)

// Admission: the one place that decides whether a piece of work may begin
// (protocol.md §2 "Admission", §5 "Slots"). Every class of work has one row
// in the rules table below: how many of it may be held at once, and what a
// request gets when its class is full. Each class counts only its own
// places, so no class can take another's: a flood of legacy /execute calls
// never takes a managed command's place, nor the reverse, and large decodes
// are bounded apart from both.
//
// The retained limit (Config.MaxRetained) is not an admission rule: a
// create is never refused for it; the oldest finished handle is evicted
// instead (Manager.evictLocked). Limits on connections and on bodies being
// read are the transport's (api's middleware), before a request reaches a
// class here.
//
// Adding a class of work (a gRPC Start, a code context, …):
//  1. add a Class constant (before numClasses) that names the work;
//  2. add its row to rules: the limit (a Config field, documented in
//     docs/configuration.md, or a constant), whether a full class refuses
//     (with its error: the sentinel the transports map to a status) or
//     waits, and whether shutdown ends the wait;
//  3. take a place with m.adm.admit (or a typed wrapper such as
//     AdmitExecution) where the work begins, and call the release it
//     returns where the work ends (it is idempotent);
//  4. add the row to protocol.md §2 "Admission of work" and its answers
//     to TestAdmissionRules (TestAdmissionTableIsComplete checks the row).
//
// A class is only for work that is its own kind: a gRPC Start is a managed
// command (a live process with a handle: ClassCommand, through Create); a
// gRPC Execute leaves no handle, so it is a ClassExecution (Manager.Execute)
// or a row of its own if it must not share legacy /execute's places; a
// code context (a Python process per context) is a row of its own, with
// its count as the limit, refused when full.

// Class is a class of work the Manager admits.
type Class int

const (
	// ClassCommand is a managed command (a v1 create): a live process with
	// a retained handle, from its registration until its owner has
	// finished it. Config.MaxRunning places; a create beyond them is
	// refused (ErrTooManyRunning: 429 too_many_running with Retry-After).
	ClassCommand Class = iota
	// ClassExecution is a one-shot execution that is not a handle (legacy
	// /execute, Manager.Execute): from its admission until the caller
	// releases its result. Config.MaxExecutions places; a call beyond them
	// waits for one, for as long as its context lives, until shutdown.
	ClassExecution
	// ClassDecode is the decode of a request body larger than LargeBody
	// (its parse, and for /execute the split of its command), which costs
	// a multiple of the body's size while it runs. maxLargeDecodes places,
	// shared by every transport of the Manager; a decode beyond them waits
	// for as long as its client stays. Smaller bodies never take a place.
	ClassDecode
	// ClassContext is a code context (contexts.go): its interpreter
	// process, from its create until it is deleted or expires (a context
	// whose state is lost still holds its place). Config.MaxContexts
	// places, apart from ClassCommand's; a create beyond them is refused
	// (ErrTooManyContexts: 429 too_many_contexts).
	ClassContext

	numClasses // not a class: the size of the rules table
)

// String names the class as the rules table does.
func (c Class) String() string {
	if c < 0 || c >= numClasses {
		return "unknown class"
	}
	return rules[c].name
}

// LargeBody is the size above which a body's decode takes a ClassDecode
// place: a 1 MiB create with 87,000 envs keys took 27 MiB while decoded, a
// 1 MiB /execute of "echo a a a …" (500,000 words once split) 29 MiB, and 60
// of either at once took 1.2–1.5 GB.
const LargeBody = 64 << 10

// maxLargeDecodes is how many large decodes run at once (ClassDecode).
const maxLargeDecodes = 4

// whenFull is what a request gets when its class has no free place.
type whenFull int

const (
	refuse whenFull = iota // refused at once with the row's refusal; nothing started
	wait                   // waits for a place while its context lives
)

// rule is one class's admission rule.
type rule struct {
	name  string
	limit func(Config) int // places, from the effective configuration
	full  whenFull
	// refusal is the error of a refused request (full == refuse), given
	// how many places are held and the limit.
	refusal func(held, limit int) error
	// shutdownEnds: a waiter is woken by Shutdown with ErrShuttingDown
	// (full == wait). A decode does not start work and is left to its
	// client.
	shutdownEnds bool
	// gone is the error of a waiter whose context ended (full == wait);
	// nil means ctx.Err().
	gone error
	// minSize: a request of this size or less takes no place (0: every
	// request takes one).
	minSize int
}

// rules is the admission table: one row per class.
var rules = [numClasses]rule{
	ClassCommand: {
		name:  "managed command",
		limit: func(c Config) int { return c.MaxRunning },
		full:  refuse,
		refusal: func(held, limit int) error {
			return errorf(ErrTooManyRunning, "%d managed commands are running (limit %d)", held, limit)
		},
	},
	ClassExecution: {
		name:         "execution",
		limit:        func(c Config) int { return c.MaxExecutions },
		full:         wait,
		shutdownEnds: true,
	},
	ClassDecode: {
		name:    "large decode",
		limit:   func(Config) int { return maxLargeDecodes },
		full:    wait,
		gone:    ErrClientGone,
		minSize: LargeBody,
	},
	ClassContext: {
		name:  "code context",
		limit: func(c Config) int { return c.MaxContexts },
		full:  refuse,
		refusal: func(held, limit int) error {
			return errorf(ErrTooManyContexts, "%d code contexts exist (limit %d); delete one", held, limit)
		},
	},
}

// ErrClientGone is the error of a request whose context ended (its client
// left) while it waited for a place.
var ErrClientGone = errors.New("the client left while the request waited for a decode turn")

// admission holds the places of every class of one Manager.
type admission struct {
	places     [numClasses]chan struct{} // one token per place held
	shutdownCh <-chan struct{}           // the Manager's: closed when Shutdown begins
}

func newAdmission(cfg Config, shutdownCh <-chan struct{}) *admission {
	a := &admission{shutdownCh: shutdownCh}
	for c, r := range rules {
		a.places[c] = make(chan struct{}, max(1, r.limit(cfg)))
	}
	return a
}

// held is how many places of class c are taken.
func (a *admission) held(c Class) int { return len(a.places[c]) }

// admit takes a place of class c for a request of size bytes (size matters
// only to a class with a minSize), following the class's rule: a full
// refusing class answers its refusal at once; a full waiting class waits
// until a place frees, ctx ends (ctx.Err(), or ErrClientGone for a decode)
// or, where shutdown ends the wait, shutdown begins (ErrShuttingDown). The
// returned release gives the place back; it is idempotent, and a no-op
// when no place was needed.
func (a *admission) admit(ctx context.Context, c Class, size int) (release func(), err error) {
	r := &rules[c]
	if r.minSize > 0 && size <= r.minSize {
		return func() {}, nil
	}
	ch := a.places[c]
	if r.full == refuse {
		select {
		case ch <- struct{}{}:
			return a.releaser(ch), nil
		default:
			return nil, r.refusal(len(ch), cap(ch))
		}
	}
	var shutdown <-chan struct{}
	if r.shutdownEnds {
		shutdown = a.shutdownCh
		select { // a waiter never starts once shutdown has begun
		case <-shutdown:
			return nil, errorf(ErrShuttingDown, "the runtime is shutting down")
		default:
		}
	}
	select {
	case ch <- struct{}{}:
		return a.releaser(ch), nil
	case <-ctx.Done():
		if r.gone != nil {
			return nil, r.gone
		}
		return nil, ctx.Err()
	case <-shutdown:
		return nil, errorf(ErrShuttingDown, "the runtime is shutting down")
	}
}

// releaser returns the idempotent give-back of one place of ch.
func (a *admission) releaser(ch chan struct{}) func() {
	var once sync.Once
	return func() { once.Do(func() { <-ch }) }
}

// EnterDecode takes a large-decode place (ClassDecode) for a body of size
// bytes about to be parsed, or a command about to be split, and returns the
// function that gives it back (a no-op for a body of LargeBody bytes or
// less, which never waits). It waits while the class is full and fails with
// ErrClientGone only when ctx ends first. The places are the Manager's:
// every transport serving this Manager shares them, and no other Manager's
// decodes count.
func (m *Manager) EnterDecode(ctx context.Context, size int) (leave func(), err error) {
	return m.adm.admit(ctx, ClassDecode, size)
}

// ExecSlot is an execution's admitted place (ClassExecution), taken before
// its argv exists: a caller whose argv is costly to hold (the words of a
// large command) waits for its place with the cheaper form and builds the
// argv once admitted. Give it to ExecuteIn, or Release it.
type ExecSlot struct{ release func() }

// Release gives the place back; it is idempotent. ExecuteIn takes the
// place over: after ExecuteIn, release the result instead.
func (s *ExecSlot) Release() {
	if s != nil && s.release != nil {
		s.release()
		s.release = nil
	}
}

// AdmitExecution waits for an execution place as Execute does: until one
// frees, ctx is done (ctx.Err()) or shutdown begins (ErrShuttingDown).
func (m *Manager) AdmitExecution(ctx context.Context) (*ExecSlot, error) {
	release, err := m.adm.admit(ctx, ClassExecution, 0)
	if err != nil {
		return nil, err
	}
	return &ExecSlot{release: release}, nil
}
