//go:build linux

package main

import (
	"syscall"

	"go.uber.org/zap"
)

// raiseFDLimit raises the soft RLIMIT_NOFILE to the hard limit, so that the
// connection and body limits of the api package (a quarter of it for
// bodies, see api/bodylimit.go) are taken from the largest budget the pod
// allows, and logs both. The Go runtime already does this at start on
// Linux (and gives commands the original soft limit back); calling
// Setrlimit only when the soft limit is still lower keeps that for commands.
func raiseFDLimit(log *zap.Logger) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		log.Warn("reading the fd limit", zap.Error(err))
		return
	}
	if lim.Cur < lim.Max {
		raised := lim
		raised.Cur = raised.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &raised); err != nil {
			log.Warn("raising the fd limit", zap.Uint64("soft", lim.Cur), zap.Uint64("hard", lim.Max), zap.Error(err))
			return
		}
		lim = raised
	}
	log.Info("fd limit", zap.Uint64("soft", lim.Cur), zap.Uint64("hard", lim.Max))
}
