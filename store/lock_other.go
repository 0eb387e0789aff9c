//go:build !unix

package store

import "os"

// releaseLock is a no-op where bbolt does not lock with flock.
func releaseLock(*os.File) {}
