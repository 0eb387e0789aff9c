//go:build unix

package store

import (
	"os"
	"syscall"
)

// releaseLock drops the flock bbolt holds on f (see Open).
func releaseLock(f *os.File) { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN) }
