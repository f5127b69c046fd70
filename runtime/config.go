package runtime

import (
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"go.uber.org/zap"
)

// Clock tells the time. The Manager reads it for created/started/finished
// times and for expiry, so tests can move time without sleeping.
type Clock interface {
	Now() time.Time
}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

// Observer receives the events of the Manager that metrics count (package
// metrics implements it; the runtime knows nothing of how they are shown).
// Its methods are called from hot paths and must not block. A nil Observer
// in Config means none.
type Observer interface {
	CommandStarted(spawn time.Duration)      // a managed command's process started, after spawn
	CommandFinished(s State, truncated bool) // it ended in state s, its ring having dropped output or not
	SpawnFailed(class SpawnClass)            // Create could not start the process (ErrSpawnFailed)
	OutputBytes(stdout bool, n int)          // n bytes read from a pipe (a terminal counts as stdout)
	HandleEvicted()                          // a finished handle was dropped at the retained limit
	HandleExpired()                          // a finished handle was dropped after its TTL
	LegacyExecuted()                         // a legacy execution was admitted
}

type nopObserver struct{}

func (nopObserver) CommandStarted(time.Duration) {}
func (nopObserver) CommandFinished(State, bool)  {}
func (nopObserver) SpawnFailed(SpawnClass)       {}
func (nopObserver) OutputBytes(bool, int)        {}
func (nopObserver) HandleEvicted()               {}
func (nopObserver) HandleExpired()               {}
func (nopObserver) LegacyExecuted()              {}

// Config holds the limits of protocol.md §2. New (and Validate) fill every
// zero limit, duration and count from DefaultConfig, and a nil Clock, Logger
// or Observer with the system clock, zap.NewNop and none. BaseDir has no
// default (it must be absolute) and neither has Env (empty: commands start
// with an empty environment). A DefaultTimeout above MaxTimeout is lowered
// to it. Validate reports values that make no sense.
type Config struct {
	MaxRunning     int           // running commands at once (SANDBOX_MAX_RUNNING; ClassCommand of admission.go)
	MaxRetained    int           // handles retained, running + finished (SANDBOX_MAX_RETAINED)
	OutputLimit    int           // ring bytes per command (SANDBOX_OUTPUT_LIMIT_BYTES)
	OutputRecords  int           // ring records per command
	ResultTTL      time.Duration // lifetime of a finished handle (SANDBOX_RESULT_TTL_SECONDS)
	DefaultTimeout time.Duration // timeout when a request gives none (SANDBOX_DEFAULT_TIMEOUT_SECONDS)
	MaxTimeout     time.Duration // cap on any timeout (SANDBOX_EXEC_TIMEOUT_SECONDS)
	KillGrace      time.Duration // SIGTERM→SIGKILL grace, and pipe grace after leader exit (SANDBOX_KILL_GRACE_SECONDS); NoKillGrace for none
	StdinLimit     int           // bytes queued for a command's stdin
	Tombstones     int           // ids of dropped handles remembered for 410
	EventLog       int           // events the lifecycle feed retains (0: EventLogSize; events.go)
	BaseDir        string        // default cwd; must be absolute
	Env            []string      // the environment every command starts from ("K=V")

	// LegacyOutputLimit caps each stream of a legacy /execute (SANDBOX_EXECUTE_OUTPUT_LIMIT_BYTES).
	LegacyOutputLimit int
	// MaxExecutions is how many legacy /execute calls (Manager.Execute)
	// run, or have their answer written, at once; further calls wait
	// (SANDBOX_MAX_EXECUTIONS; ClassExecution of admission.go).
	MaxExecutions int

	// Code contexts (contexts.go, docs/contexts.md).
	MaxContexts   int           // contexts at once (SANDBOX_MAX_CONTEXTS; ClassContext of admission.go)
	ContextIdle   time.Duration // a context idle this long is deleted (SANDBOX_CONTEXT_IDLE_SECONDS)
	ContextMemory int64         // RLIMIT_AS of each interpreter in bytes, -1 for none (SANDBOX_CONTEXT_MEMORY_BYTES)
	Python        string        // the interpreter of contexts (SANDBOX_PYTHON); "" is python3 on the commands' PATH
	ContextSpare  bool          // keep one interpreter started ahead of the next create (SANDBOX_CONTEXT_SPARE)

	Clock    Clock       // nil: the system clock
	Logger   *zap.Logger // nil: zap.NewNop()
	Observer Observer    // nil: none
}

