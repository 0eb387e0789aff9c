//go:build !unix

package procgroup

import (
	"errors"
	"os/exec"
)

// Isolate leaves cmd as it is: without process groups, cancellation kills
// the program itself (exec's default), not what it started.
func Isolate(cmd *exec.Cmd) {}

// SetNice reports that niceness is Unix's.
func SetNice(pid, nice int) error {
	return errors.ErrUnsupported
}