// NoKillGrace as Config.KillGrace means no grace: SIGKILL right after SIGTERM
// (the zero value means the default, 2 s). Config() reports it as 0.
const NoKillGrace time.Duration = -1

// DefaultConfig returns the contract's defaults (BaseDir and Env left empty).
func DefaultConfig() Config {
	return Config{
		MaxRunning:        16,
		MaxRetained:       64,
		OutputLimit:       1 << 20,
		OutputRecords:     8192,
		ResultTTL:         15 * time.Minute,
		DefaultTimeout:    60 * time.Second,
		MaxTimeout:        300 * time.Second,
		KillGrace:         2 * time.Second,
		StdinLimit:        1 << 20,
		Tombstones:        4096,
		LegacyOutputLimit: 8 << 20,
		MaxExecutions:     8,
		MaxContexts:       8,
		ContextIdle:       15 * time.Minute,
		ContextMemory:     4 << 30,
	}
}

// withDefaults fills zero fields from DefaultConfig.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	orDefault(&c.MaxRunning, d.MaxRunning)
	orDefault(&c.MaxRetained, d.MaxRetained)
	orDefault(&c.OutputLimit, d.OutputLimit)
	orDefault(&c.OutputRecords, d.OutputRecords)
	orDefault(&c.ResultTTL, d.ResultTTL)
	orDefault(&c.DefaultTimeout, d.DefaultTimeout)
	orDefault(&c.MaxTimeout, d.MaxTimeout)
	orDefault(&c.KillGrace, d.KillGrace)
	orDefault(&c.StdinLimit, d.StdinLimit)
	orDefault(&c.Tombstones, d.Tombstones)
	orDefault(&c.LegacyOutputLimit, d.LegacyOutputLimit)
	orDefault(&c.MaxExecutions, d.MaxExecutions)
	orDefault(&c.MaxContexts, d.MaxContexts)
	orDefault(&c.ContextIdle, d.ContextIdle)
	orDefault(&c.ContextMemory, d.ContextMemory)
	// The cap wins: SANDBOX_EXEC_TIMEOUT_SECONDS=3 alone must not be refused.
	c.DefaultTimeout = min(c.DefaultTimeout, c.MaxTimeout)
	if c.Clock == nil {
		c.Clock = systemClock{}
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	if c.Observer == nil {
		c.Observer = nopObserver{}
	}
	return c
}

// orDefault sets *v to d when *v is the zero value.
func orDefault[T comparable](v *T, d T) {
	var zero T
	if *v == zero {
		*v = d
	}
}

// Validate reports every inconsistency in c (after defaults are applied),
// joined into one error (errors.Join), nil when there is none.
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	pos := func(name string, v int) {
		if v <= 0 {
			errs = append(errs, fmt.Errorf("%s must be > 0 (got %d)", name, v))
		}
	}
	pos("max running", c.MaxRunning)
	pos("max retained", c.MaxRetained)
	pos("output limit", c.OutputLimit)
	pos("output records", c.OutputRecords)
	pos("stdin limit", c.StdinLimit)
	pos("tombstones", c.Tombstones)
	pos("legacy output limit", c.LegacyOutputLimit)
	pos("max executions", c.MaxExecutions)
	if c.MaxRunning > c.MaxRetained {
		errs = append(errs, fmt.Errorf("max running (%d) must not exceed max retained (%d)", c.MaxRunning, c.MaxRetained))
	}
	for name, d := range map[string]time.Duration{"result TTL": c.ResultTTL, "default timeout": c.DefaultTimeout, "max timeout": c.MaxTimeout} {
		if d <= 0 {
			errs = append(errs, fmt.Errorf("%s must be > 0 (got %s)", name, d))
		}
	}
	if c.KillGrace < 0 && c.KillGrace != NoKillGrace {
		errs = append(errs, fmt.Errorf("kill grace must be >= 0 or NoKillGrace (got %s)", c.KillGrace))
	}
	if c.BaseDir == "" || !filepath.IsAbs(c.BaseDir) {
		errs = append(errs, fmt.Errorf("base dir must be an absolute path (got %q)", c.BaseDir))
	}
	return errors.Join(errs...)
}
